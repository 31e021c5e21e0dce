/* Waves of one group wait for each other without a barrier: the first lane of each wave
 * spins until the wave after it has stored its flag (the last wave stores first). On the GPU
 * the spin is bounded, so an interpreter that never switches waves reports "not seen"
 * instead of hanging; the host's threads always get there. */
#ifdef __AMDGCN__
#define SPIN_BOUND (1u << 20)
#define PAUSE() __builtin_amdgcn_s_sleep(1)
#else
#define SPIN_BOUND 0xffffffffu
#define PAUSE() do {} while (0)
#endif
__kernel void spin_wait(__global uint* flag, __global uint* out) {
  uint l = get_local_id(0), g = get_group_id(0), waves = get_local_size(0) / 32;
  uint w = l / 32;
  __global uint* f = flag + g * 8;
  if (l % 32 == 0) {
    uint seen = 1;
    if (w + 1 < waves) {
      seen = 0;
      for (uint k = 0; k < SPIN_BOUND; k++) {
        if (__atomic_load_n(&f[w + 1], __ATOMIC_ACQUIRE) == g + 1) {
          seen = 1;
          break;
        }
        if (k & 1) PAUSE();
      }
    }
    out[g * 8 + w] = seen;
    __atomic_store_n(&f[w], g + 1, __ATOMIC_RELEASE);
  }
}
