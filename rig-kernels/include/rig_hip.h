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

#endif
