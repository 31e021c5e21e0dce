//! The Rig API for programs, and the client half of rig's AMD driver.
//!
//! A program links `rig-client`, connects to `rigd` (the daemon that owns the machine's
//! AMD GPUs, or serves the simulated one) and opens a device. Everything that changes what
//! the GPU may touch goes through rigd's socket: allocating memory, loading code, resolving
//! a kernel, growing rings, closing (small buffers are cut from larger regions rigd
//! granted, so most of their allocations and frees make no call: [`SlabPolicy`]).
//! Submitting does not: rigd shares the device's rings, argument segment and timeline word
//! with the program, which places packets and argument bytes with plain stores and rings a
//! doorbell. A wait reads the timeline word, spinning briefly and then sleeping on the
//! device's interrupt.
//!
//! # Example
//!
//! Adds `x` to `y` on the GPU and prints `y[10] = 11` (the `rig-demo` crate's binary runs
//! this against a rigd of its own when none is running). The kernel comes from OpenCL C
//! source, built for the device's processor by the `rig-kernels` crate (clang and lld, no
//! ROCm needed; `docs/kernels.md` shows the whole path, HIP and C too):
//!
//! ```
//! use rig_kernels::{Compiler, Options, Source};
//!
//! # fn main() -> Result<(), rig_kernels::Error> {
//! const ADD: &str = "kernel void add(global const float *x, global float *y) {
//!     size_t i = get_global_id(0);
//!     y[i] += x[i];
//! }";
//! let add_gfx1100 = Compiler::find()?.compile(&Source::opencl("add.cl", ADD), "gfx1100", &Options::default())?;
//! # assert!(add_gfx1100.starts_with(b"\x7fELF"));
//! # Ok(())
//! # }
//! ```
//!
//! Then the launch sets the kernel's parameters by name ([`Kernel::args`]); they are
//! checked against the code object's metadata, so a program writes no byte offsets:
//!
//! ```no_run
//! use rig_client::{Memory, Rig, Submission, f32s, put_f32s};
//!
//! # fn main() -> rig_client::Result<()> {
//! # let add_gfx1100: &[u8] = &[];
//! const N: u64 = 1024;
//! let device = Rig::open("AMD:0")?;
//! let image = device.load_image(add_gfx1100)?;
//! let add = image.resolve("add")?;
//! let x = device.buffer(4 * N, Memory::Pinned)?;
//! let y = device.buffer(4 * N, Memory::Pinned)?;
//! x.write(|b| put_f32s(b, (0..N).map(|i| i as f32)))?;
//! y.write(|b| put_f32s(b, std::iter::repeat(1.0)))?;
//! let mut args = add.args();
//! args.read("x", &x)?.buffer("y", &y)?;
//! let launch = Submission::new().launch(args.launch([(N / 256) as u32, 1, 1], [256, 1, 1]));
//! device.submit(&launch)?;
//! // The read waits for the launch, the last write of y.
//! y.read(|b| println!("y[10] = {}", f32s(b).nth(10).unwrap_or(f32::NAN)))?;
//! device.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! A launch is a [`Launch`], built step by step: [`Args::launch`] makes one from typed
//! arguments, and the raw form, [`Launch::new`], takes the parameter bytes
//! ([`Launch::params`]) and, for each buffer, the byte where its address goes
//! ([`Launch::refs`], [`Ref::read`]`(&x, 0)`). Building a submission never fails: the first
//! reason its device never runs it is kept ([`Submission::refused`]) and returned by
//! [`Device::submit`].
//!
//! A wait is [`Point::wait`], or [`Point::wait_with`] and a [`WaitPolicy`] (how long it
//! spins, how politely, its timeout).
//!
//! # Order
//!
//! Values of a device complete in order: value v's work starts once v - 1's completed, on
//! both queues. Within a submission, the parts of one queue run in order, and a part runs
//! after the parts of the other queue its [`Submission::after`] names. A buffer's host
//! accesses wait for the GPU's uses of it, with no call from the program: a read waits for
//! the last submitted write, a write or a free for every submitted use.
//!
//! # Errors
//!
//! Every call returns [`Result`]. A part the device never runs is [`Error::Never`] with the
//! reason ([`Never`]); a device rigd lost (a fault of its work, a hang, a reset) answers
//! waits and later calls with [`Error::Lost`]: the device's name and a typed [`Fault`]
//! (its [`FaultKind`], queue, VMID, address, program counter), which reads as "AMD:0 lost:
//! memory fault at 0x0 (write) by the instruction at 0x1a2c on COMPUTE:0 (vmid 1)". A device
//! whose work waited on the GPU for a point of another device that was lost before it
//! reached it is lost too, its fault ([`FaultKind::Producer`]) naming that device ("AMD:1
//! lost: AMD:0 lost: ...").
//!
//! A request rigd answers the device never does (Mapped memory or host pages on a path that
//! maps none) is [`Error::Unsupported`] with rigd's reason, one it refuses
//! [`Error::Refused`] with its kind ([`Refusal`]); no rigd on the socket is
//! [`Error::Connect`], a rigd that went away [`Error::Connection`]. [`Error`] is
//! non-exhaustive, and a message never repeats its [`source`](std::error::Error::source):
//! [`Error::report`] prints the error with its sources, once each, for a program's top level.
//!
//! # Lifetimes
//!
//! Handles keep what they name alive, never the reverse: a kernel keeps its image loaded,
//! and buffers, images, kernels and points keep their device open. Dropping the last
//! handle of an image unloads it; dropping the last handle of a device stops its work and
//! closes it at once (and its connection to rigd, if nothing else uses it).
//! [`Device::close`] waits for submitted work first; [`Device::abort`] does not.
//!
//! # Modules
//!
//! The public types live at the crate's root, and they are the client's own: rigd's
//! protocol is positional and its versions must match, so no type of it is part of this
//! API; what rigd sends is converted at the boundary (`facts`: [`Facts`], [`GpuInfo`];
//! `fault`: [`Fault`]; `error`: [`Refusal`], [`Shortage`], [`Limit`]), and the types are
//! non-exhaustive where a later version may add to them. Inside: `device` (devices:
//! `control`, every call to rigd; `waits`; `bounce`; `deferred` frees; `peers`' words),
//! `buffer`, `host` (the program's own memory, [`HostMemory`]), `image`, `slab` (the pages
//! of small buffers, [`SlabPolicy`]), `loss` (reached before a loss; consumers of lost
//! producers), `args` (a kernel's parameters from its metadata, typed arguments),
//! `submission` (the builder and its checks), `place` (the submission path: `compile`,
//! `framing`, `rings`, `room`), `dispatch` (PM4 dispatches, kernel arguments), `copies`
//! (SDMA copies and fills), `profile` (clock stamps, traces). The rings themselves are
//! rig-shm's.
//!
//! The crate has no features and links neither rigd nor tokio: a program adds
//! `rig-client = { path = "../rig/rig-client" }` (or a git dependency) and nothing else.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod args;
mod buffer;
mod clock;
mod copies;
mod device;
mod dispatch;
mod error;
mod facts;
mod fault;
mod host;
mod image;
mod loss;
mod place;
mod point;
mod profile;
mod slab;
mod submission;
mod types;

pub use args::{ArgError, ArgValue, Args, At, LOCAL_ALIGN, Param, ParamKind, Registers};
pub use buffer::{Buffer, f32s, put_f32s};
pub use device::{DEFAULT_HINTS, DEFAULT_SPIN, Device, Rig, Sleeps, WaitPolicy};
pub use error::{Error, ErrorKind, Limit, Never, Refusal, Report, Result, Shortage};
pub use facts::{ClockSource, Facts, GpuInfo, GpuPath, Packets};
pub use fault::{Fault, FaultKind};
pub use host::HostMemory;
pub use image::{Image, Kernel};
pub use point::Point;
pub use profile::{Profile, Work};
pub use slab::{SLABS, SlabPolicy};
pub use submission::{Launch, Ref, Submission};
pub use types::{Access, CopyBox, Memory, Queue};

#[cfg(test)]
mod tests {
    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_cross_threads() {
        send_sync::<super::Rig>();
        send_sync::<super::Device>();
        send_sync::<super::Buffer>();
        send_sync::<super::Image>();
        send_sync::<super::Kernel>();
        send_sync::<super::Point>();
        send_sync::<super::Submission>();
        send_sync::<super::Profile>();
    }

    /// The crate's API is its own: every type it exports is defined here, none a
    /// re-export of the protocol's or another crate's (a `pub use` of a dependency's type
    /// is inlined by rustdoc, so only its type name tells).
    #[test]
    fn exported_types_are_the_crates_own() {
        use std::any::type_name;
        let names = [
            type_name::<super::ArgError>(),
            type_name::<dyn super::ArgValue>(),
            type_name::<super::Args>(),
            type_name::<super::At<'static>>(),
            type_name::<super::Param>(),
            type_name::<super::ParamKind>(),
            type_name::<super::Registers>(),
            type_name::<super::Buffer>(),
            type_name::<super::Device>(),
            type_name::<super::Rig>(),
            type_name::<super::Sleeps>(),
            type_name::<super::WaitPolicy>(),
            type_name::<super::Error>(),
            type_name::<super::ErrorKind>(),
            type_name::<super::Limit>(),
            type_name::<super::Never>(),
            type_name::<super::Refusal>(),
            type_name::<super::Report<'static>>(),
            type_name::<super::Shortage>(),
            type_name::<super::ClockSource>(),
            type_name::<super::Facts>(),
            type_name::<super::GpuInfo>(),
            type_name::<super::GpuPath>(),
            type_name::<super::Packets>(),
            type_name::<super::Fault>(),
            type_name::<super::FaultKind>(),
            type_name::<super::HostMemory>(),
            type_name::<super::Image>(),
            type_name::<super::Kernel>(),
            type_name::<super::Point>(),
            type_name::<super::Profile>(),
            type_name::<super::Work>(),
            type_name::<super::SlabPolicy>(),
            type_name::<super::Launch>(),
            type_name::<super::Ref>(),
            type_name::<super::Submission>(),
            type_name::<super::Access>(),
            type_name::<super::CopyBox>(),
            type_name::<super::Memory>(),
            type_name::<super::Queue>(),
        ];
        for name in names {
            let name = name.strip_prefix("dyn ").unwrap_or(name);
            assert!(
                name.starts_with("rig_client::"),
                "{name} is not rig-client's own"
            );
        }
    }
}
