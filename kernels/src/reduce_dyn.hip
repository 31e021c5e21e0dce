// Sums each group's elements through dynamic local data share: an unsized extern array that
// starts after the static group segment and takes the launch's shared-memory bytes. The
// kernel reads that size from hidden_dynamic_lds_size (byte 120 of the implicit arguments).
// HIP, since OpenCL C has no extern local arrays.
extern __attribute__((shared)) float dyn[];

extern "C" __attribute__((global)) void reduce_dyn(const float *x, float *sums, unsigned *cap) {
  const unsigned *implicit = (const unsigned *)__builtin_amdgcn_implicitarg_ptr();
  unsigned l = __builtin_amdgcn_workitem_id_x();
  unsigned g = __builtin_amdgcn_workgroup_id_x();
  unsigned n = __builtin_amdgcn_workgroup_size_x();
  unsigned slots = implicit[30] / sizeof(float);
  if (l < slots)
    dyn[l] = x[g * n + l];
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  if (l == 0) {
    float s = 0;
    for (unsigned i = 0; i < n && i < slots; i++)
      s += dyn[i];
    sums[g] = s;
    cap[g] = slots;
  }
}
