//! The daemon side of a connection, over tokio, for rigd.
//!
//! It owns one accepted [`UnixStream`]: the handshake, reading requests (with their
//! descriptors) and writing answers. It does not decide anything: who may connect, what a
//! request does and which answer it gets are rigd's.
//!
//! Descriptors pass because every receive and send is a `recvmsg`/`sendmsg` on the raw
//! socket inside tokio's readiness (`try_io`), not a plain read or write.
//!
//! A frame that started must finish within the connection's frame bound
//! ([`ServerConnection::set_frame_timeout`]), so a peer that sends half a frame cannot hold
//! its connection mid-frame for ever.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::UnixStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::fdpass;
use crate::frame::{self, Frame, FrameError, Outgoing, Reader};
use crate::messages::{ErrorCode, ErrorReply, Hello, HelloReply, Request, Response, Welcome};
use crate::{Error, MAGIC, MOST_HELLO, MOST_PROGRAM, VERSION, cut};

/// What large frames of one peer (rigd: one user) may cost: bytes in memory at once
/// (arriving, decoded, and answered) and bytes a second.
///
/// A frame longer than [`frame::AHEAD`] is received into a buffer of its own only once its
/// length is reserved from its peer's pool, and the reservation lasts until the connection
/// reads its next frame (its request was answered by then). Before that, the peer's pace
/// is kept: its large frames' bytes are admitted at most at its rate, after a burst of one
/// pool. A connection that must wait for either waits without reading, so the kernel holds
/// the peer's bytes, not rigd, and rigd spends no time on them; the wait counts towards the
/// frame's bound. Clones share one pool and one pace.
#[derive(Debug, Clone)]
pub struct FrameBudget {
    pool: Arc<Semaphore>,
    pace: Arc<Pace>,
}

/// A peer's rate of large-frame bytes: when its admitted bytes are paid for.
#[derive(Debug)]
struct Pace {
    bytes_per_second: f64,
    /// How far ahead of its rate a peer may be: one pool's bytes.
    burst: Duration,
    /// When the bytes admitted so far are paid for at the rate.
    paid_at: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Pace {
    /// Waits until `bytes` more keep the peer within its rate and burst.
    async fn admit(&self, bytes: usize) {
        let now = tokio::time::Instant::now();
        let due = {
            let mut paid_at = self.paid_at.lock().unwrap_or_else(|e| e.into_inner());
            let from = paid_at.map_or(now, |p| p.max(now));
            let until = from + Duration::from_secs_f64(bytes as f64 / self.bytes_per_second);
            *paid_at = Some(until);
            until.checked_sub(self.burst)
        };
        if let Some(due) = due.filter(|d| *d > now) {
            tokio::time::sleep_until(due).await;
        }
    }
}

/// [`FrameBudget`] counts in units of this many bytes.
const BUDGET_UNIT: usize = 1024;

impl FrameBudget {
    /// A pool of `bytes` (at least [`frame::MAX_FRAME`], so that any frame can be had)
    /// admitted at `bytes_per_second` (at least one byte a second).
    pub fn new(bytes: usize, bytes_per_second: u64) -> Self {
        let bytes = bytes.max(frame::MAX_FRAME);
        let rate = bytes_per_second.max(1) as f64;
        FrameBudget {
            pool: Arc::new(Semaphore::new(
                bytes.div_ceil(BUDGET_UNIT).min(Semaphore::MAX_PERMITS),
            )),
            pace: Arc::new(Pace {
                bytes_per_second: rate,
                burst: Duration::from_secs_f64(bytes as f64 / rate),
                paid_at: std::sync::Mutex::new(None),
            }),
        }
    }

    /// Whether another clone of this budget exists.
    pub fn shared(&self) -> bool {
        Arc::strong_count(&self.pool) > 1
    }

    async fn reserve(&self, bytes: usize) -> OwnedSemaphorePermit {
        // The pace first: a peer waiting for it holds none of its pool.
        self.pace.admit(bytes).await;
        let units = u32::try_from(bytes.div_ceil(BUDGET_UNIT)).unwrap_or(u32::MAX);
        // PANIC: nothing closes the pool.
        self.pool
            .clone()
            .acquire_many_owned(units)
            .await
            .expect("a frame budget's pool is never closed")
    }
}

/// One client's connection, as rigd holds it.
#[derive(Debug)]
pub struct ServerConnection {
    stream: UnixStream,
    reader: Reader,
    /// How long a frame may take from the moment its first byte was seen.
    frame_timeout: Option<Duration>,
    /// When the current, incomplete frame was first seen (`None` at a frame boundary).
    started: Option<tokio::time::Instant>,
    /// Where large frames reserve their bytes, if anywhere.
    budget: Option<FrameBudget>,
    /// The reservation of the large frame arriving now.
    arriving: Option<OwnedSemaphorePermit>,
    /// The reservation of the last frame read, held while its request is answered.
    answering: Option<OwnedSemaphorePermit>,
}

impl ServerConnection {
    /// Wraps an accepted stream. Frames may take any time until
    /// [`set_frame_timeout`](Self::set_frame_timeout).
    pub fn new(stream: UnixStream) -> Self {
        ServerConnection {
            stream,
            reader: Reader::new(),
            frame_timeout: None,
            started: None,
            budget: None,
            arriving: None,
            answering: None,
        }
    }

    /// Makes every frame longer than [`frame::AHEAD`] reserve its bytes from `budget`
    /// before it is received.
    pub fn set_budget(&mut self, budget: FrameBudget) {
        self.budget = Some(budget);
    }

    /// Bounds how long a frame may take from its first byte to its last: past it,
    /// [`read_frame`](Self::read_frame) fails with [`FrameError::Stalled`].
    pub fn set_frame_timeout(&mut self, timeout: Duration) {
        self.frame_timeout = Some(timeout);
    }

    /// True if no byte of a next frame has arrived.
    pub fn at_boundary(&self) -> bool {
        self.reader.at_boundary()
    }

    /// Refuses the client at once without waiting: sends [`HelloReply::Refused`] if the
    /// socket takes it whole now (an accepted socket's buffer is empty, so it does), and
    /// never reads the hello. The caller then drops the connection; a client that wrote
    /// its hello still reads the refusal.
    pub fn refuse_now(&self, error: ErrorReply) -> Result<(), Error> {
        let payload = frame::encode(&HelloReply::Refused {
            daemon: VERSION,
            error,
        })?;
        let mut out = Outgoing::new(&payload, 0)?;
        let fd = self.stream.as_fd();
        self.stream
            .try_io(Interest::WRITABLE, || out.send_once(fd, &[], true))
            .map_err(FrameError::Io)?;
        if !out.done() {
            return Err(FrameError::Io(io::Error::from(io::ErrorKind::WouldBlock)).into());
        }
        Ok(())
    }

    /// The stream, for its peer credentials (`peer_cred`).
    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    /// Reads one frame. `Ok(None)` is a clean close between frames. It receives ahead
    /// ([`Reader::spare`]), so a request's header and payload take one `recvmsg`, and bytes
    /// of later frames wait in the connection.
    ///
    /// Cancel-safe: progress is kept in the connection, so a `select!` that drops this
    /// future loses no bytes and no descriptors.
    pub async fn read_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let Self {
            stream,
            reader,
            frame_timeout,
            started,
            budget,
            arriving,
            answering,
        } = self;
        // The last frame's request was answered before the next read; a reservation whose
        // frame an error ended goes too, so no frame can arrive on another's reservation.
        *answering = None;
        if reader.big_len().is_none() {
            *arriving = None;
        }
        loop {
            match reader.take() {
                Ok(None) => {}
                taken => {
                    *started = None;
                    *answering = arriving.take();
                    return taken;
                }
            }
            if let (Some(budget), Some(len), None) = (&*budget, reader.big_len(), &*arriving) {
                let since = *started.get_or_insert_with(tokio::time::Instant::now);
                let reserved = match *frame_timeout {
                    Some(bound) => tokio::time::timeout_at(since + bound, budget.reserve(len))
                        .await
                        .map_err(|_| FrameError::Stalled {
                            ms: u64::try_from(bound.as_millis()).unwrap_or(u64::MAX),
                        })?,
                    None => budget.reserve(len).await,
                };
                *arriving = Some(reserved);
            }
            // Receive first and wait for readiness only when nothing is there: a client
            // that sends its next request right after an answer costs one `recvmsg`.
            let fd = stream.as_fd();
            let got = match stream.try_io(Interest::READABLE, || {
                fdpass::recv(fd, reader.spare(), true)
            }) {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match frame_timeout.filter(|_| !reader.at_boundary()) {
                        Some(bound) => {
                            let since = *started.get_or_insert_with(tokio::time::Instant::now);
                            tokio::time::timeout_at(since + bound, stream.readable())
                                .await
                                .map_err(|_| FrameError::Stalled {
                                    ms: u64::try_from(bound.as_millis()).unwrap_or(u64::MAX),
                                })?
                                .map_err(FrameError::Io)?;
                        }
                        None => stream.readable().await.map_err(FrameError::Io)?,
                    }
                    continue;
                }
                Err(e) => return Err(FrameError::Io(e)),
            };
            if got.truncated {
                *reader = Reader::new();
                return Err(FrameError::Truncated);
            }
            if got.bytes == 0 {
                return reader.closed();
            }
            reader.record(got.bytes, got.fds)?;
        }
    }

    /// Writes one frame with `fds` attached, header and payload in one `sendmsg` when the
    /// socket has room. Not cancel-safe: a dropped write leaves the stream out of step, so
    /// drop the connection with it.
    pub async fn write_frame(
        &mut self,
        payload: &[u8],
        fds: &[BorrowedFd<'_>],
    ) -> Result<(), FrameError> {
        let mut out = Outgoing::new(payload, fds.len())?;
        while !out.done() {
            let fd = self.stream.as_fd();
            match self
                .stream
                .try_io(Interest::WRITABLE, || out.send_once(fd, fds, true))
            {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.stream.writable().await.map_err(FrameError::Io)?;
                }
                Err(e) => return Err(FrameError::Io(e)),
            }
        }
        Ok(())
    }

    /// Reads the client's [`Hello`] and checks it. A payload past [`MOST_HELLO`], a bad
    /// magic, another version or a program name past [`MOST_PROGRAM`] is answered with
    /// [`HelloReply::Refused`] here and returned as an error; a good hello is
    /// returned for the caller to [`welcome`](Self::welcome) or [`refuse`](Self::refuse).
    /// `Ok(None)` if the peer closed before saying anything.
    pub async fn read_hello(&mut self) -> Result<Option<Hello>, Error> {
        // A hello is small: a longer one is refused from its header, unread.
        self.reader.set_most(Some(MOST_HELLO));
        let frame = self.read_frame().await;
        self.reader.set_most(None);
        let frame = match frame {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(None),
            Err(e @ FrameError::TooLarge { len, .. }) => {
                let why = format!(
                    "a hello of {len} bytes is more than the {MOST_HELLO} bytes rig_proto::MOST_HELLO allows \
                     (its program name may be at most {MOST_PROGRAM} bytes, rig_proto::MOST_PROGRAM); \
                     send a shorter program name (rig-client cuts its own)"
                );
                self.refuse(ErrorReply::new(ErrorCode::BadRequest, why))
                    .await?;
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        if !frame.fds.is_empty() {
            let e = FrameError::FdMismatch {
                announced: 0,
                received: frame.fds.len(),
            };
            self.refuse(ErrorReply::new(ErrorCode::BadRequest, e.to_string()))
                .await?;
            return Err(e.into());
        }
        let hello: Hello = match frame::decode(&frame.payload) {
            Ok(h) => h,
            Err(e) => {
                let why = "the first frame was not a rig hello; is this a rig client?";
                self.refuse(ErrorReply::new(ErrorCode::BadRequest, why))
                    .await?;
                return Err(e.into());
            }
        };
        if hello.magic != MAGIC {
            let why = "bad magic in hello; the peer is not a rig client";
            self.refuse(ErrorReply::new(ErrorCode::BadRequest, why))
                .await?;
            return Err(Error::NotRig);
        }
        if hello.version != VERSION {
            let why = format!(
                "rigd speaks protocol version {VERSION} and {} speaks {}; use a rig-client built \
                 from the same release as rigd",
                cut(&hello.program, MOST_PROGRAM),
                hello.version
            );
            self.refuse(ErrorReply::new(ErrorCode::VersionMismatch, why))
                .await?;
            return Err(Error::VersionMismatch {
                daemon: VERSION,
                client: hello.version,
            });
        }
        if let Err(e) = hello.check_bounds() {
            self.refuse(e.clone().into()).await?;
            return Err(FrameError::TooLong(e).into());
        }
        Ok(Some(hello))
    }

    /// Accepts the client: sends [`HelloReply::Welcome`].
    pub async fn welcome(&mut self, daemon: &str, pid: u32) -> Result<(), Error> {
        let welcome = Welcome {
            version: VERSION,
            daemon: daemon.to_owned(),
            pid,
        };
        let payload = frame::encode(&HelloReply::Welcome(welcome))?;
        Ok(self.write_frame(&payload, &[]).await?)
    }

    /// Refuses the client: sends [`HelloReply::Refused`]. The caller then drops the
    /// connection.
    pub async fn refuse(&mut self, error: ErrorReply) -> Result<(), Error> {
        let payload = frame::encode(&HelloReply::Refused {
            daemon: VERSION,
            error,
        })?;
        Ok(self.write_frame(&payload, &[]).await?)
    }

    /// [`read_hello`](Self::read_hello) then [`welcome`](Self::welcome).
    pub async fn handshake(&mut self, daemon: &str, pid: u32) -> Result<Option<Hello>, Error> {
        let Some(hello) = self.read_hello().await? else {
            return Ok(None);
        };
        self.welcome(daemon, pid).await?;
        Ok(Some(hello))
    }

    /// Reads the next request and its descriptors, exactly [`Request::fds_needed`] of them.
    /// `Ok(None)` is a clean close.
    ///
    /// On an error that is not [`fatal`](FrameError::is_fatal) (a payload that is not a
    /// request, descriptors the request does not take) the stream is still in step:
    /// answer it with [`reply_for`] and read on. After a fatal one, drop the connection.
    /// Cancel-safe, as [`read_frame`](Self::read_frame).
    pub async fn read_request(&mut self) -> Result<Option<(Request, Vec<OwnedFd>)>, FrameError> {
        let Some(frame) = self.read_frame().await? else {
            return Ok(None);
        };
        let Frame { payload, fds } = frame;
        let request: Request = if payload.len() > frame::AHEAD {
            // A large payload's decode is a copy of it: off the async workers, so that the
            // other connections they serve do not wait behind it.
            tokio::task::spawn_blocking(move || frame::decode(&payload))
                .await
                .map_err(|e| FrameError::Io(io::Error::other(e)))??
        } else {
            frame::decode(&payload)?
        };
        let frame = Frame {
            payload: Vec::new(),
            fds,
        };
        // Before anything of it is kept; the frame's descriptors close as it drops.
        request.check_bounds()?;
        let needed = request.fds_needed();
        if frame.fds.len() != needed {
            // The frame's descriptors close as `frame` drops.
            return Err(FrameError::FdMismatch {
                announced: needed,
                received: frame.fds.len(),
            });
        }
        Ok(Some((request, frame.fds)))
    }

    /// Sends an answer with the descriptors its shares name, exactly
    /// [`Response::fds_needed`] of them.
    pub async fn send(
        &mut self,
        response: &Response,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(), FrameError> {
        let needed = response.fds_needed();
        if fds.len() != needed {
            return Err(FrameError::FdMismatch {
                announced: needed,
                received: fds.len(),
            });
        }
        let payload = frame::encode(response)?;
        self.write_frame(&payload, fds).await
    }
}

/// The answer to a request that failed to arrive whole or well-formed.
pub fn reply_for(error: &FrameError) -> Response {
    Response::Error(ErrorReply::new(ErrorCode::BadRequest, error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use tokio::time::Instant;

    fn pair(timeout: Duration) -> (ServerConnection, std::os::unix::net::UnixStream) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let mut c = ServerConnection::new(UnixStream::from_std(a).unwrap());
        c.set_frame_timeout(timeout);
        (c, b)
    }

    /// On paused time: the runtime's clock jumps to the next timer whenever nothing else can
    /// run, so the bounds are waited out at once and in order, however loaded the machine.
    #[tokio::test(start_paused = true)]
    async fn a_frame_that_started_must_finish_within_the_bound() {
        let bound = Duration::from_millis(150);
        let (mut c, mut peer) = pair(bound);
        // Silence between frames is not bounded here.
        let quiet = tokio::time::timeout(Duration::from_millis(400), c.read_frame()).await;
        assert!(quiet.is_err() && c.at_boundary());
        // A frame in two parts within the bound arrives.
        let payload = frame::encode(&Request::ListGpus).unwrap();
        let header = frame::Header {
            len: payload.len(),
            fds: 0,
        }
        .encode()
        .unwrap();
        peer.write_all(&header[..5]).unwrap();
        let writer = tokio::spawn(async move {
            tokio::time::sleep(bound / 3).await;
            peer.write_all(&header[5..]).unwrap();
            peer.write_all(&payload).unwrap();
            peer
        });
        assert!(c.read_frame().await.unwrap().is_some());
        let mut peer = writer.await.unwrap();
        // Half a frame is cut off once the bound passed since its first byte.
        peer.write_all(&[64, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3]).unwrap();
        let t = Instant::now();
        let r = c.read_frame().await;
        assert!(matches!(r, Err(FrameError::Stalled { ms: 150 })), "{r:?}");
        assert!(r.unwrap_err().is_fatal());
        assert!(t.elapsed() >= bound, "{:?}", t.elapsed());
    }
}
