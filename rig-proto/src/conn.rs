//! The blocking client side of a connection, for `rig-client` and `rigctl`.
//!
//! It owns a [`UnixStream`] after a successful handshake and turns one [`Request`] into one
//! [`Response`] at a time. What the answers mean is the caller's business.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::frame::{self, FrameError, Reader};
use crate::messages::{ErrorCode, ErrorReply, Hello, HelloReply, Request, Response, Welcome};
use crate::{Error, MAGIC, VERSION};

/// A client's connection to rigd.
#[derive(Debug)]
pub struct Connection {
    stream: UnixStream,
    welcome: Welcome,
    /// Receives ahead: an answer's header and payload come with one `recvmsg`.
    reader: Reader,
    /// Answers of posted requests not read yet (see [`Connection::post`]).
    posted: usize,
    /// Errors rigd answered to posted requests, oldest first, at most [`MOST_POSTED_ERRORS`].
    posted_errors: Vec<ErrorReply>,
}

/// The most posted requests whose answers are left unread; the next post reads them first,
/// so neither side's socket buffer can fill while the other waits to write.
pub const MOST_POSTED: usize = 64;

/// The most errors of posted requests kept for [`Connection::take_posted_errors`].
pub const MOST_POSTED_ERRORS: usize = 64;

impl Connection {
    /// Connects to the socket at `path` and says hello as `program` (cut as
    /// [`Connection::handshake`] says).
    pub fn connect(path: impl AsRef<Path>, program: &str) -> Result<Connection, Error> {
        let path = path.as_ref();
        let stream = UnixStream::connect(path).map_err(|source| Error::Connect {
            path: path.to_owned(),
            source,
        })?;
        Connection::handshake(stream, program)
    }

    /// Says hello on a stream already connected to rigd (a socketpair in tests). A program
    /// name past [`crate::MOST_PROGRAM`] bytes is cut at a character boundary, which rigd
    /// would refuse whole.
    pub fn handshake(stream: UnixStream, program: &str) -> Result<Connection, Error> {
        let hello = Hello {
            magic: MAGIC,
            version: VERSION,
            program: crate::cut(program, crate::MOST_PROGRAM).to_owned(),
        };
        match frame::write_frame(stream.as_fd(), &frame::encode(&hello)?, &[]) {
            Ok(()) => {}
            // rigd refuses some peers at accept, before their hello, and closes at once: its
            // refusal may be waiting to be read even though the hello could not go.
            Err(FrameError::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                ) => {}
            Err(e) => return Err(e.into()),
        }
        let mut reader = Reader::new();
        let Some(reply) = reader.read_blocking(stream.as_fd(), true)? else {
            return Err(Error::Closed);
        };
        if !reply.fds.is_empty() {
            return Err(FrameError::FdMismatch {
                announced: 0,
                received: reply.fds.len(),
            }
            .into());
        }
        match frame::decode::<HelloReply>(&reply.payload)? {
            HelloReply::Welcome(welcome) if welcome.version == VERSION => Ok(Connection {
                stream,
                welcome,
                reader,
                posted: 0,
                posted_errors: Vec::new(),
            }),
            HelloReply::Welcome(welcome) => Err(Error::VersionMismatch {
                daemon: welcome.version,
                client: VERSION,
            }),
            HelloReply::Refused { daemon, error } if error.code == ErrorCode::VersionMismatch => {
                Err(Error::VersionMismatch {
                    daemon,
                    client: VERSION,
                })
            }
            HelloReply::Refused { error, .. } => Err(Error::Refused(error)),
        }
    }

    /// What the daemon said of itself.
    pub fn daemon(&self) -> &Welcome {
        &self.welcome
    }

    /// Bounds how long [`Connection::call`] waits for an answer (`None`: for ever). A call
    /// that times out leaves the connection out of step; drop it.
    pub fn set_timeout(&self, timeout: Option<Duration>) -> Result<(), Error> {
        self.stream
            .set_read_timeout(timeout)
            .map_err(|e| Error::Frame(FrameError::Io(e)))?;
        self.stream
            .set_write_timeout(timeout)
            .map_err(|e| Error::Frame(FrameError::Io(e)))
    }

    /// Sends `request` with `fds` attached and waits for its answer and the descriptors
    /// that came with it. `fds` must be exactly as many as [`Request::fds_needed`]; the
    /// answer's descriptors are checked against [`Response::fds_needed`].
    ///
    /// A [`Response::Error`] is returned as `Ok`: it is an answer, and the connection
    /// stays usable. `Err` means the connection is broken or the daemon is not speaking
    /// the protocol, and the connection should be dropped.
    pub fn call(
        &mut self,
        request: &Request,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(Response, Vec<OwnedFd>), Error> {
        let needed = request.fds_needed();
        if fds.len() != needed {
            return Err(Error::FdCount {
                needed,
                got: fds.len(),
            });
        }
        // Send first, then read the posted requests' answers, which rigd sends before this
        // one's: the posted ones and this one cost a single wait for rigd.
        frame::write_frame(self.stream.as_fd(), &frame::encode(request)?, fds)?;
        self.read_posted()?;
        self.answer()
    }

    /// Sends `request`, which takes no descriptors, without waiting for its answer: the
    /// next [`Connection::call`] (or the post after [`MOST_POSTED`] unread answers) reads it
    /// first. For requests whose answer the caller does not need, such as `Free`: it costs
    /// one `sendmsg` instead of a round trip. Errors rigd answers to posted requests are
    /// kept for [`Connection::take_posted_errors`].
    pub fn post(&mut self, request: &Request) -> Result<(), Error> {
        let needed = request.fds_needed();
        if needed != 0 {
            return Err(Error::FdCount { needed, got: 0 });
        }
        if self.posted >= MOST_POSTED {
            self.read_posted()?;
        }
        frame::write_frame(self.stream.as_fd(), &frame::encode(request)?, &[])?;
        self.posted += 1;
        Ok(())
    }

    /// The errors rigd answered to posted requests since the last take, oldest first.
    pub fn take_posted_errors(&mut self) -> Vec<ErrorReply> {
        std::mem::take(&mut self.posted_errors)
    }

    /// Reads the answers of every posted request.
    fn read_posted(&mut self) -> Result<(), Error> {
        while self.posted > 0 {
            let (response, _fds) = self.answer()?;
            self.posted -= 1;
            if let Response::Error(e) = response {
                if self.posted_errors.len() < MOST_POSTED_ERRORS {
                    self.posted_errors.push(e);
                }
            }
        }
        Ok(())
    }

    /// Reads one answer and checks the descriptors that came with it.
    fn answer(&mut self) -> Result<(Response, Vec<OwnedFd>), Error> {
        let Some(reply) = self.reader.read_blocking(self.stream.as_fd(), true)? else {
            return Err(Error::Closed);
        };
        let response: Response = frame::decode(&reply.payload)?;
        let needed = response.fds_needed();
        if reply.fds.len() != needed {
            return Err(Error::FdCount {
                needed,
                got: reply.fds.len(),
            });
        }
        Ok((response, reply.fds))
    }
}
