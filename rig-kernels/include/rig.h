// rig's OpenCL C prelude: the work-item functions ROCm's device libraries would give, for
// kernels built without them (-nogpulib). rig-kernels includes it before every OpenCL C
// source unless asked not to; it is also rig_kernels::OPENCL_PRELUDE, to copy.
//
// The ids come from the hardware (__builtin_amdgcn_workitem_id_*, workgroup_id_*); the group
// sizes from the dispatch (__builtin_amdgcn_workgroup_size_*); the group counts and the
// grid's dimensions from code object v5's hidden arguments (hidden_block_count_{x,y,z} at
// bytes 0, 4, 8 and hidden_grid_dims at byte 64 of the implicit-argument block: LLVM's
// AMDGPUUsage). rig's grids are whole groups that start at work-item 0, so global offsets
// are 0 and every group is full.
#ifndef RIG_H
#define RIG_H

#define RIG_IMPLICIT ((__constant uint *)__builtin_amdgcn_implicitarg_ptr())

static inline uint rig_local_id(uint d) {
  return d == 0 ? __builtin_amdgcn_workitem_id_x()
       : d == 1 ? __builtin_amdgcn_workitem_id_y()
       : d == 2 ? __builtin_amdgcn_workitem_id_z() : 0;
}

static inline uint rig_group_id(uint d) {
  return d == 0 ? __builtin_amdgcn_workgroup_id_x()
       : d == 1 ? __builtin_amdgcn_workgroup_id_y()
       : d == 2 ? __builtin_amdgcn_workgroup_id_z() : 0;
}

static inline uint rig_local_size(uint d) {
  return d == 0 ? __builtin_amdgcn_workgroup_size_x()
       : d == 1 ? __builtin_amdgcn_workgroup_size_y()
       : d == 2 ? __builtin_amdgcn_workgroup_size_z() : 1;
}

static inline size_t rig_global_id(uint d) {
  return (size_t)rig_group_id(d) * rig_local_size(d) + rig_local_id(d);
}

// Code object v5 and later: the groups of the grid along d, and its dimensions.
static inline uint rig_num_groups(uint d) { return d < 3 ? RIG_IMPLICIT[d] : 1; }
static inline uint rig_grid_dims(void) { return ((__constant ushort *)RIG_IMPLICIT)[32]; }

static inline void rig_barrier(void) {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

#ifndef RIG_NO_OPENCL_NAMES
// OpenCL C's names (OpenCL C 2.0, section 6.13.1 and 6.13.8).
// clang's opencl-c-base.h defines the fence flags; these are for a compiler that does not.
#ifndef CLK_LOCAL_MEM_FENCE
#define CLK_LOCAL_MEM_FENCE 0x01
#endif
#ifndef CLK_GLOBAL_MEM_FENCE
#define CLK_GLOBAL_MEM_FENCE 0x02
#endif
static inline size_t get_local_id(uint d) { return rig_local_id(d); }
static inline size_t get_group_id(uint d) { return rig_group_id(d); }
static inline size_t get_local_size(uint d) { return rig_local_size(d); }
static inline size_t get_enqueued_local_size(uint d) { return rig_local_size(d); }
static inline size_t get_global_id(uint d) { return rig_global_id(d); }
static inline size_t get_num_groups(uint d) { return rig_num_groups(d); }
static inline size_t get_global_size(uint d) { return (size_t)rig_num_groups(d) * rig_local_size(d); }
static inline size_t get_global_offset(uint d) { return 0; }
static inline uint get_work_dim(void) { return rig_grid_dims(); }
static inline size_t get_local_linear_id(void) {
  return (rig_local_id(2) * rig_local_size(1) + rig_local_id(1)) * rig_local_size(0) + rig_local_id(0);
}
// Orders the group's accesses to local (and, with CLK_GLOBAL_MEM_FENCE, global) memory
// around the barrier; LLVM's workgroup fences order both.
static inline void barrier(uint flags) { (void)flags; rig_barrier(); }
static inline void work_group_barrier(uint flags) { (void)flags; rig_barrier(); }

// OpenCL C's float math functions that clang leaves to a library (section 6.13.2): from
// rig_math.h, or LLVM's intrinsics where their lowering meets OpenCL's precision. clang
// itself lowers sqrt, fabs, fma, mad, floor, ceil, trunc, round, rint, fmin, fmax,
// copysign and ldexp; other functions (and the double and vector forms) need ROCm.
#define RIG_MATH_FN static inline
#include "rig_math.h"
#define RIG_OVERLOAD __attribute__((overloadable))
RIG_OVERLOAD float sin(float x) { return rig_sinf(x); }
RIG_OVERLOAD float cos(float x) { return rig_cosf(x); }
RIG_OVERLOAD float tan(float x) { return rig_tanf(x); }
RIG_OVERLOAD float pow(float x, float y) { return rig_powf(x, y); }
RIG_OVERLOAD float rsqrt(float x) { return rig_rsqrtf(x); }
RIG_OVERLOAD float exp(float x) { return __builtin_expf(x); }
RIG_OVERLOAD float exp2(float x) { return __builtin_exp2f(x); }
RIG_OVERLOAD float exp10(float x) { return __builtin_exp10f(x); }
RIG_OVERLOAD float log(float x) { return __builtin_logf(x); }
RIG_OVERLOAD float log2(float x) { return __builtin_log2f(x); }
RIG_OVERLOAD float log10(float x) { return __builtin_log10f(x); }
#undef RIG_OVERLOAD
#endif

#endif
