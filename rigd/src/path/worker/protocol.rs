//! The worker's protocol: rigd's calls and the worker's messages, one bincode frame each on
//! the worker's `SOCK_SEQPACKET` socket, descriptors passed beside them.

use std::os::fd::OwnedFd;

use rig_proto::messages::{MemoryKind, QueueKind};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::WorkerError;
use crate::path::{Cause, MapRefusal, Refusal, Why};

/// The most bytes of one frame on a worker's socket.
pub const MAX_FRAME: usize = 64 * 1024;

/// Bytes of an upload's piece: one frame carries one with its header.
pub(super) const UPLOAD_PIECE: usize = 48 * 1024;

/// A message's frame: rig-proto's payload encoding (bincode, its one configuration), at
/// most [`MAX_FRAME`] bytes, one `SOCK_SEQPACKET` message of the worker's socket.
pub(super) fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, WorkerError> {
    let bytes = rig_proto::frame::encode(v)
        .map_err(|e| WorkerError::Frame(format!("encoding a worker frame: {e}")))?;
    if bytes.len() > MAX_FRAME {
        return Err(WorkerError::Frame(format!(
            "a worker frame of {} bytes exceeds the limit of {MAX_FRAME}",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// The message of a frame, every byte of it ([`rig_proto::frame::decode`]).
pub(super) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WorkerError> {
    rig_proto::frame::decode(bytes)
        .map_err(|e| WorkerError::Frame(format!("a worker frame that does not decode: {e}")))
}

/// One call of rigd on a worker, for its device `device`.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Call {
    pub(super) id: u64,
    pub(super) device: u64,
    pub(super) request: Request,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Request {
    /// The GPU's clock rate (the worker opens it).
    Describe {
        gpu_id: u32,
    },
    /// A new device on the GPU.
    Open {
        gpu_id: u32,
    },
    /// The device ends: its path is dropped.
    Close,
    Alloc {
        kind: MemoryKind,
        bytes: u64,
    },
    /// With the client's memfd.
    MapHost {
        offset: u64,
        bytes: u64,
    },
    /// With the peer's Pinned memfd.
    MapPeer {
        offset: u64,
        bytes: u64,
    },
    Free {
        token: u64,
    },
    Upload {
        token: u64,
        offset: u64,
        data: Vec<u8>,
    },
    /// With the client's doorbell page.
    Queue {
        kind: QueueKind,
        ring: u64,
        bytes: u64,
        read: u64,
        write: u64,
        doorbell: u64,
        scratch: (u64, u64),
    },
    Retire {
        queue: u64,
    },
    /// The device's word, in memory the worker gave (`Path::wake_on_interrupt`).
    Word {
        token: u64,
        offset: u64,
    },
    HandScratch {
        address: u64,
        bytes: u64,
    },
    Clock,
    Stop {
        fault: Option<rig_proto::Fault>,
    },
    Busy,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Answer {
    Described {
        clock_hz: u64,
    },
    /// A device is open; its releases carry `interrupt`.
    Opened {
        interrupt: u32,
    },
    Done,
    /// With the host memfd (Pinned) or dma-buf (Mapped) where `host` is set.
    Memory {
        address: u64,
        bytes: u64,
        kind: Option<MemoryKind>,
        token: u64,
        host: bool,
    },
    Queue(u64),
    Clock(rig_proto::ClockSample),
    Stopped(bool),
    /// Nanoseconds since the device's queues have been busy.
    Busy(Option<u64>),
    Refused(Wire),
    Failed(Why),
}

#[derive(Debug, Serialize, Deserialize)]
/// A refusal as it crosses the worker's socket: [`Refusal`]'s and [`MapRefusal`]'s kinds,
/// each with what the path said and its cause.
pub(super) enum Wire {
    Lacking(Why),
    Full(Why),
    Refused(Why),
    NoRoom(Why),
    Never(Why),
    Unfit(Why),
}

impl From<Refusal> for Wire {
    fn from(r: Refusal) -> Wire {
        match r {
            Refusal::Lacking(s) => Wire::Lacking(s),
            Refusal::Full(s) => Wire::Full(s),
            Refusal::Refused(s) => Wire::Refused(s),
        }
    }
}

impl From<MapRefusal> for Wire {
    fn from(r: MapRefusal) -> Wire {
        match r {
            MapRefusal::NoRoom(s) => Wire::NoRoom(s),
            MapRefusal::Never(s) => Wire::Never(s),
            MapRefusal::Unfit(s) => Wire::Unfit(s),
        }
    }
}

impl Wire {
    pub(super) fn refusal(self) -> Refusal {
        match self {
            Wire::Lacking(s) | Wire::NoRoom(s) => Refusal::Lacking(s),
            Wire::Full(s) => Refusal::Full(s),
            Wire::Refused(s) | Wire::Never(s) | Wire::Unfit(s) => Refusal::Refused(s),
        }
    }

    pub(super) fn map_refusal(self) -> MapRefusal {
        match self {
            Wire::Lacking(s) | Wire::NoRoom(s) => MapRefusal::NoRoom(s),
            Wire::Unfit(s) => MapRefusal::Unfit(s),
            Wire::Full(s) | Wire::Refused(s) | Wire::Never(s) => MapRefusal::Never(s),
        }
    }
}

/// What a worker sends rigd.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Message {
    Reply {
        id: u64,
        answer: Answer,
    },
    Interrupt {
        device: u64,
    },
    Fault {
        device: u64,
        fault: rig_proto::Fault,
    },
}

/// The first frame rigd sends a worker of the emulated KFD, with O_PATH descriptors of the
/// emulation's socket and topology tree: the worker's user may not reach their directory.
pub(super) const KERNEL_FRAME: &[u8] = b"rig-worker: emulated kfd";

/// An answer and the descriptors that came with it.
pub(super) type Reply = (Answer, Vec<OwnedFd>);

/// What an answer that is not the one asked for says.
pub(super) fn unexpected(a: Answer) -> Why {
    match a {
        Answer::Failed(why) => why,
        Answer::Refused(w) => w.refusal().why().clone(),
        a => Why::caused(
            format!("the worker answered {a:?} out of turn"),
            Cause::Worker,
        ),
    }
}
