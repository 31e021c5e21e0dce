/* GPU side of the corpus prelude: OpenCL work-item functions and atomics without ROCm device
 * libraries, from AMDGPU builtins (clang-19, -nogpulib). */
static inline uint rig_lid(uint d) {
  return d == 0 ? __builtin_amdgcn_workitem_id_x() : d == 1 ? __builtin_amdgcn_workitem_id_y() : __builtin_amdgcn_workitem_id_z();
}
static inline uint rig_grp(uint d) {
  return d == 0 ? __builtin_amdgcn_workgroup_id_x() : d == 1 ? __builtin_amdgcn_workgroup_id_y() : __builtin_amdgcn_workgroup_id_z();
}
static inline uint rig_lsz(uint d) {
  return d == 0 ? __builtin_amdgcn_workgroup_size_x() : d == 1 ? __builtin_amdgcn_workgroup_size_y() : __builtin_amdgcn_workgroup_size_z();
}
#define get_local_id(d) rig_lid(d)
#define get_group_id(d) rig_grp(d)
#define get_local_size(d) rig_lsz(d)
#define get_global_id(d) (rig_grp(d) * rig_lsz(d) + rig_lid(d))
#define barrier(f) do { __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); \
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup"); } while (0)
#define SHARED __local
#define atomic_add(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define atomic_sub(p, v) __atomic_fetch_sub((p), (v), __ATOMIC_RELAXED)
#define atomic_min(p, v) __atomic_fetch_min((p), (v), __ATOMIC_RELAXED)
#define atomic_max(p, v) __atomic_fetch_max((p), (v), __ATOMIC_RELAXED)
#define atomic_or(p, v) __atomic_fetch_or((p), (v), __ATOMIC_RELAXED)
#define atomic_xor(p, v) __atomic_fetch_xor((p), (v), __ATOMIC_RELAXED)
#define atomic_xchg(p, v) __atomic_exchange_n((p), (v), __ATOMIC_RELAXED)
static inline int rig_cas_i(volatile __global int* p, int c, int v) {
  __atomic_compare_exchange_n(p, &c, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return c;
}
#define atomic_cmpxchg(p, c, v) rig_cas_i((p), (c), (v))
#define sqrt(x) __builtin_sqrtf(x)
#define fma(a, b, c) __builtin_fmaf(a, b, c)
#define fmin(a, b) __builtin_fminf(a, b)
#define fmax(a, b) __builtin_fmaxf(a, b)
#define fabs(x) __builtin_fabsf(x)
#define floor(x) __builtin_floorf(x)
#define popcount(x) __builtin_popcount(x)
#define clz(x) ((x) == 0 ? 32 : __builtin_clz(x))
#define min(a, b) ((a) < (b) ? (a) : (b))
#define max(a, b) ((a) > (b) ? (a) : (b))
#define rint(x) __builtin_rintf(x)
#define round(x) __builtin_roundf(x)
#define trunc(x) __builtin_truncf(x)
#define ceil(x) __builtin_ceilf(x)
#define copysign(x, y) __builtin_copysignf(x, y)
#define ldexp(x, k) __builtin_ldexpf(x, k)
#define frexp(x, e) __builtin_frexpf(x, e)
#define isnan(x) __builtin_isnan(x)
#define isinf(x) __builtin_isinf(x)
