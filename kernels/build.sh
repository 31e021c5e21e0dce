#!/bin/sh
# Builds rig's test kernels into AMDGPU code objects: kernels/out/<dir>/<name>.co.
#
#   gfx1100, gfx1201, gfx942   code object v5 (clang-19's default), every kernel
#   gfx1100-cov4               code object v4, the kernels that read no v5 implicit argument
#   gfx11-generic              code object v6 for the generic GFX11 target
#
# Needs clang-19 and ld.lld-19 (Debian/Ubuntu: apt install clang-19 lld-19). The objects are
# committed, so `cargo test` needs only Rust; run this after changing a source and commit the
# result. The same compiler version gives the same bytes.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
src=$here/src
out=$here/out
CLANG=${CLANG:-clang-19}
LLD=${LLD:-ld.lld-19}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Every OpenCL kernel, and those that read no implicit argument of code object v5.
all_cl="add saxpy reduce dims affine scratch grid2d histogram multi pointers printf big_lds"
v4_cl="add saxpy reduce affine scratch grid2d histogram multi pointers printf big_lds"

# build_cl <dir> <mcpu> <code object version> <names...>
build_cl() {
  dir=$1 cpu=$2 cov=$3
  shift 3
  mkdir -p "$out/$dir"
  for name in "$@"; do
    "$CLANG" -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -mcpu="$cpu" -nogpulib -O2 \
      -mcode-object-version="$cov" -Wno-deprecated -I"$src" \
      -c "$src/$name.cl" -o "$tmp/$name.o"
    "$LLD" -shared --build-id=none "$tmp/$name.o" -o "$out/$dir/$name.co"
  done
}

# build_hip <dir> <offload arch> <code object version> <names...>: HIP's driver links too.
build_hip() {
  dir=$1 cpu=$2 cov=$3
  shift 3
  mkdir -p "$out/$dir"
  for name in "$@"; do
    "$CLANG" -x hip --cuda-device-only --no-gpu-bundle-output --offload-arch="$cpu" \
      -nogpulib -nogpuinc -O2 -mcode-object-version="$cov" \
      -c "$src/$name.hip" -o "$out/$dir/$name.co"
  done
}

for cpu in gfx1100 gfx1201 gfx942; do
  build_cl "$cpu" "$cpu" 5 $all_cl
  build_hip "$cpu" "$cpu" 5 reduce_dyn
done
build_cl gfx1100-cov4 gfx1100 4 $v4_cl
build_cl gfx11-generic gfx11-generic 6 $all_cl
build_hip gfx11-generic gfx11-generic 6 reduce_dyn

echo "built $(find "$out" -name '*.co' | wc -l) code objects in $out"
