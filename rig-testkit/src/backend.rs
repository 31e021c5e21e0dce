//! The backends a test runs on, and [`on_backends!`](crate::on_backends), which makes one
//! `#[test]` per backend from one test body.
//!
//! A backend is what the test's rigd serves ([`crate::Daemon`]) and which code objects its
//! tests load: the simulated gfx1100 or gfx942, the same GPUs through rigd's kfd path
//! against an emulated KFD (rig-kfd-emu, in a process of its own), or a simulated gfx1201,
//! each with the kernels built for it.
//!
//! What the kfd path cannot show (that the GPU is simulated; the instruction, packet
//! position or queue of a fault: KFD's exception events name a GPU and an address, no
//! queue) is tested on the simulator's backends alone: such a test leaves `kfd` out of its
//! list. A fault's isolation between clients holds on the kfd path too: each client's
//! devices run in a KFD worker process of their own.

use std::path::{Path, PathBuf};

/// What a test's rigd serves, and the processor its kernels are built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A simulated gfx1100 (RDNA3).
    Sim,
    /// An emulated KFD's gfx1100, through rigd's kfd path.
    Kfd,
    /// A simulated gfx1201 (RDNA4), which rig-isa's GFX12 front end runs.
    Gfx1201,
    /// A simulated gfx942 (MI300X: CDNA3, an AQL compute queue, waves of 64), which rig-isa's
    /// GFX9 front end runs.
    Gfx942,
    /// An emulated KFD's gfx942 (8 XCCs), through rigd's kfd path.
    KfdGfx942,
}

impl Backend {
    /// The processor the backend's GPU is, and its kernels are built for.
    pub fn processor(self) -> &'static str {
        match self {
            Backend::Sim | Backend::Kfd => "gfx1100",
            Backend::Gfx1201 => "gfx1201",
            Backend::Gfx942 | Backend::KfdGfx942 => "gfx942",
        }
    }

    /// Whether rigd serves the GPU through its kfd path.
    pub fn is_kfd(self) -> bool {
        matches!(self, Backend::Kfd | Backend::KfdGfx942)
    }

    /// A code object of `kernels/out/<processor>` by name.
    pub fn code(self, name: &str) -> Vec<u8> {
        crate::kernels::built(self.processor(), name)
    }

    /// The kernel corpus (`kernels/corpus`) as built for the backend's processor.
    pub fn corpus_dir(self) -> PathBuf {
        let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/corpus");
        match self.processor() {
            "gfx1100" => d,
            p => d.join(p),
        }
    }

    /// A kernel that spins until a word turns nonzero, where a compiler is installed
    /// ([`crate::kernels::compile`]).
    pub fn spin_kernel(self) -> Option<Vec<u8>> {
        crate::kernels::compile(
            "spin",
            "__kernel void spin(__global volatile uint *flag) { while (*flag == 0) {} }\n",
            self.processor(),
        )
    }
}

/// One `#[test]` per backend for each test body named: `on_backends!(sim, kfd, gfx942 =>
/// a_test, another)` makes, for `fn a_test(b: Backend)`, a module `a_test` of tests `sim`,
/// `kfd` and `gfx942`, each calling it with its [`Backend`] (so `cargo test a_test` runs it
/// everywhere and `cargo test a_test::kfd` on the kfd path alone). The backends are `sim`,
/// `kfd`, `gfx1201`, `gfx942` and `kfd_gfx942`.
#[macro_export]
macro_rules! on_backends {
    ($($backend:ident),+ => $($test:ident),+ $(,)?) => {
        $crate::on_backends!(@each [$($backend),+] $($test)+);
    };
    (@each $backends:tt $($test:ident)+) => {
        $( $crate::on_backends!(@one $backends $test); )+
    };
    (@one [$($backend:ident),+] $test:ident) => {
        #[doc = concat!("`", stringify!($test), "` on each backend.")]
        mod $test {
            $(
                #[test]
                fn $backend() {
                    super::$test($crate::on_backends!(@backend $backend));
                }
            )+
        }
    };
    (@backend sim) => { $crate::Backend::Sim };
    (@backend kfd) => { $crate::Backend::Kfd };
    (@backend gfx1201) => { $crate::Backend::Gfx1201 };
    (@backend gfx942) => { $crate::Backend::Gfx942 };
    (@backend kfd_gfx942) => { $crate::Backend::KfdGfx942 };
}
