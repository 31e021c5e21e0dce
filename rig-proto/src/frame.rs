//! Frames: how a message and its file descriptors cross the socket.
//!
//! A frame is an 8-byte header, then `length` bytes of bincode:
//!
//! ```text
//! offset 0  u32 LE  length   payload bytes, at most MAX_FRAME
//! offset 4  u8      fds      descriptors attached to the frame, at most MAX_FDS
//! offset 5  [u8; 3] reserved zero
//! offset 8  payload          bincode 2 (serde), standard config, byte limit MAX_FRAME
//! ```
//!
//! The descriptors ride as one `SCM_RIGHTS` message on the frame's first bytes. The header
//! is checked before anything is allocated, and the payload buffer grows with the bytes
//! that actually arrive, so a peer that announces 16 MiB and sends nothing costs nothing.
//!
//! This module owns the byte layout, the limits and a reader that is resumable (so an
//! async read can be cancelled between polls without losing bytes). It does not own the
//! socket: [`crate::Connection`] and rigd's `ServerConnection` drive it.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use bincode::config::{Configuration, LittleEndian, Varint};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::fdpass;

/// The largest payload of a frame: 16 MiB, room for a large code object.
pub const MAX_FRAME: usize = 16 << 20;

/// The most file descriptors one frame carries.
pub const MAX_FDS: usize = 8;

/// Bytes of a frame's header.
pub const HEADER_BYTES: usize = 8;

/// How much payload buffer the reader adds at a time, so memory follows arrived bytes.
const CHUNK: usize = 64 << 10;

/// The bincode configuration of every payload: varint integers, little-endian, and a
/// decode limit of [`MAX_FRAME`] so no length inside a payload allocates past the cap.
pub type WireConfig = Configuration<LittleEndian, Varint, bincode::config::Limit<MAX_FRAME>>;

/// The one configuration both sides use.
pub const fn config() -> WireConfig {
    bincode::config::standard().with_limit::<MAX_FRAME>()
}

/// A failure to frame, send, receive or decode.
///
/// After any error but [`FrameError::Decode`] and [`FrameError::Trailing`] the byte
/// stream is no longer in step, and the connection must be closed (see
/// [`FrameError::is_fatal`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The peer closed the connection inside a frame.
    #[error("the peer closed the connection in the middle of a frame ({got} of {want} bytes)")]
    ClosedMidFrame {
        /// Bytes of the frame received.
        got: usize,
        /// Bytes of the frame expected (the header's, until it is complete).
        want: usize,
    },
    /// A header announced a payload over the cap.
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// The announced length.
        len: usize,
        /// [`MAX_FRAME`].
        max: usize,
    },
    /// A frame announced or carried more descriptors than a frame may.
    #[error("frame carries {count} file descriptors, more than the {max} allowed")]
    TooManyFds {
        /// Descriptors announced or attempted.
        count: usize,
        /// [`MAX_FDS`].
        max: usize,
    },
    /// Descriptors arrived that the header did not announce, or fewer than it did.
    #[error("frame announced {announced} file descriptors but {received} arrived")]
    FdMismatch {
        /// Descriptors the header announced.
        announced: usize,
        /// Descriptors received (all now closed).
        received: usize,
    },
    /// The kernel truncated the control data: the peer sent descriptors in a way no frame does.
    #[error(
        "file descriptors were truncated in transit; the peer is not speaking the rig protocol"
    )]
    Truncated,
    /// A header's reserved bytes were not zero.
    #[error("frame header has nonzero reserved bytes; the peer is not speaking the rig protocol")]
    BadHeader,
    /// The payload is not a message of the expected type.
    #[error("frame payload is not a valid message")]
    Decode(#[source] bincode::error::DecodeError),
    /// The payload decoded but left bytes over.
    #[error("frame payload has {extra} bytes after the message")]
    Trailing {
        /// Bytes left over.
        extra: usize,
    },
    /// A message did not encode (over the cap, for one).
    #[error("message cannot be encoded")]
    Encode(#[source] bincode::error::EncodeError),
    /// The socket failed.
    #[error("socket i/o failed")]
    Io(#[source] io::Error),
}

impl FrameError {
    /// True if the byte stream is out of step and the connection must close. A payload
    /// that does not decode leaves the stream in step: its frame was read whole.
    pub fn is_fatal(&self) -> bool {
        !matches!(
            self,
            FrameError::Decode(_)
                | FrameError::Trailing { .. }
                | FrameError::Encode(_)
                | FrameError::FdMismatch { .. }
        )
    }
}

/// A frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Payload bytes.
    pub len: usize,
    /// Descriptors attached.
    pub fds: usize,
}

impl Header {
    /// Checks and parses a header; nothing is allocated for a bad one.
    pub fn parse(bytes: &[u8; HEADER_BYTES]) -> Result<Header, FrameError> {
        let len = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        let fds = bytes[4] as usize;
        if bytes[5..] != [0, 0, 0] {
            return Err(FrameError::BadHeader);
        }
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge {
                len,
                max: MAX_FRAME,
            });
        }
        if fds > MAX_FDS {
            return Err(FrameError::TooManyFds {
                count: fds,
                max: MAX_FDS,
            });
        }
        Ok(Header { len, fds })
    }

    /// The header's bytes; `None` past the limits.
    pub fn encode(&self) -> Option<[u8; HEADER_BYTES]> {
        if self.len > MAX_FRAME || self.fds > MAX_FDS {
            return None;
        }
        let mut b = [0u8; HEADER_BYTES];
        b[..4].copy_from_slice(&(self.len as u32).to_le_bytes());
        b[4] = self.fds as u8;
        Some(b)
    }
}

/// A received frame: its payload and the descriptors that came with it.
#[derive(Debug)]
pub struct Frame {
    /// The bincode bytes.
    pub payload: Vec<u8>,
    /// The descriptors, in the order sent; closed when dropped.
    pub fds: Vec<OwnedFd>,
}

/// Encodes a message into a payload, refusing one over [`MAX_FRAME`].
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let bytes = bincode::serde::encode_to_vec(msg, config()).map_err(FrameError::Encode)?;
    if bytes.len() > MAX_FRAME {
        return Err(FrameError::TooLarge {
            len: bytes.len(),
            max: MAX_FRAME,
        });
    }
    Ok(bytes)
}

/// Decodes a whole payload into a message; bytes left over are an error.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    let (msg, used) =
        bincode::serde::decode_from_slice(payload, config()).map_err(FrameError::Decode)?;
    if used != payload.len() {
        return Err(FrameError::Trailing {
            extra: payload.len() - used,
        });
    }
    Ok(msg)
}

/// A frame being received: header, then payload, with descriptors gathered on the way.
///
/// Resumable: feed it what each receive gives and it says when a frame is whole. It holds
/// its progress, so dropping a read future between receives loses nothing.
#[derive(Debug, Default)]
pub struct Reader {
    header: [u8; HEADER_BYTES],
    header_got: usize,
    parsed: Option<Header>,
    payload: Vec<u8>,
    payload_got: usize,
    fds: Vec<OwnedFd>,
}

impl Reader {
    /// A reader at a frame boundary.
    pub fn new() -> Self {
        Self::default()
    }

    /// True if no byte of a frame has arrived yet.
    pub fn at_boundary(&self) -> bool {
        self.header_got == 0
    }

    /// The buffer the next receive should fill; never empty while a frame is incomplete.
    pub fn buf(&mut self) -> &mut [u8] {
        match self.parsed {
            None => &mut self.header[self.header_got..],
            Some(h) => {
                if self.payload_got == self.payload.len() {
                    let more = (h.len - self.payload.len()).min(CHUNK);
                    self.payload.resize(self.payload.len() + more, 0);
                }
                &mut self.payload[self.payload_got..]
            }
        }
    }

    /// Records a receive of `n` bytes (into [`Reader::buf`]) and its descriptors. Returns the
    /// frame once whole, `Ok(None)` if more is needed. A receive of 0 bytes is the peer's
    /// close: the caller handles it with [`Reader::closed`].
    pub fn advance(&mut self, n: usize, fds: Vec<OwnedFd>) -> Result<Option<Frame>, FrameError> {
        self.fds.extend(fds);
        if self.fds.len() > MAX_FDS {
            let count = self.fds.len();
            self.reset();
            return Err(FrameError::TooManyFds {
                count,
                max: MAX_FDS,
            });
        }
        match self.parsed {
            None => {
                self.header_got += n;
                if self.header_got < HEADER_BYTES {
                    return Ok(None);
                }
                match Header::parse(&self.header) {
                    Ok(h) => self.parsed = Some(h),
                    Err(e) => {
                        self.reset();
                        return Err(e);
                    }
                }
            }
            Some(_) => self.payload_got += n,
        }
        let Some(h) = self.parsed else {
            return Ok(None);
        };
        if self.payload_got < h.len {
            return Ok(None);
        }
        let mut payload = std::mem::take(&mut self.payload);
        payload.truncate(h.len);
        let fds = std::mem::take(&mut self.fds);
        self.reset();
        if fds.len() != h.fds {
            // Dropping `fds` closes every descriptor of the bad frame.
            return Err(FrameError::FdMismatch {
                announced: h.fds,
                received: fds.len(),
            });
        }
        Ok(Some(Frame { payload, fds }))
    }

    /// The peer closed its end: `Ok(None)` at a frame boundary, an error inside a frame.
    pub fn closed(&mut self) -> Result<Option<Frame>, FrameError> {
        if self.at_boundary() && self.fds.is_empty() {
            return Ok(None);
        }
        let (got, want) = match self.parsed {
            None => (self.header_got, HEADER_BYTES),
            Some(h) => (HEADER_BYTES + self.payload_got, HEADER_BYTES + h.len),
        };
        self.reset();
        Err(FrameError::ClosedMidFrame { got, want })
    }

    fn reset(&mut self) {
        *self = Reader::default();
    }
}

/// Reads one frame from a blocking socket. `Ok(None)` is a clean close between frames.
pub fn read_frame(sock: BorrowedFd<'_>) -> Result<Option<Frame>, FrameError> {
    let mut reader = Reader::new();
    loop {
        let got = fdpass::recv(sock, reader.buf(), false).map_err(FrameError::Io)?;
        if got.truncated {
            return Err(FrameError::Truncated);
        }
        if got.bytes == 0 {
            // Descriptors with no bytes cannot happen on a stream socket; drop any.
            return reader.closed();
        }
        if let Some(frame) = reader.advance(got.bytes, got.fds)? {
            return Ok(Some(frame));
        }
    }
}

/// A frame being sent: header and payload in one buffer, and how much went out.
#[derive(Debug)]
pub(crate) struct Outgoing {
    bytes: Vec<u8>,
    sent: usize,
    fds: usize,
}

impl Outgoing {
    /// Frames `payload` with `fds` descriptors announced.
    pub(crate) fn new(payload: &[u8], fds: usize) -> Result<Self, FrameError> {
        if fds > MAX_FDS {
            return Err(FrameError::TooManyFds {
                count: fds,
                max: MAX_FDS,
            });
        }
        let header = Header {
            len: payload.len(),
            fds,
        }
        .encode()
        .ok_or(FrameError::TooLarge {
            len: payload.len(),
            max: MAX_FRAME,
        })?;
        let mut bytes = Vec::with_capacity(HEADER_BYTES + payload.len());
        bytes.extend_from_slice(&header);
        bytes.extend_from_slice(payload);
        Ok(Outgoing {
            bytes,
            sent: 0,
            fds,
        })
    }

    /// True once every byte went out.
    pub(crate) fn done(&self) -> bool {
        self.sent == self.bytes.len()
    }

    /// Sends what remains once; `fds` go with the first bytes only and must be as many
    /// as announced.
    pub(crate) fn send_once(
        &mut self,
        sock: BorrowedFd<'_>,
        fds: &[BorrowedFd<'_>],
        nonblocking: bool,
    ) -> io::Result<()> {
        debug_assert_eq!(fds.len(), self.fds);
        let attach = if self.sent == 0 { fds } else { &[] };
        let n = fdpass::send(sock, &[&self.bytes[self.sent..]], attach, nonblocking)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "socket accepted no bytes",
            ));
        }
        self.sent += n;
        Ok(())
    }
}

/// Writes one frame to a blocking socket, with `fds` attached.
pub fn write_frame(
    sock: BorrowedFd<'_>,
    payload: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<(), FrameError> {
    let mut out = Outgoing::new(payload, fds.len())?;
    while !out.done() {
        out.send_once(sock, fds, false).map_err(FrameError::Io)?;
    }
    Ok(())
}
