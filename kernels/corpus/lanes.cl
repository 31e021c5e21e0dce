/* Cross-lane builtins (no host equivalent: checked against expectations in rig-isa/tests/lanes.rs). */
__kernel void lanes(__global uint* o) {
  uint l = __builtin_amdgcn_workitem_id_x();
  uint x = l * 3 + 1;
  o[l] = __builtin_amdgcn_ds_swizzle(x, 0x041f);         /* bit-mask mode: xor 1 */
  o[32 + l] = __builtin_amdgcn_ds_swizzle(x, 0x801b);    /* quad perm [3,2,1,0] */
  o[64 + l] = __builtin_amdgcn_permlanex16(x, x, 0x76543210, 0xfedcba98, false, false);
  o[96 + l] = __builtin_amdgcn_permlane16(x, x, 0x01234567, 0x89abcdef, false, false);
  o[128 + l] = __builtin_amdgcn_readfirstlane(x + 5);
  o[160 + l] = __builtin_amdgcn_mbcnt_lo(0xaaaaaaaau, 0);
}
