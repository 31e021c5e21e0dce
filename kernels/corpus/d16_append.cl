/* 16-bit loads into one half of a register and stores of the high half, to global memory and
 * LDS (the *_d16 and *_d16_hi forms; LLVM builds half2 with the load forms, the rest are
 * inline assembly), and the LDS wave counters ds_append/ds_consume: each wave adds or takes
 * its active lane count and all its lanes get the counter as the wave found it, which the
 * host spells out per wave of 32. */
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#ifdef __AMDGCN__
#define MKH2(x, y) ((half2)((x), (y)))
#define H2BITS(v) as_uint(v)
#define APPEND(p) __builtin_amdgcn_ds_append(p)
#define CONSUME(p) __builtin_amdgcn_ds_consume(p)
/* Register `r` with one half replaced by the 16-bit load `op` from `p`. */
#define LOAD_D16(op, r, p) ({ uint rig_r = (r); __asm__ volatile(op " %0, %1, off\n s_waitcnt vmcnt(0)" : "+v"(rig_r) : "v"(p) : "memory"); rig_r; })
#define LDS_D16(op, r, p) ({ uint rig_r = (r); __asm__ volatile(op " %0, %1\n s_waitcnt lgkmcnt(0)" : "+v"(rig_r) : "v"((uint)(ulong)(p)) : "memory"); rig_r; })
#define STORE_HI(op, p, x) __asm__ volatile(op " %0, %1, off\n s_waitcnt vmcnt(0)" : : "v"(p), "v"((uint)(x)) : "memory")
#define LDS_STORE_HI(op, p, x) __asm__ volatile(op " %0, %1\n s_waitcnt lgkmcnt(0)" : : "v"((uint)(ulong)(p)), "v"((uint)(x)) : "memory")
#else
typedef _Float16 half2 __attribute__((vector_size(4)));
#define MKH2(x, y) ((half2){(x), (y)})
static uint H2BITS(half2 v) { uint u; memcpy(&u, &v, 4); return u; }
#define APPEND(p) (__atomic_fetch_add((p), 1, __ATOMIC_SEQ_CST), (int)((get_local_id(0) / 32) * 32))
#define CONSUME(p) (__atomic_fetch_sub((p), 1, __ATOMIC_SEQ_CST), (int)(1000 - (get_local_id(0) / 32) * 32))
static uint rig_merge(uint r, uint v, int hi) { return hi ? (r & 0xffff) | v << 16 : (r & 0xffff0000u) | (v & 0xffff); }
#define RIG_LD(op, p) (strstr(op, "u8") ? (uint)*(uchar*)(p) : strstr(op, "i8") ? (uint)(ushort)(short)*(signed char*)(p) : (uint)*(ushort*)(p))
#define LOAD_D16(op, r, p) rig_merge((r), RIG_LD(op, p), strstr(op, "hi") != 0)
#define LDS_D16(op, r, p) LOAD_D16(op, r, p)
#define STORE_HI(op, p, x) do { uint rig_x = (uint)(x) >> 16; if (strstr(op, "b8")) *(uchar*)(p) = (uchar)rig_x; else *(ushort*)(p) = (ushort)rig_x; } while (0)
#define LDS_STORE_HI(op, p, x) STORE_HI(op, p, x)
#endif
__kernel void d16_append(__global const half* a, __global const uchar* b, __global uint* out,
                         __global ushort* hi_out, __global int* counters) {
  SHARED half ls[256];
  SHARED ushort lw[256];
  SHARED int ctr[2];
  uint i = get_global_id(0), l = get_local_id(0);
  if (l == 0) { ctr[0] = 0; ctr[1] = 1000; }
  ls[l] = a[(i * 11 + 5) % 1024];
  barrier(CLK_LOCAL_MEM_FENCE);
  /* Compiled: global_load_d16_hi_b16, ds_load_u16_d16_hi. */
  half2 v = MKH2(a[i], a[(i * 7 + 3) % 1024]);
  half2 w = MKH2(ls[(l + 1) % 256], ls[(l * 5 + 3) % 256]);
  half2 s = v + w;
  out[i * 8 + 0] = H2BITS(s);
  uint x = i * 0x9e3779b9u;
  out[i * 8 + 1] = LOAD_D16("global_load_d16_b16", x, &a[(i + 1) % 1024]);
  out[i * 8 + 2] = LOAD_D16("global_load_d16_u8", x, &b[(i + 2) % 1024]);
  out[i * 8 + 3] = LOAD_D16("global_load_d16_i8", x, &b[(i + 3) % 1024]);
  out[i * 8 + 4] = LOAD_D16("global_load_d16_hi_u8", x, &b[(i + 4) % 1024]);
  out[i * 8 + 5] = LOAD_D16("global_load_d16_hi_i8", x, &b[(i + 5) % 1024]);
  out[i * 8 + 6] = LDS_D16("ds_load_u8_d16", x, (__local uchar*)&ls[(l + 6) % 256]);
  out[i * 8 + 7] = LDS_D16("ds_load_i8_d16_hi", x, (__local uchar*)&ls[(l + 7) % 256] + 1);
  STORE_HI("global_store_d16_hi_b16", &hi_out[i], x);
  STORE_HI("global_store_d16_hi_b8", (__global uchar*)&hi_out[1024 + i], x);
  LDS_STORE_HI("ds_store_b16_d16_hi", &lw[l], x ^ 0x12345678u);
  barrier(CLK_LOCAL_MEM_FENCE);
  LDS_STORE_HI("ds_store_b8_d16_hi", (__local uchar*)&lw[(l + 1) % 256] + 1, x);
  barrier(CLK_LOCAL_MEM_FENCE);
  hi_out[2048 + i] = lw[(l + 9) % 256];
  int pa = APPEND(&ctr[0]);
  int pc = CONSUME(&ctr[1]);
  atomic_add(&counters[get_group_id(0) * 4 + 0], pa);
  atomic_add(&counters[get_group_id(0) * 4 + 1], pc);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (l == 0) { counters[get_group_id(0) * 4 + 2] = ctr[0]; counters[get_group_id(0) * 4 + 3] = ctr[1]; }
}
