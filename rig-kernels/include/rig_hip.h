// rig's HIP prelude: the keywords and built-in variables the HIP headers would give, for
// kernels built without ROCm (-nogpuinc -nogpulib). rig-kernels includes it before every HIP
// source it builds without ROCm; it is also rig_kernels::HIP_PRELUDE, to copy.
//
// threadIdx and blockIdx come from the hardware ids, blockDim from the dispatch's group
// size, gridDim from code object v5's hidden_block_count_{x,y,z} (bytes 0, 4, 8 of the
// implicit-argument block: LLVM's AMDGPUUsage). Kernels declared extern "C" keep their
// names; others are resolved by their mangled symbol names.
#ifndef RIG_HIP_H
#define RIG_HIP_H

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(n, ...) __attribute__((amdgpu_flat_work_group_size(1, n)))

#define __RIG_AXES(type, name, X, Y, Z)                                                    \
  struct type {                                                                            \
    __declspec(property(get = get_x)) unsigned x;                                          \
    __declspec(property(get = get_y)) unsigned y;                                          \
    __declspec(property(get = get_z)) unsigned z;                                          \
    static __device__ __forceinline__ unsigned get_x() { return X; }                       \
    static __device__ __forceinline__ unsigned get_y() { return Y; }                       \
    static __device__ __forceinline__ unsigned get_z() { return Z; }                       \
  };                                                                                       \
  extern const __device__ __attribute__((weak)) type name;

#define __RIG_IMPLICIT ((const unsigned *)__builtin_amdgcn_implicitarg_ptr())

__RIG_AXES(__rig_thread_idx, threadIdx, __builtin_amdgcn_workitem_id_x(),
           __builtin_amdgcn_workitem_id_y(), __builtin_amdgcn_workitem_id_z())
__RIG_AXES(__rig_block_idx, blockIdx, __builtin_amdgcn_workgroup_id_x(),
           __builtin_amdgcn_workgroup_id_y(), __builtin_amdgcn_workgroup_id_z())
__RIG_AXES(__rig_block_dim, blockDim, __builtin_amdgcn_workgroup_size_x(),
           __builtin_amdgcn_workgroup_size_y(), __builtin_amdgcn_workgroup_size_z())
__RIG_AXES(__rig_grid_dim, gridDim, __RIG_IMPLICIT[0], __RIG_IMPLICIT[1], __RIG_IMPLICIT[2])

static __device__ __forceinline__ void __syncthreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

static __device__ __forceinline__ void __threadfence() {
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent");
}

static __device__ __forceinline__ void __threadfence_block() {
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
}

// The float math functions, as sinf and as sin(float): from rig_math.h, or LLVM's
// intrinsics where their lowering meets OpenCL's precision (exact for sqrt, fabs, fma and
// the roundings). The double forms of the exact ones are here too; the others need ROCm,
// and are declared unavailable so that a double argument is not narrowed to float.
#define RIG_MATH_FN static __device__ __forceinline__
#include "rig_math.h"
#define __RIG_F1(name, body)                                                               \
  static __device__ __forceinline__ float name##f(float x) { return body; }               \
  static __device__ __forceinline__ float name(float x) { return body; }
#define __RIG_F2(name, body)                                                               \
  static __device__ __forceinline__ float name##f(float x, float y) { return body; }      \
  static __device__ __forceinline__ float name(float x, float y) { return body; }
#define __RIG_ROCM_ONLY(name, ...)                                                         \
  __device__ double name(__VA_ARGS__)                                                      \
      __attribute__((unavailable(#name "(double) needs ROCm's device libraries: build with rig_kernels::Options::rocm")));
__RIG_F1(sin, rig_sinf(x))
__RIG_F1(cos, rig_cosf(x))
__RIG_F1(tan, rig_tanf(x))
__RIG_F1(rsqrt, rig_rsqrtf(x))
__RIG_F1(exp, __builtin_expf(x))
__RIG_F1(exp2, __builtin_exp2f(x))
__RIG_F1(exp10, __builtin_exp10f(x))
__RIG_F1(log, __builtin_logf(x))
__RIG_F1(log2, __builtin_log2f(x))
__RIG_F1(log10, __builtin_log10f(x))
__RIG_F2(pow, rig_powf(x, y))
__RIG_F1(sqrt, __builtin_sqrtf(x))
__RIG_F1(fabs, __builtin_fabsf(x))
__RIG_F1(floor, __builtin_floorf(x))
__RIG_F1(ceil, __builtin_ceilf(x))
__RIG_F1(trunc, __builtin_truncf(x))
__RIG_F1(round, __builtin_roundf(x))
__RIG_F1(rint, __builtin_rintf(x))
__RIG_F2(fmin, __builtin_fminf(x, y))
__RIG_F2(fmax, __builtin_fmaxf(x, y))
__RIG_F2(copysign, __builtin_copysignf(x, y))
static __device__ __forceinline__ float fmaf(float x, float y, float z) { return __builtin_fmaf(x, y, z); }
static __device__ __forceinline__ float fma(float x, float y, float z) { return __builtin_fmaf(x, y, z); }
static __device__ __forceinline__ double sqrt(double x) { return __builtin_sqrt(x); }
static __device__ __forceinline__ double fabs(double x) { return __builtin_fabs(x); }
static __device__ __forceinline__ double fma(double x, double y, double z) { return __builtin_fma(x, y, z); }
static __device__ __forceinline__ double floor(double x) { return __builtin_floor(x); }
static __device__ __forceinline__ double ceil(double x) { return __builtin_ceil(x); }
static __device__ __forceinline__ double trunc(double x) { return __builtin_trunc(x); }
__RIG_ROCM_ONLY(sin, double)
__RIG_ROCM_ONLY(cos, double)
__RIG_ROCM_ONLY(tan, double)
__RIG_ROCM_ONLY(exp, double)
__RIG_ROCM_ONLY(exp2, double)
__RIG_ROCM_ONLY(log, double)
__RIG_ROCM_ONLY(log2, double)
__RIG_ROCM_ONLY(log10, double)
__RIG_ROCM_ONLY(pow, double, double)
#undef __RIG_F1
#undef __RIG_F2
#undef __RIG_ROCM_ONLY

#endif
