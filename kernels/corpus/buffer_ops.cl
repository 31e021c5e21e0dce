/* Buffer (MUBUF) loads, stores and atomics through resources LLVM builds with
 * __builtin_amdgcn_make_buffer_rsrc, and s_buffer_load: raw resources (num_records in bytes,
 * checked per dword; out-of-range loads read 0 and stores are dropped), a structured one
 * (stride 16, idxen + offen, out-of-range indices), atomics returning the old value, scalar
 * loads in and out of range. clang-19 has no builtins for buffer atomics and s_buffer_load:
 * those are inline assembly. The host spells out the same range checks. */
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#define NR_IN 4000u
#define NR_ST 40001u
#define SLOT 48u
#ifdef __AMDGCN__
typedef uint uint2v __attribute__((ext_vector_type(2)));
typedef uint uint3v __attribute__((ext_vector_type(3)));
typedef uint uint4v __attribute__((ext_vector_type(4)));
typedef __amdgpu_buffer_rsrc_t rsrc_t;
typedef uint4v srsrc_t;
#define RSRC(p, stride, n, flags) __builtin_amdgcn_make_buffer_rsrc((void*)(p), (stride), (n), (flags))
#define LD8(r, o) (uint)(int)(char)__builtin_amdgcn_raw_buffer_load_b8((r), (o), 0, 0)
#define LD16(r, o) (uint)__builtin_amdgcn_raw_buffer_load_b16((r), (o), 0, 0)
#define LD32(r, o) __builtin_amdgcn_raw_buffer_load_b32((r), (o), 0, 0)
#define LD64(r, o, v) do { uint2v t = __builtin_amdgcn_raw_buffer_load_b64((r), (o), 0, 0); (v)[0] = t.x; (v)[1] = t.y; } while (0)
#define LD96(r, o, v) do { uint3v t = __builtin_amdgcn_raw_buffer_load_b96((r), (o), 0, 0); (v)[0] = t.x; (v)[1] = t.y; (v)[2] = t.z; } while (0)
#define LD128(r, o, v) do { uint4v t = __builtin_amdgcn_raw_buffer_load_b128((r), (o), 0, 0); (v)[0] = t.x; (v)[1] = t.y; (v)[2] = t.z; (v)[3] = t.w; } while (0)
#define ST8(x, r, o) __builtin_amdgcn_raw_buffer_store_b8((uchar)(x), (r), (o), 0, 0)
#define ST16(x, r, o) __builtin_amdgcn_raw_buffer_store_b16((ushort)(x), (r), (o), 0, 0)
#define ST32(x, r, o) __builtin_amdgcn_raw_buffer_store_b32((x), (r), (o), 0, 0)
#define ST64(v, r, o) __builtin_amdgcn_raw_buffer_store_b64((uint2v)((v)[0], (v)[1]), (r), (o), 0, 0)
#define ST96(v, r, o) __builtin_amdgcn_raw_buffer_store_b96((uint3v)((v)[0], (v)[1], (v)[2]), (r), (o), 0, 0)
#define ST128(v, r, o) __builtin_amdgcn_raw_buffer_store_b128((uint4v)((v)[0], (v)[1], (v)[2], (v)[3]), (r), (o), 0, 0)
/* The resource as four scalars, for the inline assembly. */
#define SRSRC(p, stride, n, flags) ((uint4v)((uint)(ulong)(p), ((uint)((ulong)(p) >> 32) & 0xffff) | (stride) << 16, (n), (flags)))
#define ATOMIC(op, x, off, r) ({ uint rig_x = (x); __asm__ volatile(op " %0, %1, %2, 0 offen glc\n s_waitcnt vmcnt(0)" : "+v"(rig_x) : "v"(off), "s"(r) : "memory"); rig_x; })
#define CMPSWAP(nv, cv, off, r) ({ uint2v rig_x = (uint2v)((nv), (cv)); __asm__ volatile("buffer_atomic_cmpswap_b32 %0, %1, %2, 0 offen glc\n s_waitcnt vmcnt(0)" : "+v"(rig_x) : "v"(off), "s"(r) : "memory"); rig_x.x; })
#define ADD64(x, off, r) __asm__ volatile("buffer_atomic_add_u64 %0, %1, %2, 0 offen\n s_waitcnt vmcnt(0)" : : "v"((ulong)(x)), "v"(off), "s"(r) : "memory")
#define IDXLOAD(idx, off, r) ({ uint rig_d; __asm__ volatile("buffer_load_b32 %0, %1, %2, 0 idxen offen\n s_waitcnt vmcnt(0)" : "=v"(rig_d) : "v"((uint2v)((idx), (off))), "s"(r) : "memory"); rig_d; })
#define D16HI(reg, off, r) ({ uint rig_d = (reg); __asm__ volatile("buffer_load_d16_hi_b16 %0, %1, %2, 0 offen\n s_waitcnt vmcnt(0)" : "+v"(rig_d) : "v"(off), "s"(r) : "memory"); rig_d; })
#define SLOAD(r, imm, so) ({ uint rig_d; __asm__ volatile("s_buffer_load_b32 %0, %1, %2 offset:" #imm "\n s_waitcnt lgkmcnt(0)" : "=s"(rig_d) : "s"(r), "s"(so) : "memory"); rig_d; })
#define SLOAD64(r, imm, v) do { uint2v rig_d; __asm__ volatile("s_buffer_load_b64 %0, %1, " #imm "\n s_waitcnt lgkmcnt(0)" : "=s"(rig_d) : "s"(r) : "memory"); (v)[0] = rig_d.x; (v)[1] = rig_d.y; } while (0)
#else
typedef struct { uchar* p; uint n; uint stride; } rsrc_t;
static rsrc_t RSRC(const void* p, uint stride, uint n, uint flags) { rsrc_t r = { (uchar*)p, n, stride }; (void)flags; return r; }
#define SRSRC RSRC
typedef rsrc_t srsrc_t;
static int rig_in(rsrc_t r, uint o, uint size) { return (unsigned long)o + size <= r.n; }
static uint rig_ld(rsrc_t r, uint o, uint size) { uint v = 0; if (rig_in(r, o, size)) memcpy(&v, r.p + o, size); return v; }
static void rig_st(rsrc_t r, uint o, uint size, uint v) { if (rig_in(r, o, size)) memcpy(r.p + o, &v, size); }
#define LD8(r, o) (uint)(int)(signed char)rig_ld((r), (o), 1)
#define LD16(r, o) rig_ld((r), (o), 2)
#define LD32(r, o) rig_ld((r), (o), 4)
#define LDN(r, o, v, n) do { for (uint k = 0; k < (n); k++) (v)[k] = rig_ld((r), (o) + 4 * k, 4); } while (0)
#define LD64(r, o, v) LDN(r, o, v, 2)
#define LD96(r, o, v) LDN(r, o, v, 3)
#define LD128(r, o, v) LDN(r, o, v, 4)
#define ST8(x, r, o) rig_st((r), (o), 1, (x))
#define ST16(x, r, o) rig_st((r), (o), 2, (x))
#define ST32(x, r, o) rig_st((r), (o), 4, (x))
#define STN(v, r, o, n) do { for (uint k = 0; k < (n); k++) rig_st((r), (o) + 4 * k, 4, (v)[k]); } while (0)
#define ST64(v, r, o) STN(v, r, o, 2)
#define ST96(v, r, o) STN(v, r, o, 3)
#define ST128(v, r, o) STN(v, r, o, 4)
static uint rig_atomic(const char* op, uint x, uint o, rsrc_t r) {
  if (!rig_in(r, o, 4)) return 0;
  uint* p = (uint*)(r.p + o);
  if (strstr(op, "add")) return __atomic_fetch_add(p, x, __ATOMIC_SEQ_CST);
  uint old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (!__atomic_compare_exchange_n(p, &old, (int)x > (int)old ? x : old, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  return old; }
#define ATOMIC(op, x, off, r) rig_atomic((op), (x), (off), (r))
static uint CMPSWAP(uint x, uint c, uint o, rsrc_t r) {
  if (!rig_in(r, o, 4)) return 0;
  __atomic_compare_exchange_n((uint*)(r.p + o), &c, x, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return c; }
static void ADD64(ulong x, uint o, rsrc_t r) { if (rig_in(r, o, 8)) __atomic_fetch_add((ulong*)(r.p + o), x, __ATOMIC_SEQ_CST); }
static uint IDXLOAD(uint idx, uint off, rsrc_t r) {
  if (idx >= r.n) return 0; uint v; memcpy(&v, r.p + idx * r.stride + off, 4); return v; }
static uint D16HI(uint reg, uint o, rsrc_t r) { return (reg & 0xffff) | rig_ld(r, o, 2) << 16; }
#define SLOAD(r, imm, so) rig_ld((r), (imm) + (so), 4)
#define SLOAD64(r, imm, v) LDN(r, imm, v, 2)
#endif
__kernel void buffer_ops(__global const uint* in, __global uint* out, __global uchar* st,
                         __global uint* at, __global const uint* data) {
  uint i = get_global_id(0);
  __global uint* o = out + i * 16;
  rsrc_t ri = RSRC(in, 0, NR_IN, 0x31014000);
  o[0] = LD32(ri, i * 4);
  o[1] = LD8(ri, i * 3 + 1);
  o[2] = LD16(ri, i * 4 + 2);
  uint v[4];
  LD64(ri, i * 8 % 4096, v);
  o[3] = v[0] ^ v[1];
  LD96(ri, i * 12 % 4092, v);
  o[4] = v[0] + 3 * v[1] + 5 * v[2];
  LD128(ri, i * 16 % 4096, v);
  o[5] = v[0] - v[1] + 7 * v[2] ^ v[3];
  o[6] = D16HI(i * 0x01010101u, i * 2, ri);
  /* Stores: each work-item its own slot; the tail of the buffer lies beyond num_records. */
  rsrc_t rs = RSRC(st, 0, NR_ST, 0x31014000);
  uint w[4] = { data[i], data[i] * 3, ~data[i], i };
  uint s = i * SLOT;
  ST128(w, rs, s);
  ST96(w, rs, s + 16);
  ST64(w, rs, s + 28);
  ST32(w[1], rs, s + 36);
  ST16(w[2], rs, s + 40);
  ST8(w[0], rs, s + 43);
  /* Structured: records of 16 bytes, the index beyond num_records reads 0. */
  srsrc_t rx = SRSRC(in, 16, 200, 0x11014000);
  o[7] = IDXLOAD(i % 256, (i & 3) * 4, rx);
  /* Atomics: counters (order-free results), then compare-swap on a lane's own dword. */
  srsrc_t ra = SRSRC(at, 0, 160, 0x31014000);
  ATOMIC("buffer_atomic_add_u32", 1, (i % 64) * 4, ra);
  srsrc_t rm = SRSRC(at, 0, 400, 0x31014000);
  ATOMIC("buffer_atomic_max_i32", data[i], 256 + (i % 8) * 4, rm);
  srsrc_t rc = SRSRC(at + 128, 0, 4000, 0x31014000);
  uint cur = at[128 + i];
  o[8] = CMPSWAP(i + 5, cur + (i % 3 == 0 ? 0 : 1), i * 4, rc);
  srsrc_t rl = SRSRC(at + 96, 0, 64, 0x31014000);
  ADD64((ulong)data[i] << 20 | 1, (i % 16) * 8, rl);
  /* Scalar buffer loads: in range, past num_records, with an SGPR offset. */
  uint so = get_group_id(0) * 4;
  srsrc_t rq = SRSRC(in, 0, NR_IN, 0x31014000);
  o[9] = SLOAD(rq, 16, so);
  o[10] = SLOAD(rq, 4000, so);
  SLOAD64(rq, 3996, v);
  o[11] = v[0];
  o[12] = v[1];
}
