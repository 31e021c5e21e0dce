#!/bin/sh
# Builds the corpus code objects for gfx1100 (committed, so `cargo test` needs no LLVM for
# execution). Every kernel at -O2; the kernels listed in O0 also at -O0, those in W64 also as
# wave64 code (-O2 -mwavefrontsize64, file suffix .W64.co).
# Usage: kernels/corpus/build.sh   (needs clang-19 and ld.lld-19)
set -eu
cd "$(dirname "$0")"
O0="vadd_f32 branch_diverge lds_reduce private_array struct_param generic_atomics"
W64="vadd_f32 branch_diverge lds_reduce scan matmul atomic_add_i32 loop_diverge wmma_w64"
build() { # name tag [extra clang flags]
  n="$1"; tag="$2"; shift 2
  opt="-O2"; [ "$tag" = O0 ] && opt="-O0"
  clang-19 -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -mcpu=gfx1100 -nogpulib \
    -cl-fp32-correctly-rounded-divide-sqrt -ffp-contract=off -include gpu_prelude.h "$opt" "$@" \
    -c "$n.cl" -o "/tmp/rig-corpus-$n-$tag.o"
  ld.lld-19 -shared "/tmp/rig-corpus-$n-$tag.o" -o "$n.$tag.co"
  rm -f "/tmp/rig-corpus-$n-$tag.o"
}
for f in *.cl; do
  n="${f%.cl}"
  build "$n" O2
done
for n in $O0; do
  build "$n" O0
done
for n in $W64; do
  build "$n" W64 -mwavefrontsize64
done
