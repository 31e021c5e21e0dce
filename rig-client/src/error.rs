//! The errors of the Rig API.
//!
//! This module owns [`Error`], what every fallible call of the crate returns, and [`Never`],
//! the reasons a device refuses a part of a submission for good, with the client's own forms
//! of what rigd's answers say ([`Refusal`], [`Shortage`], [`Limit`]), converted from the
//! protocol's at the boundary. A failed connection keeps rig-proto's error (and through it
//! the OS error) as its [`source`](std::error::Error::source), a loss the typed
//! [`crate::Fault`] rigd sent.

use std::io;

/// What a call of the Rig API returns.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a call of the Rig API failed.
///
/// A variant's message says what failed; where the cause is an error of its own it is the
/// [`source`](std::error::Error::source), not part of the message. [`Error::report`] prints
/// the whole chain once ("cannot reach rigd at /run/rig/rigd.sock: cannot connect to rigd
/// at ...: No such file or directory (os error 2)"), as a program's top level should.
///
/// Non-exhaustive: a later version may add variants. [`Error::kind`] names each variant
/// with a fieldless [`ErrorKind`], for bindings that give every kind its own code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// rigd could not be reached or refused the connection.
    #[error("cannot reach rigd at {path}")]
    Connect {
        /// The socket path tried.
        path: String,
        /// What went wrong: the OS error of the socket, or rigd's refusal of the hello.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The control connection to rigd failed after it was made: the socket (its OS error),
    /// the framing, or rigd closing it (rigd went away).
    #[error("the connection to rigd failed")]
    Connection(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// rigd answered with something this client cannot use (an answer of another request,
    /// a descriptor it did not pass, a layout out of step).
    #[error("rigd answered out of step: {0}")]
    Protocol(String),
    /// rigd shared memory whose layout the client cannot use (a ring that is not a power of
    /// two, an unaligned word, a share past its descriptor): rigd and rig-client disagree.
    /// The source says what was shared and what is wrong with it.
    #[error("rigd's answer is unusable")]
    Layout(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// rigd refused a request, with its kind and its reason.
    #[error("rigd refused: {message}")]
    Refused {
        /// What kind of refusal.
        code: Refusal,
        /// rigd's reason.
        message: String,
    },
    /// The device was lost (a fault of its work, a hang, a reset, a stop, a close of rigd).
    /// It reads as "AMD:0 lost: memory fault at 0x0 (write) by the instruction at 0x1a2c
    /// on COMPUTE:0 (vmid 1)".
    #[error("{device} lost: {fault}")]
    Lost {
        /// The device's GPU, such as `"AMD:0"`.
        device: String,
        /// Why: rigd's fault for it, or the client's own (a consumer of a lost producer, an
        /// abort, rigd no longer answering).
        fault: crate::fault::Fault,
    },
    /// The device never runs a part of a submission, whatever completes first (the client's
    /// own check, before anything reaches rigd). The message is the [`Never`]'s.
    #[error(transparent)]
    Never(#[from] Never),
    /// rigd answered that the device never does what was asked, whatever is freed first
    /// (the protocol's `Never`): Mapped memory or host pages on a path that maps none, a
    /// growth past what the path makes.
    #[error("rigd cannot {what} on this device: {reason}")]
    Unsupported {
        /// What was asked, such as "map this host memory".
        what: &'static str,
        /// rigd's reason.
        reason: String,
    },
    /// The device, the host or the client's quota lacks the memory asked for.
    #[error("out of memory: {what}: {asked} bytes asked, {}", refusal(*shortage, limit.as_ref()))]
    OutOfMemory {
        /// What the memory was for.
        what: String,
        /// The bytes asked for.
        asked: u64,
        /// Which budget refused them: the GPU's memory, the host's, or the quota.
        shortage: Shortage,
        /// The configured limit that refused them, with its value and what is missing;
        /// `None` where the GPU's or the host's own memory refused.
        limit: Option<Limit>,
    },
    /// A kernel's arguments were set against its parameters' kinds or sizes.
    #[error(transparent)]
    Arg(#[from] crate::args::ArgError),
    /// An image has no kernel of that name.
    #[error("the image has no kernel named {name:?}; its kernels: {kernels}")]
    NoKernel {
        /// The name asked.
        name: String,
        /// The image's kernels' names, comma separated.
        kernels: String,
    },
    /// An argument is outside what the call accepts, such as a range past a buffer's end,
    /// or a handle of a device closed before.
    #[error("{0}")]
    Invalid(String),
    /// Memory rigd shared could not be mapped or used: rig-shm's error, whose source is the
    /// OS error where there is one.
    #[error("{what}")]
    Shared {
        /// What the client was mapping.
        what: &'static str,
        /// rig-shm's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A host system call failed.
    #[error("{what}")]
    Io {
        /// What the crate was doing.
        what: &'static str,
        /// The system's error.
        #[source]
        source: io::Error,
    },
}

/// Which variant an [`Error`] is, without its fields: what a binding matches to give each
/// kind its own code (rig-capi's `RigStatus`).
///
/// Exhaustive on purpose, unlike [`Error`]: a binding matches it with no wildcard, so a
/// kind added to rig-client fails to compile there until it has a code of its own, instead
/// of reaching C or Python as "other". Programs match [`Error`] itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// [`Error::Connect`].
    Connect,
    /// [`Error::Connection`].
    Connection,
    /// [`Error::Protocol`].
    Protocol,
    /// [`Error::Layout`].
    Layout,
    /// [`Error::Refused`].
    Refused,
    /// [`Error::Lost`].
    Lost,
    /// [`Error::Never`].
    Never,
    /// [`Error::Unsupported`].
    Unsupported,
    /// [`Error::OutOfMemory`].
    OutOfMemory,
    /// [`Error::Arg`].
    Arg,
    /// [`Error::NoKernel`].
    NoKernel,
    /// [`Error::Invalid`].
    Invalid,
    /// [`Error::Shared`].
    Shared,
    /// [`Error::Io`].
    Io,
}

impl Error {
    /// Which variant this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Connect { .. } => ErrorKind::Connect,
            Error::Connection(_) => ErrorKind::Connection,
            Error::Protocol(_) => ErrorKind::Protocol,
            Error::Layout(_) => ErrorKind::Layout,
            Error::Refused { .. } => ErrorKind::Refused,
            Error::Lost { .. } => ErrorKind::Lost,
            Error::Never(_) => ErrorKind::Never,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::OutOfMemory { .. } => ErrorKind::OutOfMemory,
            Error::Arg(_) => ErrorKind::Arg,
            Error::NoKernel { .. } => ErrorKind::NoKernel,
            Error::Invalid(_) => ErrorKind::Invalid,
            Error::Shared { .. } => ErrorKind::Shared,
            Error::Io { .. } => ErrorKind::Io,
        }
    }

    /// The error of a failed connection to rigd.
    pub(crate) fn connection(e: rig_proto::Error) -> Error {
        Error::Connection(Box::new(e))
    }

    /// The error of an answer whose shared memory the client cannot use.
    pub(crate) fn layout(e: rig_proto::LayoutError) -> Error {
        Error::Layout(Box::new(e))
    }

    /// The error of memory rigd shared that the client could not map or use.
    pub(crate) fn shared(what: &'static str, e: rig_shm::ShmError) -> Error {
        Error::Shared {
            what,
            source: Box::new(e),
        }
    }

    /// rigd's refusal of a request.
    pub(crate) fn refused(e: rig_proto::ErrorReply) -> Error {
        Error::Refused {
            code: Refusal::of(e.code),
            message: e.message,
        }
    }

    /// rigd's answer that the memory asked for is missing.
    pub(crate) fn out_of_memory(
        what: impl Into<String>,
        asked: u64,
        shortage: rig_proto::Shortage,
        limit: Option<rig_proto::Limit>,
    ) -> Error {
        Error::OutOfMemory {
            what: what.into(),
            asked,
            shortage: match shortage {
                rig_proto::Shortage::Gpu => Shortage::Gpu,
                rig_proto::Shortage::Host => Shortage::Host,
                rig_proto::Shortage::Quota => Shortage::Quota,
            },
            limit: limit.map(Limit),
        }
    }

    /// The error and its sources, each once, joined by ": ": what a program prints at its
    /// top level (`eprintln!("{}", e.report())`).
    pub fn report(&self) -> Report<'_> {
        Report(self)
    }
}

/// An error with its chain of sources, as [`Error::report`] prints it.
#[derive(Debug, Clone, Copy)]
pub struct Report<'a>(&'a (dyn std::error::Error + 'static));

impl<'a> Report<'a> {
    /// The chain of any error, such as one of a crate beside rig-client.
    pub fn of(error: &'a (dyn std::error::Error + 'static)) -> Report<'a> {
        Report(error)
    }
}

impl std::fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut said = self.0.to_string();
        f.write_str(&said)?;
        let mut next = self.0.source();
        while let Some(e) = next {
            let this = e.to_string();
            // An error of another crate may print its own source too: say it once.
            if !this.is_empty() && !said.ends_with(&this) {
                write!(f, ": {this}")?;
                said = this;
            }
            next = e.source();
        }
        Ok(())
    }
}

/// What kind of refusal an [`Error::Refused`] is: the protocol's code for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Refusal {
    /// The request was malformed or not allowed in the connection's state.
    BadRequest,
    /// Client and daemon speak different protocol versions.
    VersionMismatch,
    /// The program may not do this (another user's device, an inspection query).
    PermissionDenied,
    /// No GPU of that index.
    NoSuchGpu,
    /// No device of that id belongs to this connection.
    NoSuchDevice,
    /// No region of that id belongs to the device.
    NoSuchRegion,
    /// No image of that id belongs to the device.
    NoSuchImage,
    /// An argument is out of range (zero bytes, an unaligned offset, a size not a multiple
    /// of 4).
    InvalidArgument,
    /// The user's quota forbids it (too many devices or connections).
    Quota,
    /// The code object was refused: not one, for another processor, or too much LDS.
    ImageRefused,
    /// The kernel cannot launch on this device, as the message says.
    EntryRefused,
    /// The device is lost; the message says why.
    Lost,
    /// The device is stopped and takes no more work.
    Stopped,
    /// The GPU or its path failed; the device may be lost.
    Fault,
    /// rigd itself failed; its log says more.
    Internal,
}

impl Refusal {
    pub(crate) fn of(code: rig_proto::ErrorCode) -> Refusal {
        use rig_proto::ErrorCode as C;
        match code {
            C::BadRequest => Refusal::BadRequest,
            C::VersionMismatch => Refusal::VersionMismatch,
            C::PermissionDenied => Refusal::PermissionDenied,
            C::NoSuchGpu => Refusal::NoSuchGpu,
            C::NoSuchDevice => Refusal::NoSuchDevice,
            C::NoSuchRegion => Refusal::NoSuchRegion,
            C::NoSuchImage => Refusal::NoSuchImage,
            C::InvalidArgument => Refusal::InvalidArgument,
            C::Quota => Refusal::Quota,
            C::ImageRefused => Refusal::ImageRefused,
            C::EntryRefused => Refusal::EntryRefused,
            C::Lost => Refusal::Lost,
            C::Stopped => Refusal::Stopped,
            C::Fault => Refusal::Fault,
            C::Internal => Refusal::Internal,
        }
    }
}

/// Which budget an [`Error::OutOfMemory`] ran out of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Shortage {
    /// The GPU's memory.
    Gpu,
    /// The host's memory or another resource of rigd's path.
    Host,
    /// The user's quota in rigd's configuration.
    Quota,
}

/// A configured limit of rigd that refused memory (in [`Error::OutOfMemory`]). Its
/// `Display` reads "208896 bytes missing under limits.memory_bytes (8589934592 bytes)".
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Limit(rig_proto::Limit);

impl Limit {
    /// The limit's name in rigd's configuration, such as `limits.memory_bytes`.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Its value in bytes (for a share of the GPU, the bytes that share comes to).
    pub fn value(&self) -> u64 {
        self.0.value
    }

    /// The bytes beyond it that the request needed: what is missing.
    pub fn missing(&self) -> u64 {
        self.0.missing
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// How an [`Error::OutOfMemory`] says who refused.
fn refusal(shortage: Shortage, limit: Option<&Limit>) -> String {
    let by = match shortage {
        Shortage::Gpu => "the GPU's memory",
        Shortage::Host => "the host's memory",
        Shortage::Quota => "the quota",
    };
    match limit {
        Some(l) => format!("refused by {by}: {l}"),
        None => format!("refused by {by}"),
    }
}

/// Why a device never runs a part of a submission (room answering "never", `docs/client.md`).
///
/// Non-exhaustive: a later version may add reasons.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Never {
    /// A launch of typed arguments that cannot launch: a parameter not set, or a kernel
    /// whose metadata the client has not ([`crate::Args::launch`]).
    #[error("part {part}: {error}")]
    Args {
        /// The part's index.
        part: usize,
        /// Why.
        error: crate::args::ArgError,
    },
    /// A copy or fill of one byte or more was placed on `COMPUTE:0`.
    #[error("part {part}: COMPUTE:0 runs no copies; put it on COPY:0")]
    CopyOnCompute {
        /// The part's index in the submission.
        part: usize,
    },
    /// Words or a copy were placed on a queue that does not run them.
    #[error("part {part}: {queue} does not run {what}")]
    WrongQueue {
        /// The part's index.
        part: usize,
        /// The queue's name.
        queue: &'static str,
        /// What the part is.
        what: &'static str,
    },
    /// Words on an AQL queue that are not whole 64-byte packets.
    #[error("part {part}: {words} words are not whole AQL packets of 16 words")]
    PartialPacket {
        /// The part's index.
        part: usize,
        /// Its words.
        words: usize,
    },
    /// A launch whose grid or group has an empty axis.
    #[error("part {part}: launch has an empty axis (groups {groups:?}, threads {threads:?})")]
    EmptyAxis {
        /// The part's index.
        part: usize,
        /// Groups per axis.
        groups: [u32; 3],
        /// Threads per group per axis.
        threads: [u32; 3],
    },
    /// A group of more threads than the kernel takes.
    #[error("part {part}: {threads} threads per group, but kernel {kernel} takes at most {max}")]
    TooManyThreads {
        /// The part's index.
        part: usize,
        /// The kernel's name.
        kernel: String,
        /// Threads per group asked.
        threads: u64,
        /// The kernel's bound.
        max: u32,
    },
    /// More shared memory per group than the GPU's local data share leaves the kernel.
    #[error("part {part}: {shared} bytes of shared memory, but kernel {kernel} leaves {available}")]
    TooMuchShared {
        /// The part's index.
        part: usize,
        /// The kernel's name.
        kernel: String,
        /// Bytes asked.
        shared: u32,
        /// The LDS less the kernel's group segment.
        available: u32,
    },
    /// A grid of 2^32 work-items or more along an axis, on a GPU of several dies.
    #[error("part {part}: 2^32 work-items or more along axis {axis}")]
    GridTooLarge {
        /// The part's index.
        part: usize,
        /// The axis, 0 to 2.
        axis: usize,
    },
    /// An `after` index that is not below the part's own.
    #[error("part {part}: after index {after} is not below its own")]
    AfterNotBelow {
        /// The part's index.
        part: usize,
        /// The offending index.
        after: usize,
    },
    /// Parameters that end before the kernel's explicit arguments do.
    #[error("part {part}: {params} parameter bytes, but kernel {kernel} takes {explicit}")]
    ShortParams {
        /// The part's index.
        part: usize,
        /// The kernel's name.
        kernel: String,
        /// Parameter bytes given.
        params: usize,
        /// The kernel's explicit argument bytes.
        explicit: u32,
    },
    /// A ref whose 8 bytes do not lie inside the parameters.
    #[error("part {part}: ref at byte {at} lies outside the {params} parameter bytes")]
    RefOutside {
        /// The part's index.
        part: usize,
        /// The ref's position.
        at: usize,
        /// Parameter bytes given.
        params: usize,
    },
    /// A copy or fill range past a buffer's end.
    #[error("part {part}: {what} ends at byte {end}, past the buffer's {len} bytes")]
    OutOfBounds {
        /// The part's index.
        part: usize,
        /// Which side.
        what: &'static str,
        /// The end of the range.
        end: u64,
        /// The buffer's length.
        len: u64,
    },
    /// A copy whose source and destination overlap.
    #[error("part {part}: the copy's source and destination overlap")]
    Overlap {
        /// The part's index.
        part: usize,
    },
    /// A box whose width exceeds a pitch.
    #[error("part {part}: box width {width} exceeds a pitch ({src_pitch}, {dst_pitch})")]
    BadBox {
        /// The part's index.
        part: usize,
        /// Bytes per row.
        width: u64,
        /// Source pitch.
        src_pitch: u64,
        /// Destination pitch.
        dst_pitch: u64,
    },
    /// A buffer or kernel of another device.
    #[error("part {part}: uses a buffer or kernel of another device")]
    OtherDevice {
        /// The part's index.
        part: usize,
    },
    /// The submission exceeds the largest ring or segment the device makes.
    #[error(
        "the submission takes {bytes} bytes of the {what}, more than the largest the device makes ({most})"
    )]
    TooLarge {
        /// The ring or segment.
        what: &'static str,
        /// Bytes it takes (doubled where packets never wrap).
        bytes: u64,
        /// The largest the device makes.
        most: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_printed_by_the_report_once_not_by_the_message() {
        let os = io::Error::from_raw_os_error(libc::ENOENT);
        let e = Error::Io {
            what: "reading the word",
            source: io::Error::new(os.kind(), os),
        };
        assert_eq!(e.to_string(), "reading the word");
        let report = e.report().to_string();
        assert!(report.starts_with("reading the word: "), "{report}");
        assert_eq!(report.matches("os error 2").count(), 1, "{report}");
        let never = Error::from(Never::Overlap { part: 2 });
        assert_eq!(never.kind(), ErrorKind::Never);
        assert_eq!(
            never.report().to_string(),
            "part 2: the copy's source and destination overlap"
        );
    }

    #[test]
    fn rigds_never_is_unsupported_with_its_reason() {
        let e = Error::Unsupported {
            what: "map this host memory",
            reason: "this gpu's path maps no host memory".into(),
        };
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert_eq!(
            e.to_string(),
            "rigd cannot map this host memory on this device: this gpu's path maps no host memory"
        );
    }

    #[test]
    fn out_of_memory_says_what_was_asked_what_is_missing_and_which_limit() {
        let e = Error::out_of_memory(
            "Device memory",
            8 << 30,
            rig_proto::Shortage::Quota,
            Some(rig_proto::Limit {
                name: "limits.memory_bytes".into(),
                value: 8 << 30,
                missing: 208896,
            }),
        );
        assert_eq!(
            e.to_string(),
            "out of memory: Device memory: 8589934592 bytes asked, refused by the quota: \
             208896 bytes missing under limits.memory_bytes (8589934592 bytes)"
        );
        let gpu = Error::out_of_memory("Device memory", 4096, rig_proto::Shortage::Gpu, None);
        assert_eq!(
            gpu.to_string(),
            "out of memory: Device memory: 4096 bytes asked, refused by the GPU's memory"
        );
    }
}
