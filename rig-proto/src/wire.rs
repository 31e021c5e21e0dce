//! The wire forms of rig-amd's types that messages carry: [`QueueKind`], [`IpVersion`] and
//! [`HiddenLayout`].
//!
//! rig-amd owns these types and may reorder their variants or fields for its own reasons;
//! the protocol's encoding is the order of variants and fields, so a message never
//! serializes them as rig-amd declares them. Each field of such a type in
//! [`crate::messages`] names one of the modules here (`#[serde(with = ...)]`), which maps
//! the value by name onto a mirror whose order is the protocol's, frozen like any message:
//! variants and fields are only ever appended, with a bump of [`crate::VERSION`]. The
//! encodings are pinned in `tests/encoding.rs`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The packets a hardware queue reads: rig-amd's type, which the wire carries by index
/// (`Pm4` 0, `Aql` 1, `Sdma` 2).
pub use rig_amd::gpu::QueueKind;

/// A three-part IP version, such as GC 11.0.0 or SDMA 6.0.0: rig-amd's type, which the wire
/// carries as three bytes (major, minor, stepping).
pub use rig_amd::gpu::IpVersion;

/// Where the hidden arguments a kernel reads lie in its kernarg segment: rig-amd's type,
/// which the wire carries as its six fields in the order below (each an `Option<u32>` or
/// three of them).
pub use rig_amd::kernarg::HiddenLayout;

/// The protocol's order of [`QueueKind`].
#[derive(Serialize, Deserialize)]
enum QueueKindWire {
    Pm4,
    Aql,
    Sdma,
}

/// The wire form of a [`QueueKind`] field.
pub mod queue_kind {
    use super::*;

    /// Writes `kind` as its protocol index.
    pub fn serialize<S: Serializer>(kind: &QueueKind, s: S) -> Result<S::Ok, S::Error> {
        match kind {
            QueueKind::Pm4 => QueueKindWire::Pm4,
            QueueKind::Aql => QueueKindWire::Aql,
            QueueKind::Sdma => QueueKindWire::Sdma,
        }
        .serialize(s)
    }

    /// Reads a kind from its protocol index.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<QueueKind, D::Error> {
        Ok(match QueueKindWire::deserialize(d)? {
            QueueKindWire::Pm4 => QueueKind::Pm4,
            QueueKindWire::Aql => QueueKind::Aql,
            QueueKindWire::Sdma => QueueKind::Sdma,
        })
    }
}

/// The protocol's order of [`IpVersion`]'s parts.
#[derive(Serialize, Deserialize)]
struct IpVersionWire {
    major: u8,
    minor: u8,
    stepping: u8,
}

/// The wire form of an [`IpVersion`] field.
pub mod ip_version {
    use super::*;

    /// Writes the version's three parts in the protocol's order.
    pub fn serialize<S: Serializer>(v: &IpVersion, s: S) -> Result<S::Ok, S::Error> {
        IpVersionWire {
            major: v.major,
            minor: v.minor,
            stepping: v.stepping,
        }
        .serialize(s)
    }

    /// Reads a version's three parts.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<IpVersion, D::Error> {
        let w = IpVersionWire::deserialize(d)?;
        Ok(IpVersion::new(w.major, w.minor, w.stepping))
    }
}

/// The protocol's order of [`HiddenLayout`]'s fields.
#[derive(Serialize, Deserialize)]
struct HiddenLayoutWire {
    block_count: [Option<u32>; 3],
    group_size: [Option<u32>; 3],
    remainder: [Option<u32>; 3],
    global_offset: [Option<u32>; 3],
    grid_dims: Option<u32>,
    dynamic_lds_size: Option<u32>,
}

/// The wire form of a [`HiddenLayout`] field.
pub mod hidden_layout {
    use super::*;

    /// Writes the layout's fields in the protocol's order.
    pub fn serialize<S: Serializer>(h: &HiddenLayout, s: S) -> Result<S::Ok, S::Error> {
        let HiddenLayout {
            block_count,
            group_size,
            remainder,
            global_offset,
            grid_dims,
            dynamic_lds_size,
        } = *h;
        HiddenLayoutWire {
            block_count,
            group_size,
            remainder,
            global_offset,
            grid_dims,
            dynamic_lds_size,
        }
        .serialize(s)
    }

    /// Reads a layout's fields.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<HiddenLayout, D::Error> {
        let w = HiddenLayoutWire::deserialize(d)?;
        Ok(HiddenLayout {
            block_count: w.block_count,
            group_size: w.group_size,
            remainder: w.remainder,
            global_offset: w.global_offset,
            grid_dims: w.grid_dims,
            dynamic_lds_size: w.dynamic_lds_size,
        })
    }
}
