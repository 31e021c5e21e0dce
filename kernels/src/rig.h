// Work-item geometry for rig's test kernels, without ROCm's device libraries.
//
// OpenCL's get_global_id and friends live in the device libraries, which rig's build does not
// link (-nogpulib). These read the same values from the hardware ids and from the hidden
// (implicit) arguments of code object v5: hidden_block_count_{x,y,z} at bytes 0, 4, 8 and
// hidden_grid_dims at byte 64 of the implicit-argument block (LLVM AMDGPUUsage).
#ifndef RIG_H
#define RIG_H

#define RIG_IMPLICIT ((__constant uint *)__builtin_amdgcn_implicitarg_ptr())

static inline uint rig_local_id(uint d) {
  return d == 0 ? __builtin_amdgcn_workitem_id_x()
       : d == 1 ? __builtin_amdgcn_workitem_id_y()
                : __builtin_amdgcn_workitem_id_z();
}

static inline uint rig_group_id(uint d) {
  return d == 0 ? __builtin_amdgcn_workgroup_id_x()
       : d == 1 ? __builtin_amdgcn_workgroup_id_y()
                : __builtin_amdgcn_workgroup_id_z();
}

static inline uint rig_local_size(uint d) {
  return d == 0 ? __builtin_amdgcn_workgroup_size_x()
       : d == 1 ? __builtin_amdgcn_workgroup_size_y()
                : __builtin_amdgcn_workgroup_size_z();
}

static inline size_t rig_global_id(uint d) {
  return (size_t)rig_group_id(d) * rig_local_size(d) + rig_local_id(d);
}

// Code object v5 only: the groups of the grid along d, and its dimensions.
static inline uint rig_num_groups(uint d) { return RIG_IMPLICIT[d]; }
static inline uint rig_grid_dims(void) { return ((__constant ushort *)RIG_IMPLICIT)[32]; }

// OpenCL's barrier(CLK_LOCAL_MEM_FENCE), which also lives in the device libraries.
static inline void rig_barrier(void) {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

// The README's spelling of the global id along x.
#define id rig_global_id(0)

#endif
