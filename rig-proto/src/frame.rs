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
//! The descriptors ride as one `SCM_RIGHTS` message on the frame's first bytes, and a frame
//! goes out with one `sendmsg` (header and payload as two iovecs). The header is checked
//! before anything is allocated for the payload, and a large payload's buffer grows with the
//! bytes that actually arrive, so a peer that announces 16 MiB and sends nothing costs
//! nothing.
//!
//! Connections receive ahead: one `recvmsg` into an [`AHEAD`]-byte buffer takes a header
//! and its payload together, and any bytes of later frames stay buffered for the next read
//! (see [`Reader`] for which frame the descriptors of such a receive belong to).
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
/// After any error but [`FrameError::Decode`], [`FrameError::Trailing`] and
/// [`FrameError::TooLong`] the byte stream is no longer in step, and the connection must be
/// closed (see [`FrameError::is_fatal`]).
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
    /// The message decoded but a string in it is longer than its bound; the stream is in
    /// step.
    #[error(transparent)]
    TooLong(#[from] crate::bounds::TooLong),
    /// The peer started a frame and did not finish it within the bound it is given.
    #[error("the peer sent part of a frame and not the rest within {ms} ms")]
    Stalled {
        /// The bound, in milliseconds.
        ms: u64,
    },
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
                | FrameError::TooLong(_)
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

/// Bytes a reader receives ahead of the current frame's header: a request or answer of up
/// to this size (header included) arrives with one receive, together with whatever of the
/// next frames came with it.
pub const AHEAD: usize = 8 << 10;

/// Frames being received, from bytes that receives gave, with descriptors gathered on the way.
///
/// Two ways to receive into it: [`Reader::buf`] never asks for a byte past the current
/// frame (so a reader made for one frame leaves the next one in the socket), and
/// [`Reader::spare`] asks for up to [`AHEAD`] bytes, which may hold the current frame and
/// the start (or all) of later ones; [`Reader::take`] gives each complete frame in turn.
/// A frame longer than [`AHEAD`] is received into its own buffer, grown with the bytes that
/// arrive, never past its own end.
///
/// Descriptors: a sender attaches a frame's descriptors to the first byte of the frame (one
/// `sendmsg` per frame). On a Unix stream socket a `recvmsg` returns the descriptors of at
/// most one `sendmsg`, and once it has them it reads no byte past that `sendmsg`'s bytes;
/// it may, though, start with bytes sent earlier without descriptors. So descriptors
/// belong to the frame that holds the *last* byte of the receive they came with, which is
/// the frame whose header announced them for any peer that sends as [`write_frame`] does.
/// A peer that sends otherwise gets [`FrameError::FdMismatch`] or
/// [`FrameError::TooManyFds`], and every descriptor it sent is closed.
///
/// Resumable: it holds its progress, so dropping a read future between receives loses
/// nothing.
#[derive(Debug, Default)]
pub struct Reader {
    /// Received bytes: the current frame from `head`, then later ones, up to `tail`. Empty
    /// until the first receive, then [`AHEAD`] bytes long.
    data: Vec<u8>,
    head: usize,
    tail: usize,
    /// Descriptors received, each with the `data` offset of the frame it belongs to.
    fds: Vec<(usize, OwnedFd)>,
    /// The current frame, when it is too large for `data`.
    big: Option<Big>,
    /// A bound of payloads below [`MAX_FRAME`] (a hello's), if set: [`Reader::set_most`].
    most: Option<usize>,
}

/// A frame larger than [`AHEAD`], received into its own buffer.
#[derive(Debug)]
struct Big {
    header: Header,
    /// Grows by [`CHUNK`] as bytes arrive; `got` of it are received.
    payload: Vec<u8>,
    got: usize,
    fds: Vec<OwnedFd>,
}

impl Big {
    fn buf(&mut self) -> &mut [u8] {
        if self.got == self.payload.len() {
            let more = (self.header.len - self.payload.len()).min(CHUNK);
            self.payload.resize(self.payload.len() + more, 0);
        }
        &mut self.payload[self.got..]
    }
}

/// The payload length a header's bytes announce, unchecked.
fn announced(header: &[u8]) -> usize {
    u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize
}

impl Reader {
    /// A reader at a frame boundary.
    pub fn new() -> Self {
        Self::default()
    }

    /// The announced payload length of a frame being received into its own buffer (one
    /// longer than [`AHEAD`]), once its header arrived.
    pub fn big_len(&self) -> Option<usize> {
        self.big.as_ref().map(|b| b.header.len)
    }

    /// True if no byte of a frame has arrived yet (none is buffered either).
    pub fn at_boundary(&self) -> bool {
        self.big.is_none() && self.head == self.tail
    }

    /// Moves the current frame to the start of `data`, allocating it on first use.
    fn compact(&mut self) {
        if self.data.is_empty() {
            self.data = vec![0; AHEAD];
        }
        if self.head > 0 {
            self.data.copy_within(self.head..self.tail, 0);
            for (at, _) in &mut self.fds {
                *at -= self.head;
            }
            self.tail -= self.head;
            self.head = 0;
        }
    }

    /// The buffer the next receive should fill to get the rest of the current frame and
    /// nothing past it. Never empty once [`Reader::take`] gave `None`.
    pub fn buf(&mut self) -> &mut [u8] {
        if self.big.is_some() {
            return self.big.as_mut().map_or(&mut [], Big::buf);
        }
        self.compact();
        let end = if self.tail < HEADER_BYTES {
            HEADER_BYTES
        } else {
            // `take` moved any frame longer than AHEAD to `big`.
            (HEADER_BYTES + announced(&self.data[..HEADER_BYTES])).min(AHEAD)
        };
        let end = end.max(self.tail);
        &mut self.data[self.tail..end]
    }

    /// The buffer the next receive should fill to get the rest of the current frame and
    /// any bytes after it, up to [`AHEAD`] in all. Never empty once [`Reader::take`] gave
    /// `None`.
    pub fn spare(&mut self) -> &mut [u8] {
        if self.big.is_some() {
            return self.big.as_mut().map_or(&mut [], Big::buf);
        }
        self.compact();
        &mut self.data[self.tail..]
    }

    /// Records a receive of `n` bytes (into [`Reader::buf`] or [`Reader::spare`]) and its
    /// descriptors, then gives the first complete frame ([`Reader::take`]). A receive of 0
    /// bytes is the peer's close: the caller handles it with [`Reader::closed`].
    pub fn advance(&mut self, n: usize, fds: Vec<OwnedFd>) -> Result<Option<Frame>, FrameError> {
        self.record(n, fds)?;
        self.take()
    }

    /// Records a receive, as [`Reader::advance`] does, without taking a frame.
    pub fn record(&mut self, n: usize, fds: Vec<OwnedFd>) -> Result<(), FrameError> {
        let count = if let Some(b) = &mut self.big {
            b.got += n;
            b.fds.extend(fds);
            b.fds.len()
        } else {
            self.tail += n;
            if fds.is_empty() || self.tail == self.head {
                // Descriptors with no byte cannot come on a stream socket; they close here.
                return Ok(());
            }
            let owner = self.frame_of_last_byte();
            self.fds.extend(fds.into_iter().map(|fd| (owner, fd)));
            self.fds.iter().filter(|(at, _)| *at == owner).count()
        };
        if count > MAX_FDS {
            self.reset();
            return Err(FrameError::TooManyFds {
                count,
                max: MAX_FDS,
            });
        }
        Ok(())
    }

    /// The `data` offset of the frame that holds the last byte received.
    fn frame_of_last_byte(&self) -> usize {
        let last = self.tail - 1;
        let mut at = self.head;
        while self.tail - at >= HEADER_BYTES {
            let end = at
                .saturating_add(HEADER_BYTES)
                .saturating_add(announced(&self.data[at..]));
            if last < end {
                break;
            }
            at = end;
        }
        at
    }

    /// The next complete frame, if the bytes received hold one. Frames come in order; call
    /// it until it gives `None` before receiving again.
    ///
    /// A bad header is an error here, before anything is allocated for its payload; so is a
    /// frame that came with other descriptors than its header announced (that one is
    /// consumed, and its descriptors closed, so the stream stays in step).
    pub fn take(&mut self) -> Result<Option<Frame>, FrameError> {
        if let Some(b) = &self.big {
            if b.got < b.header.len {
                return Ok(None);
            }
            let Some(Big {
                header,
                mut payload,
                fds,
                ..
            }) = self.big.take()
            else {
                return Ok(None);
            };
            payload.truncate(header.len);
            return whole(header, payload, fds);
        }
        let head = self.head;
        if self.tail - head < HEADER_BYTES {
            return Ok(None);
        }
        let mut bytes = [0u8; HEADER_BYTES];
        bytes.copy_from_slice(&self.data[head..head + HEADER_BYTES]);
        let header = match Header::parse(&bytes) {
            Ok(h) => match self.most {
                Some(max) if h.len > max => Err(FrameError::TooLarge { len: h.len, max }),
                _ => Ok(h),
            },
            Err(e) => Err(e),
        };
        let header = match header {
            Ok(h) => h,
            Err(e) => {
                self.reset();
                return Err(e);
            }
        };
        let start = head + HEADER_BYTES;
        if HEADER_BYTES + header.len > AHEAD {
            // Every byte from `head` is this frame's: it is longer than all of `data`.
            let mut payload = Vec::with_capacity(header.len.min(CHUNK));
            payload.extend_from_slice(&self.data[start..self.tail]);
            let got = payload.len();
            let fds = self.take_fds(head);
            self.head = 0;
            self.tail = 0;
            self.big = Some(Big {
                header,
                payload,
                got,
                fds,
            });
            return Ok(None);
        }
        let end = start + header.len;
        if self.tail < end {
            return Ok(None);
        }
        let payload = self.data[start..end].to_vec();
        let fds = self.take_fds(head);
        if end == self.tail {
            self.head = 0;
            self.tail = 0;
        } else {
            self.head = end;
        }
        whole(header, payload, fds)
    }

    /// The descriptors of the frame at `at`.
    fn take_fds(&mut self, at: usize) -> Vec<OwnedFd> {
        if self.fds.is_empty() {
            return Vec::new();
        }
        let (mine, rest) = std::mem::take(&mut self.fds)
            .into_iter()
            .partition::<Vec<_>, _>(|(owner, _)| *owner == at);
        self.fds = rest;
        mine.into_iter().map(|(_, fd)| fd).collect()
    }

    /// The peer closed its end: `Ok(None)` at a frame boundary, an error inside a frame.
    /// Call it after [`Reader::take`] gave `None`.
    pub fn closed(&mut self) -> Result<Option<Frame>, FrameError> {
        let (got, want) = if let Some(b) = &self.big {
            (HEADER_BYTES + b.got, HEADER_BYTES + b.header.len)
        } else {
            let got = self.tail - self.head;
            if got == 0 && self.fds.is_empty() {
                return Ok(None);
            }
            let want = if got < HEADER_BYTES {
                HEADER_BYTES
            } else {
                HEADER_BYTES + announced(&self.data[self.head..])
            };
            (got, want)
        };
        self.reset();
        Err(FrameError::ClosedMidFrame { got, want })
    }

    fn reset(&mut self) {
        *self = Reader {
            most: self.most,
            ..Reader::default()
        };
    }

    /// Bounds the payload of the frames taken from now on to `most` bytes (`None`:
    /// [`MAX_FRAME`]), checked from the header before anything is received for the payload:
    /// rigd bounds a hello so ([`crate::MOST_HELLO`]).
    pub fn set_most(&mut self, most: Option<usize>) {
        self.most = most;
    }

    /// Reads the next frame from a blocking socket: from bytes already received if they
    /// hold one, else receiving (into [`Reader::spare`] if `ahead`, else [`Reader::buf`]).
    /// `Ok(None)` is a clean close between frames.
    pub(crate) fn read_blocking(
        &mut self,
        sock: BorrowedFd<'_>,
        ahead: bool,
    ) -> Result<Option<Frame>, FrameError> {
        loop {
            if let Some(frame) = self.take()? {
                return Ok(Some(frame));
            }
            let buf = if ahead { self.spare() } else { self.buf() };
            let got = fdpass::recv(sock, buf, false).map_err(FrameError::Io)?;
            if got.truncated {
                self.reset();
                return Err(FrameError::Truncated);
            }
            if got.bytes == 0 {
                return self.closed();
            }
            self.record(got.bytes, got.fds)?;
        }
    }
}

/// A frame read whole, checked against the descriptors its header announced.
fn whole(header: Header, payload: Vec<u8>, fds: Vec<OwnedFd>) -> Result<Option<Frame>, FrameError> {
    if fds.len() != header.fds {
        // Dropping `fds` closes every descriptor of the bad frame.
        return Err(FrameError::FdMismatch {
            announced: header.fds,
            received: fds.len(),
        });
    }
    Ok(Some(Frame { payload, fds }))
}

/// Reads one frame from a blocking socket, and no byte past it. `Ok(None)` is a clean close
/// between frames.
///
/// It receives the header and the payload separately, so it is for one-off reads (a
/// handshake, a test); a connection keeps a [`Reader`] and receives ahead.
pub fn read_frame(sock: BorrowedFd<'_>) -> Result<Option<Frame>, FrameError> {
    Reader::new().read_blocking(sock, false)
}

/// A frame being sent: its header and the payload (not copied), and how much went out.
/// Both go in one `sendmsg` (two iovecs), descriptors attached.
#[derive(Debug)]
pub(crate) struct Outgoing<'a> {
    header: [u8; HEADER_BYTES],
    payload: &'a [u8],
    sent: usize,
    fds: usize,
}

impl<'a> Outgoing<'a> {
    /// Frames `payload` with `fds` descriptors announced.
    pub(crate) fn new(payload: &'a [u8], fds: usize) -> Result<Self, FrameError> {
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
        Ok(Outgoing {
            header,
            payload,
            sent: 0,
            fds,
        })
    }

    /// True once every byte went out.
    pub(crate) fn done(&self) -> bool {
        self.sent == HEADER_BYTES + self.payload.len()
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
        let n = if self.sent < HEADER_BYTES {
            let bufs = [&self.header[self.sent..], self.payload];
            fdpass::send(sock, &bufs, attach, nonblocking)?
        } else {
            let bufs = [&self.payload[self.sent - HEADER_BYTES..]];
            fdpass::send(sock, &bufs, attach, nonblocking)?
        };
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
