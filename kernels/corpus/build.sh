#!/bin/sh
# Builds the corpus code objects (committed, so `cargo test` needs no LLVM for execution):
# for gfx1100 into this directory, for gfx1201 into gfx1201/, for gfx942 into gfx942/. Every
# kernel at -O2; the kernels listed in O0 also at -O0, those in W64 also as wave64 code (-O2
# -mwavefrontsize64, file suffix .W64.co; not for gfx942, whose code is wave64 only).
# Usage: kernels/corpus/build.sh [target...]   (default: gfx1100 gfx1201 gfx942; needs clang-19
# and ld.lld-19)
set -eu
cd "$(dirname "$0")"
O0="vadd_f32 branch_diverge lds_reduce private_array struct_param generic_atomics"
W64="vadd_f32 branch_diverge lds_reduce scan matmul atomic_add_i32 loop_diverge wmma_w64"
build() { # target outdir name tag [extra clang flags]
  cpu="$1"; dir="$2"; n="$3"; tag="$4"; shift 4
  opt="-O2"; [ "$tag" = O0 ] && opt="-O0"
  clang-19 -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -mcpu="$cpu" -nogpulib \
    -cl-fp32-correctly-rounded-divide-sqrt -ffp-contract=off -include gpu_prelude.h "$opt" "$@" \
    -c "$n.cl" -o "/tmp/rig-corpus-$cpu-$n-$tag.o"
  ld.lld-19 -shared "/tmp/rig-corpus-$cpu-$n-$tag.o" -o "$dir/$n.$tag.co"
  rm -f "/tmp/rig-corpus-$cpu-$n-$tag.o"
}
GFX11_ONLY=$(grep -v '^#' gfx11_only)
NOT_GFX942=$(grep -v '^#' not_gfx942)
GFX942_ONLY=$(grep -v '^#' gfx942_only)
skip() { # target name: whether name is not built for target
  { [ "$1" != gfx1100 ] && printf '%s\n' $GFX11_ONLY | grep -qx "$2"; } ||
    { [ "$1" = gfx942 ] && printf '%s\n' $NOT_GFX942 | grep -qx "$2"; } ||
    { [ "$1" != gfx942 ] && printf '%s\n' $GFX942_ONLY | grep -qx "$2"; }
}
for cpu in ${*:-gfx1100 gfx1201 gfx942}; do
  dir=.
  [ "$cpu" = gfx1100 ] || dir="$cpu"
  mkdir -p "$dir"
  for f in *.cl; do
    skip "$cpu" "${f%.cl}" || build "$cpu" "$dir" "${f%.cl}" O2
  done
  for n in $O0; do
    skip "$cpu" "$n" || build "$cpu" "$dir" "$n" O0
  done
  [ "$cpu" = gfx942 ] && continue
  for n in $W64; do
    skip "$cpu" "$n" || build "$cpu" "$dir" "$n" W64 -mwavefrontsize64
  done
done
