//! Kernels from source: OpenCL C and HIP compiled to AMDGPU code objects, for rig.
//!
//! A [`Compiler`] is a clang and an lld that target `amdgcn-amd-amdhsa` (LLVM 17 or later;
//! clang-19 and ld.lld-19 are what rig is tested with). [`Compiler::compile`] builds one
//! [`Source`] for one processor (`gfx1100`, `gfx1201`, `gfx942`, `gfx11-generic`, any that
//! LLVM knows) into the bytes [`rig_client::Device::load_image`] takes. It runs from a
//! program at run time or from a `build.rs` ([`build`]).
//!
//! Without ROCm (the default) the sources are built with `-nogpulib`: the work-item
//! functions of OpenCL C and the keywords and built-in variables of HIP then come from
//! rig's preludes ([`OPENCL_PRELUDE`], [`HIP_PRELUDE`]), which [`Compiler::compile`]
//! includes before the source, and so do the float math functions LLVM cannot lower by
//! itself ([`MATH_PRELUDE`]). With ROCm ([`Options::rocm`]) they come from ROCm's
//! headers and device libraries, and the preludes are left out.
//!
//! `docs/kernels.md` walks the whole path, from source to a launch, in Rust, C and Python.
//!
//! ```no_run
//! use rig_kernels::{Compiler, Options, Source};
//!
//! # fn main() -> Result<(), rig_kernels::Error> {
//! let add = Source::opencl(
//!     "add.cl",
//!     "kernel void add(global const float *x, global float *y) {
//!          size_t i = get_global_id(0);
//!          y[i] += x[i];
//!      }",
//! );
//! let code_object: Vec<u8> = Compiler::find()?.compile(&add, "gfx1100", &Options::default())?;
//! # Ok(())
//! # }
//! ```
//!
//! [`rig_client::Device::load_image`]: https://docs.rs/rig-client
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod build;
mod compiler;

pub use compiler::{Compiler, Error, Language, MIN_LLVM, Options, Source};

/// rig's OpenCL C prelude (`include/rig.h`): `get_global_id`, `get_local_id`,
/// `get_group_id`, `get_local_size`, `get_num_groups`, `get_global_size`, `get_work_dim`,
/// `barrier` and their `rig_` spellings, from the hardware ids and code object v5's hidden
/// arguments. Included before every OpenCL C source built without ROCm.
pub const OPENCL_PRELUDE: &str = include_str!("../include/rig.h");

/// rig's HIP prelude (`include/rig_hip.h`): `__global__`, `__device__`, `__shared__`,
/// `threadIdx`, `blockIdx`, `blockDim`, `gridDim`, `__syncthreads` and the fences.
/// Included before every HIP source built without ROCm.
pub const HIP_PRELUDE: &str = include_str!("../include/rig_hip.h");

/// rig's math for kernels built without ROCm (`include/rig_math.h`), which both preludes
/// include: `sin`, `cos`, `tan`, `pow` and `rsqrt` of float computed in double, and `exp`,
/// `exp2`, `exp10`, `log`, `log2`, `log10` as LLVM's intrinsics (docs/kernels.md states
/// their precision).
pub const MATH_PRELUDE: &str = include_str!("../include/rig_math.h");

/// The name each prelude ([`OPENCL_PRELUDE`], [`HIP_PRELUDE`], [`MATH_PRELUDE`]) has in the
/// include directory the compiler makes of them, for a source that `#include`s one itself.
pub const PRELUDE_NAMES: [&str; 3] = ["rig.h", "rig_hip.h", "rig_math.h"];

/// `docs/kernels.md`, whose Rust examples are this crate's doctests (its OpenCL C, HIP and
/// shell examples are built by `tests/docs.rs`).
#[cfg(doctest)]
#[doc = include_str!("../../docs/kernels.md")]
pub struct KernelsMd;
