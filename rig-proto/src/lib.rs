//! rig's control protocol: what rigd and its clients (`rig-client`, `rigctl`) say to each
//! other over rigd's Unix socket, and how it crosses the socket.
//!
//! # What goes over the socket, and what does not
//!
//! The socket carries the control plane only: everything that changes what a GPU may
//! touch (opening a device, allocating and mapping memory, loading code, resolving a
//! kernel, growing rings, stopping) and the queries `rigctl` makes. Submissions never do.
//! rigd answers an open with memfd descriptors for the device's rings, argument segment
//! and timeline word; the client maps them and submits with plain stores and a doorbell
//! store, with no system call and no round trip (see [`messages::QueueShare`]).
//!
//! # Framing
//!
//! A frame is an 8-byte header (payload length as a little-endian `u32`, the count of
//! attached descriptors as a `u8`, three zero bytes) and then the payload: one message in
//! bincode 2 through serde, [`frame::config`] (standard: varint integers, little-endian),
//! with bincode's decode limit set to the frame cap. The header is checked before any
//! payload memory is allocated, and the payload buffer grows only as bytes arrive.
//!
//! # Handshake
//!
//! The client's first frame is a [`Hello`] (the magic [`MAGIC`], its [`VERSION`], its
//! program name); rigd answers [`HelloReply::Welcome`] or [`HelloReply::Refused`] and
//! closes. Versions must be equal: there is no negotiation, and a mismatch is a typed
//! [`Error::VersionMismatch`] on the client. The handshake types never change shape, so
//! any two versions can tell each other so.
//!
//! # Requests
//!
//! After the handshake the client sends one [`Request`] and waits for one [`Response`],
//! strictly in turn. Each request's doc line states the state it needs.
//!
//! # Descriptor passing
//!
//! Up to [`MAX_FDS`] descriptors ride with a frame as one `SCM_RIGHTS` message on its first
//! bytes, received close-on-exec and owned ([`std::os::fd::OwnedFd`]) at once. A message
//! names them by [`FdIndex`]; a frame must carry exactly the descriptors its header
//! announces and its message names ([`Request::fds_needed`], [`Response::fds_needed`]).
//! Any other descriptor is closed and the frame is an error.
//!
//! # Limits
//!
//! - a payload is at most [`MAX_FRAME`] (16 MiB) bytes; a header announcing more is refused
//!   before allocation, and an encoder refuses to build such a frame;
//! - a frame carries at most [`MAX_FDS`] (8) descriptors;
//! - bincode's own limit equals the frame cap, so no length inside a payload can make the
//!   decoder allocate past it;
//! - a hello's payload is at most [`MOST_HELLO`] (4096) bytes and its program name at most
//!   [`MOST_PROGRAM`] (256); a kernel name at most [`MOST_ENTRY_NAME`] (4096); a stop's
//!   reason at most [`MOST_STOP_REASON`] (1024). rigd checks them as soon as a message is
//!   decoded ([`Request::check_bounds`], [`Hello::check_bounds`]), before it keeps
//!   anything, and refuses with [`ErrorCode::BadRequest`] naming the bound ([`TooLong`]);
//!   [`Connection::connect`] cuts its own program name ([`cut`]).
//!
//! # Errors
//!
//! A request that fails is answered with [`Response::Error`]: a stable [`ErrorCode`] and a
//! lowercase message saying what to do. Shortages are not errors but answers
//! ([`Response::NoMemory`], [`Response::Never`]), since a client reclaims memory and asks
//! again. A frame that is whole but does not decode is answered with
//! [`ErrorCode::BadRequest`] and the connection goes on; a frame that breaks the stream
//! (an oversized length, a close mid-frame, too many descriptors) ends the connection
//! ([`FrameError::is_fatal`]). Nothing a peer sends makes either side panic.
//!
//! # Modules
//!
//! - [`messages`]: every message type;
//! - [`wire`]: the wire forms of rig-amd's types that messages carry, in the protocol's order;
//! - [`frame`]: the frame layout, the limits and a resumable reader;
//! - [`Connection`]: the blocking client side;
//! - `ServerConnection` (feature `tokio`, off by default; rigd turns it on): rigd's async side.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod bounds;
mod conn;
pub mod fdpass;
pub mod frame;
pub mod messages;
#[cfg(feature = "tokio")]
mod server;
pub mod wire;

use std::path::PathBuf;

pub use bounds::{
    CUT_MARK, MOST_ENTRY_NAME, MOST_GRANT_DEVICES, MOST_GRANT_GPUS, MOST_GRANT_ID, MOST_HELLO,
    MOST_HOLDER_NAME, MOST_PROGRAM, MOST_STOP_REASON, TooLong, cut, cut_marked,
};
pub use conn::{Connection, MOST_POSTED, MOST_POSTED_ERRORS};
pub use frame::{FrameError, MAX_FDS, MAX_FRAME};
pub use messages::*;
#[cfg(feature = "tokio")]
pub use server::{FrameBudget, ServerConnection, reply_for};

/// The first eight bytes every client's hello carries: `"rigproto"` read little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"rigproto");

/// The protocol version of this build. Both sides must speak the same one. Version 9
/// added [`Facts::clock`] and [`ClockSample::gap_ns`]: how a device reads the GPU's clock;
/// version 10 the grants ([`Request::Grant`]) and a client's grant and pod
/// ([`ClientInfo::grant`], [`ClientInfo::pod`]).
pub const VERSION: u32 = 10;

/// Where rigd listens unless configured otherwise.
pub const DEFAULT_SOCKET: &str = "/run/rig/rigd.sock";

/// The environment variable that names another socket.
pub const SOCKET_ENV: &str = "RIG_SOCKET";

/// The socket to use: `$RIG_SOCKET` if set and not empty, else [`DEFAULT_SOCKET`].
pub fn socket_path() -> PathBuf {
    socket_path_from(std::env::var_os(SOCKET_ENV))
}

fn socket_path_from(value: Option<std::ffi::OsString>) -> PathBuf {
    match value {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_SOCKET),
    }
}

/// A failure of a connection as a whole (as opposed to a refused request, which is an
/// answer: [`Response::Error`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The socket could not be reached.
    #[error("cannot connect to rigd at {path}; is rigd running, and is RIG_SOCKET right?")]
    Connect {
        /// The socket's path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Framing, the socket or decoding failed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The peer closed the connection where an answer was due.
    #[error("the peer closed the connection before answering")]
    Closed,
    /// The two sides speak different protocol versions.
    #[error(
        "rigd speaks protocol version {daemon} but this program speaks {client}; \
         use a rig-client built from the same release as rigd"
    )]
    VersionMismatch {
        /// The daemon's version.
        daemon: u32,
        /// The client's version.
        client: u32,
    },
    /// rigd refused the connection.
    #[error("rigd refused the connection: {0}")]
    Refused(ErrorReply),
    /// The peer's hello had the wrong magic.
    #[error("the peer is not a rig client (bad magic in its hello)")]
    NotRig,
    /// An answer shared memory in a layout the client cannot use.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A frame carried another number of descriptors than its message names.
    #[error("message needs {needed} file descriptors but {got} came with it")]
    FdCount {
        /// Descriptors the message names.
        needed: usize,
        /// Descriptors attached.
        got: usize,
    },
}

/// A result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_path_prefers_a_nonempty_env_value() {
        assert_eq!(socket_path_from(None), PathBuf::from("/run/rig/rigd.sock"));
        assert_eq!(
            socket_path_from(Some("".into())),
            PathBuf::from(DEFAULT_SOCKET)
        );
        assert_eq!(
            socket_path_from(Some("/tmp/r.sock".into())),
            PathBuf::from("/tmp/r.sock")
        );
    }

    #[test]
    fn magic_spells_rigproto() {
        assert_eq!(MAGIC.to_le_bytes(), *b"rigproto");
    }
}
