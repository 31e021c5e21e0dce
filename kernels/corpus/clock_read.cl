/* Reads the GPU clock both ways a gfx11 kernel can: s_sendmsg_rtn REALTIME and s_getreg
 * SHADER_CYCLES (20 bits). Run by rig-isa/tests/exec_basic.rs against a memory with a known
 * clock (no host oracle: the host has no GPU clock). */
__kernel void clock_read(__global ulong* out) {
  out[get_global_id(0) * 2] = __builtin_readsteadycounter();
  out[get_global_id(0) * 2 + 1] = __builtin_readcyclecounter();
}
