//! Why a device was lost, as a program reads it: [`Fault`] and its [`FaultKind`].
//!
//! This module owns the client's form of a loss. It keeps the protocol's fault inside (its
//! sentence, "memory fault at 0x0 (write) by the instruction at 0x1a2c on COMPUTE:0 (vmid
//! 1)", is rig-proto's, which `rigctl` prints too) and gives each fact through a method,
//! so facts rigd adds later are methods added here, not a break of a program's match.

use std::fmt;

use crate::types::Queue;

/// What ended a device's work: the kind of a [`Fault`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultKind {
    /// An access the device's page table refused: [`Fault::address`] and [`Fault::write`]
    /// say which, [`Fault::pc`] the instruction where a kernel made it (none where the
    /// command processor or the copy engine did).
    MemoryFault,
    /// Words at [`Fault::pc`] that are no instruction of the GPU.
    IllegalInstruction,
    /// An instruction at [`Fault::pc`] the GPU (or the simulator's interpreter) does not
    /// run.
    UnsupportedInstruction,
    /// The kernel's `s_trap` at [`Fault::pc`].
    Trap,
    /// A packet the queue cannot run (unknown, malformed, or ring positions out of range)
    /// at read position [`Fault::position`].
    BadPacket,
    /// The hang watchdog: the work made no progress for the device's hang bound
    /// ([`crate::Facts::hang_ms`]).
    Hang,
    /// The GPU was reset.
    Reset,
    /// The client stopped the device with a reason of its own (an abort with work in
    /// flight, a drop); [`Fault::detail`] is that reason.
    StoppedByClient,
    /// An administrator stopped the device (`rigctl stop`, `rigctl evict`, rigd shutting
    /// down).
    StoppedByAdministrator,
    /// rigd, its path or the simulator failed; [`Fault::detail`] says how.
    Internal,
    /// The device's work waited on the GPU for a point of another device that was lost
    /// before it reached it; [`Fault::detail`] names that device and its fault.
    Producer,
    /// rigd no longer answers, and the device's work is gone with it.
    Disconnected,
    /// A profiled value completed, but a clock stamp its work should have written reads as
    /// never written (docs/profiling.md); [`Fault::detail`] names the value and stamp.
    Unstamped,
}

/// Why a device was lost: the fault of its work, a hang, a reset or a stop, with the facts
/// the GPU gave ([`crate::Error::Lost`]). A fact the kind has none of is `None`.
///
/// Its `Display` reads as a sentence, such as "memory fault at 0x0 (write) by the
/// instruction at 0x1a2c on COMPUTE:0 (vmid 1): write to an unmapped page".
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fault(rig_proto::Fault);

impl Fault {
    /// The client's form of a fault rigd (or the client itself) gave.
    pub(crate) fn of(f: rig_proto::Fault) -> Fault {
        Fault(f)
    }

    /// What happened.
    pub fn kind(&self) -> FaultKind {
        use rig_proto::FaultKind as K;
        match self.0.kind {
            K::MemoryFault => FaultKind::MemoryFault,
            K::IllegalInstruction => FaultKind::IllegalInstruction,
            K::UnsupportedInstruction => FaultKind::UnsupportedInstruction,
            K::Trap => FaultKind::Trap,
            K::BadPacket => FaultKind::BadPacket,
            K::Hang => FaultKind::Hang,
            K::Reset => FaultKind::Reset,
            K::StoppedByClient => FaultKind::StoppedByClient,
            K::StoppedByAdministrator => FaultKind::StoppedByAdministrator,
            K::Internal => FaultKind::Internal,
            K::Producer => FaultKind::Producer,
            K::Disconnected => FaultKind::Disconnected,
            K::Unstamped => FaultKind::Unstamped,
        }
    }

    /// The device's queue whose work faulted, where one did (the sentence names a queue
    /// this client has no handle of, should rigd name one, and this is `None`).
    pub fn queue(&self) -> Option<Queue> {
        let q = self.0.queue?;
        if q.index != 0 {
            return None;
        }
        Some(match q.kind {
            rig_proto::QueueKind::Sdma => Queue::Copy,
            rig_proto::QueueKind::Pm4 | rig_proto::QueueKind::Aql => Queue::Compute,
        })
    }

    /// The VMID of the device's address space, where the GPU reported one.
    pub fn vmid(&self) -> Option<u32> {
        self.0.vmid
    }

    /// The GPU address the faulting access named (for a memory fault).
    pub fn address(&self) -> Option<u64> {
        self.0.address
    }

    /// Whether that access was a write (for a memory fault).
    pub fn write(&self) -> Option<bool> {
        self.0.write
    }

    /// The GPU address of the faulting instruction (for a kernel's fault).
    pub fn pc(&self) -> Option<u64> {
        self.0.pc
    }

    /// The queue's read position at the packet, in its packets' units (for a bad packet).
    pub fn position(&self) -> Option<u64> {
        self.0.position
    }

    /// What else the GPU, rigd or the client said; may be empty.
    pub fn detail(&self) -> &str {
        &self.0.detail
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_gives_rigds_facts_and_sentence() {
        let f = Fault::of(rig_proto::Fault {
            queue: Some(rig_proto::QueueRef {
                kind: rig_proto::QueueKind::Pm4,
                index: 0,
            }),
            vmid: Some(1),
            address: Some(0),
            write: Some(true),
            pc: Some(0x1a2c),
            ..rig_proto::Fault::new(rig_proto::FaultKind::MemoryFault, "")
        });
        assert_eq!(f.kind(), FaultKind::MemoryFault);
        assert_eq!(f.queue(), Some(Queue::Compute));
        assert_eq!(
            (f.address(), f.write(), f.pc()),
            (Some(0), Some(true), Some(0x1a2c))
        );
        assert_eq!(
            f.to_string(),
            "memory fault at 0x0 (write) by the instruction at 0x1a2c on COMPUTE:0 (vmid 1)"
        );
        let copy = Fault::of(rig_proto::Fault {
            queue: Some(rig_proto::QueueRef {
                kind: rig_proto::QueueKind::Sdma,
                index: 0,
            }),
            ..rig_proto::Fault::new(rig_proto::FaultKind::BadPacket, "")
        });
        assert_eq!(copy.queue(), Some(Queue::Copy));
    }
}
