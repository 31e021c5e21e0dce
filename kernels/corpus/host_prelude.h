/* Host side of the corpus prelude: the same OpenCL C compiled by the machine's cc, each
 * work-item of a group a pthread, barrier() a pthread barrier, groups run one after another. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef _Float16 half;
#define __kernel
#define __global
#define __local
#define __constant const
#define __private
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#define kernel
#define global
#define local
#define SHARED static
#define CLK_LOCAL_MEM_FENCE 1
#define CLK_GLOBAL_MEM_FENCE 2
static __thread uint rig_l[3], rig_g[3];
static uint rig_size[3];
static pthread_barrier_t rig_bar;
#define get_local_id(d) rig_l[d]
#define get_group_id(d) rig_g[d]
#define get_local_size(d) rig_size[d]
#define get_global_id(d) (rig_g[d] * rig_size[d] + rig_l[d])
#define barrier(f) do { __atomic_thread_fence(__ATOMIC_SEQ_CST); pthread_barrier_wait(&rig_bar); __atomic_thread_fence(__ATOMIC_SEQ_CST); } while (0)
#define atomic_add(p, v) __atomic_fetch_add((p), (v), __ATOMIC_SEQ_CST)
#define atomic_sub(p, v) __atomic_fetch_sub((p), (v), __ATOMIC_SEQ_CST)
#define atomic_or(p, v) __atomic_fetch_or((p), (v), __ATOMIC_SEQ_CST)
#define atomic_xor(p, v) __atomic_fetch_xor((p), (v), __ATOMIC_SEQ_CST)
#define atomic_xchg(p, v) __atomic_exchange_n((p), (v), __ATOMIC_SEQ_CST)
#define rig_minmax(p, v, cmp) ({ __typeof__(*(p)) rig_o = __atomic_load_n((p), __ATOMIC_SEQ_CST), rig_v = (v); \
  while (!(rig_v cmp rig_o) ? 0 : !__atomic_compare_exchange_n((p), &rig_o, rig_v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} rig_o; })
#define atomic_min(p, v) rig_minmax(p, v, <)
#define atomic_max(p, v) rig_minmax(p, v, >)
#define atomic_cmpxchg(p, c, v) ({ __typeof__(*(p)) rig_c = (c); \
  __atomic_compare_exchange_n((p), &rig_c, (v), 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); rig_c; })
#define sqrt(x) sqrtf(x)
#define fma(a, b, c) fmaf(a, b, c)
#define fmin(a, b) fminf(a, b)
#define fmax(a, b) fmaxf(a, b)
#define fabs(x) fabsf(x)
#define floor(x) floorf(x)
#define popcount(x) __builtin_popcount(x)
#define clz(x) ((x) == 0 ? 32 : __builtin_clz(x))
#define min(a, b) ((a) < (b) ? (a) : (b))
#define max(a, b) ((a) > (b) ? (a) : (b))
#define rint(x) rintf(x)
#define round(x) roundf(x)
#define trunc(x) truncf(x)
#define ceil(x) ceilf(x)
#define copysign(x, y) copysignf(x, y)
#define ldexp(x, k) ldexpf(x, k)
#define frexp(x, e) frexpf(x, e)
