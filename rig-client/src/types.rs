//! Small value types of the Rig API: memory kinds, queues, and how a launch uses a buffer.
//!
//! This module owns names only; what a device does with them lives in [`crate::device`].

use std::fmt;

/// A kind of memory a buffer lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Memory {
    /// GPU memory the host does not address; the host reaches it through copies.
    Device,
    /// Host memory the GPU addresses, read and written by the host as fast as other memory.
    Pinned,
    /// GPU memory the host addresses through the memory BAR: fast to write, slow to read.
    /// A device without it gives Pinned memory instead.
    Mapped,
}

impl Memory {
    pub(crate) fn to_proto(self) -> rig_proto::MemoryKind {
        match self {
            Memory::Device => rig_proto::MemoryKind::Device,
            Memory::Pinned => rig_proto::MemoryKind::Pinned,
            Memory::Mapped => rig_proto::MemoryKind::Mapped,
        }
    }
}

/// A queue of an AMD device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Queue {
    /// `COMPUTE:0`: PM4 (or AQL) packets and launches.
    Compute,
    /// `COPY:0`: SDMA packets, copies and fills.
    Copy,
}

impl Queue {
    /// The queue's name, as the device's facts list it.
    pub fn name(self) -> &'static str {
        match self {
            Queue::Compute => "COMPUTE:0",
            Queue::Copy => "COPY:0",
        }
    }

    /// The queue of name `name`, such as `"COPY:0"`.
    pub fn by_name(name: &str) -> Option<Queue> {
        match name {
            "COMPUTE:0" => Some(Queue::Compute),
            "COPY:0" => Some(Queue::Copy),
            _ => None,
        }
    }
}

impl fmt::Display for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a part uses a buffer, which decides what later host accesses wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// The work only reads it: a host read of the buffer need not wait for it.
    Read,
    /// The work may write it.
    Write,
}

/// A rectangle of bytes: `rows` rows of `width` bytes, each `pitch` bytes after the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CopyBox {
    /// Bytes of each row.
    pub width: u64,
    /// Rows.
    pub rows: u64,
    /// Bytes from one source row's start to the next.
    pub src_pitch: u64,
    /// Bytes from one destination row's start to the next.
    pub dst_pitch: u64,
}
