//! Code objects as rigd keeps them: an image placed in the client's Device memory and what
//! its kernels' entries need; the requests on them are `crate::cmd::image`'s.
//!
//! Parsing, checking and relocating code objects is `rig_amd::code_object`'s; this module
//! owns what rigd makes of the result before any device is touched, and the refusals that
//! come before anything is allocated (not a code object, larger than `images.max_bytes`).
//!
//! Loading is split in two so that the device's lock is held only for what needs it:
//! [`Prepared::new`] parses, bounds (`images.max_bytes`, from the program headers before
//! anything is allocated) and builds the image's pieces, before the lock; the load's
//! second half (`crate::cmd::image`) allocates, writes the relocations for the address
//! it got and uploads the pieces, under it. Both run on tokio's blocking pool. Only the file's bytes are uploaded: the rest of
//! the image (a segment's zero-filled memory) is the allocation's own, which every path
//! gives zeroed ([`crate::path::Path::alloc`]), so a small file declaring a huge segment
//! costs rigd neither memory nor time beyond the allocation charged to the client.
//!
//! Once placed, rigd keeps of an image only what its entries need ([`Kernels`]: each
//! kernel's name, descriptor and argument layout, a few hundred bytes a kernel, at most
//! `rig_amd::code_object::MAX_KERNELS` of them); the file and the parsed code object go.
//! What it keeps is charged to the client's user, with the image's memory, against
//! `limits.memory_bytes` and `limits.host_memory_bytes` ([`Kernels::cost`]), so it shows
//! in the bytes `rigctl clients` and the metrics report.

use std::mem::size_of;

use rig_amd::code_object::{CodeObject, CodeObjectError, KernelDescriptor, Pieces, PlaceError};
use rig_amd::kernarg::HiddenLayout;
use rig_proto::messages::{ImageId, RegionId};

use crate::device::Footprint;

/// An image loaded on a device.
#[derive(Debug)]
pub struct Image {
    /// The Device memory it lies in.
    pub region: RegionId,
    /// The GPU address of its first byte.
    pub address: u64,
    /// What its entries need.
    pub kernels: Kernels,
}

/// What rigd keeps of an image's kernels for their entries: their names in one string and
/// an entry each, sorted by name.
#[derive(Debug)]
pub struct Kernels {
    names: String,
    entries: Vec<Kept>,
    bytes: u64,
}

/// One kernel as an entry needs it.
#[derive(Debug)]
pub(crate) struct Kept {
    /// Its name's bytes in [`Kernels::names`].
    name: (u32, u32),
    pub(crate) descriptor_offset: u64,
    pub(crate) descriptor: KernelDescriptor,
    pub(crate) explicit_size: u32,
    pub(crate) max_threads: u32,
    pub(crate) kernarg_size: u32,
    pub(crate) kernarg_align: u32,
    pub(crate) hidden: HiddenLayout,
    pub(crate) wave64: bool,
    pub(crate) reads_dispatch_packet: bool,
    /// The runtime services it reads, which rig does not provide, if any.
    pub(crate) services: Option<Box<str>>,
}

/// What holding an image costs rigd beyond its kernels: its entry in the device's table.
const PER_IMAGE: u64 = (size_of::<(ImageId, Image)>() + 16) as u64;

impl Kernels {
    /// The kernels of `code`, compact.
    pub fn new(code: &CodeObject) -> Kernels {
        let mut order: Vec<&rig_amd::code_object::Kernel> = code.kernels().iter().collect();
        order.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        let mut names = String::with_capacity(order.iter().map(|k| k.name().len()).sum());
        let mut entries = Vec::with_capacity(order.len());
        let mut text = 0;
        for k in order {
            let start = names.len() as u32;
            names.push_str(k.name());
            let services: Vec<&str> = k.runtime_services().collect();
            let services = (!services.is_empty()).then(|| services.join(", ").into_boxed_str());
            text += services.as_ref().map_or(0, |s| s.len());
            entries.push(Kept {
                name: (start, names.len() as u32),
                descriptor_offset: k.descriptor_offset(),
                descriptor: *k.descriptor(),
                explicit_size: k.explicit_size(),
                max_threads: k.max_threads(),
                kernarg_size: k.kernarg_size(),
                kernarg_align: k.kernarg_align(),
                hidden: k.plan().hidden,
                wave64: k.wave64(),
                reads_dispatch_packet: k.reads_dispatch_packet(),
                services,
            });
        }
        let bytes =
            PER_IMAGE + (names.capacity() + entries.capacity() * size_of::<Kept>() + text) as u64;
        Kernels {
            names,
            entries,
            bytes,
        }
    }

    fn name(&self, k: &Kept) -> &str {
        // PANIC: `new` recorded each name's bounds in `names`.
        &self.names[k.name.0 as usize..k.name.1 as usize]
    }

    /// The kernel called `name`, if the image has one.
    pub(crate) fn get(&self, name: &str) -> Option<&Kept> {
        self.entries
            .binary_search_by(|k| self.name(k).cmp(name))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What keeping them costs the client's user: rigd's heap bytes for them, charged as
    /// memory (`limits.memory_bytes`) and as host memory rigd made (`limits.host_memory_bytes`).
    pub fn cost(&self) -> Footprint {
        Footprint {
            bytes: self.bytes,
            host_bytes: self.bytes,
            ..Footprint::default()
        }
    }
}

/// Why an image was refused before anything was allocated for it.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// Its loadable segments span more than `images.max_bytes`.
    #[error(
        "the image takes {bytes} bytes of GPU memory once loaded, more than rigd's images.max_bytes ({limit}); make its segments smaller (large arrays belong in buffers) or ask the administrator to raise images.max_bytes"
    )]
    TooLarge {
        /// The span of its loadable segments, in whole pages.
        bytes: u64,
        /// `images.max_bytes`.
        limit: u64,
    },
    /// It is not a code object rig loads.
    #[error("{0}")]
    CodeObject(#[source] CodeObjectError),
    /// Its image cannot be built (a relocation names an undefined symbol).
    #[error("{0}")]
    Place(#[source] PlaceError),
}

/// A code object parsed and its image's pieces built, ready to be placed on a device.
#[derive(Debug)]
pub struct Prepared {
    pub(crate) code: CodeObject,
    pub(crate) pieces: Pieces,
}

impl Prepared {
    /// Parses `elf`, refusing an image larger than `max_bytes` from its program headers,
    /// and builds its pieces. The costly half of a load, run before the device's lock.
    pub fn new(elf: &[u8], max_bytes: u64) -> Result<Self, ImageError> {
        let code = CodeObject::parse_within(elf, max_bytes).map_err(|e| match e {
            CodeObjectError::TooLarge { bytes, limit } => ImageError::TooLarge { bytes, limit },
            e => ImageError::CodeObject(e),
        })?;
        let pieces = code.pieces().map_err(ImageError::Place)?;
        Ok(Self { code, pieces })
    }
}

/// Bytes of scratch one wave of a kernel takes on `gpu`: its per-item bytes for every lane,
/// in the granules its generation's COMPUTE_TMPRING_SIZE.WAVESIZE counts
/// ([`rig_amd::hal::Hal::wave_scratch`]).
pub(crate) fn wave_scratch(gpu: &rig_amd::gpu::Gpu, private: u32, wave64: bool) -> u64 {
    gpu.hal().wave_scratch(private, wave64)
}

#[cfg(test)]
mod tests {
    use rig_amd::gpu::Gpu;

    /// WAVESIZE counts 256-byte granules from GFX11 and 1 KiB on GFX9 (Mesa's
    /// `ac_gpu_info.c`, `scratch_wavesize_granularity_shift = gfx_level >= GFX11 ? 8 : 10`):
    /// this test said 1 KiB for GFX11 before.
    #[test]
    fn wave_scratch_rounds_to_the_generations_granule() {
        let gfx1100 = Gpu::by_name("gfx1100").unwrap();
        assert_eq!(super::wave_scratch(gfx1100, 0, false), 0);
        assert_eq!(super::wave_scratch(gfx1100, 4, false), 256);
        assert_eq!(super::wave_scratch(gfx1100, 48, true), 3072);
        let gfx942 = Gpu::by_name("gfx942").unwrap();
        assert_eq!(super::wave_scratch(gfx942, 4, true), 1024);
        assert_eq!(super::wave_scratch(gfx942, 48, true), 3072);
    }
}
