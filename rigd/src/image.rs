//! Code objects on a device: placing an image in the client's Device memory, resolving a
//! kernel's entry (its descriptor address, arguments, scratch) and unloading.
//!
//! Parsing, checking and relocating code objects is `rig_amd::code_object`'s; this module
//! owns what rigd does with the result: where the image lies, the device's scratch, and
//! its refusals (not a code object, another processor, too much LDS, a runtime
//! service's hidden argument, a dispatch-packet read on a GPU of one die).
//!
//! Loading is split in two so that the device's lock is held only for what needs it:
//! [`Prepared::new`] parses, bounds (`images.max_bytes`, from the program headers before
//! anything is allocated) and builds the image's pieces, before the lock;
//! [`State::place_image`] allocates, writes the relocations for the address it got and
//! uploads the pieces, under it. The server runs both on tokio's blocking pool. Only the file's bytes are uploaded: the rest of
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
use rig_proto::messages::{
    Descriptor, Entry, ErrorCode, ErrorReply, ImageId, RegionId, Response, Scratch, Shortage,
};

use crate::device::Footprint;
use crate::path::Refusal;
use crate::state::{ClientId, Halt, Held, State, live};

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
struct Kept {
    /// Its name's bytes in [`Kernels::names`].
    name: (u32, u32),
    descriptor_offset: u64,
    descriptor: KernelDescriptor,
    explicit_size: u32,
    max_threads: u32,
    kernarg_size: u32,
    kernarg_align: u32,
    hidden: HiddenLayout,
    wave64: bool,
    reads_dispatch_packet: bool,
    /// The runtime services it reads, which rig does not provide, if any.
    services: Option<Box<str>>,
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

    fn get(&self, name: &str) -> Option<&Kept> {
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

impl ImageError {
    fn response(&self) -> Response {
        refused(ErrorCode::ImageRefused, self.to_string())
    }
}

/// A code object parsed and its image's pieces built, ready to be placed on a device.
#[derive(Debug)]
pub struct Prepared {
    code: CodeObject,
    pieces: Pieces,
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

fn refused(code: ErrorCode, message: impl Into<String>) -> Response {
    Response::Error(ErrorReply::new(code, message))
}

/// Bytes of scratch one wave of a kernel takes on `gpu`: its per-item bytes for every lane,
/// in the granules its generation's COMPUTE_TMPRING_SIZE.WAVESIZE counts
/// ([`rig_amd::hal::Hal::wave_scratch`]).
fn wave_scratch(gpu: &rig_amd::gpu::Gpu, private: u32, wave64: bool) -> u64 {
    gpu.hal().wave_scratch(private, wave64)
}

impl State {
    /// The half of `LoadImage` after parsing, on the device `h` holds: checks the code
    /// object against the device's GPU and the client's quota, allocates its memory, writes
    /// its relocations for that address and uploads its pieces.
    pub(crate) fn place(
        &self,
        client: ClientId,
        h: &mut Held<'_>,
        prepared: Result<Prepared, ImageError>,
    ) -> Result<Response, Halt> {
        live(&h.d)?;
        let gpu = h.d.description().gpu.clone();
        let Prepared { code, pieces } = match prepared {
            Ok(p) => p,
            Err(e) => {
                if let ImageError::TooLarge { bytes, limit } = e {
                    tracing::info!(
                        client = client.0,
                        bytes,
                        limit,
                        "image refused: larger than images.max_bytes"
                    );
                }
                return Ok(e.response());
            }
        };
        if let Err(e) = code.check(&gpu) {
            return Ok(refused(ErrorCode::ImageRefused, e.to_string()));
        }
        if code.alignment() > 4096 {
            return Ok(refused(
                ErrorCode::ImageRefused,
                format!(
                    "the code object's segments need {}-byte alignment; rigd places images on 4096-byte pages",
                    code.alignment()
                ),
            ));
        }
        let size = code.image_size();
        // What rigd keeps of it, made and charged before the memory; the code object (with
        // its copy of the file) goes before the upload.
        let kernels = Kernels::new(&code);
        let names: Vec<String> = code.kernels().iter().map(|k| k.name().to_owned()).collect();
        drop(code);
        let keep = kernels.cost();
        self.reserve_for(
            client,
            h,
            Footprint {
                objects: 1,
                gpu_bytes: size,
                ..keep.plus(Footprint {
                    bytes: size,
                    ..Footprint::default()
                })
            },
        )?;
        let region = RegionId(self.new_object_id());
        let image = ImageId(self.new_object_id());
        let d = &mut h.d;
        let memory = match d.image_memory(size) {
            Ok(m) => m,
            Err(Refusal::Lacking(_)) => {
                return Ok(Response::NoMemory {
                    bytes: size,
                    shortage: Shortage::Gpu,
                    limit: None,
                });
            }
            Err(Refusal::Full(r) | Refusal::Refused(r)) => {
                return Ok(refused(ErrorCode::Fault, r.to_string()));
            }
        };
        let placed = match pieces.place(memory.address) {
            Ok(p) => p,
            Err(e) => {
                d.discard(memory);
                return Ok(refused(ErrorCode::ImageRefused, e.to_string()));
            }
        };
        // The allocation is zeroed (a Path's promise): only the pieces need writing.
        for p in &placed {
            if let Err(f) = d.upload(&memory, p.offset, &p.bytes) {
                d.discard(memory);
                return Ok(refused(
                    ErrorCode::Fault,
                    format!("placing the image failed: {f}"),
                ));
            }
        }
        let address = memory.address;
        d.add_image(region, image, memory, kernels);
        Ok(Response::ImageLoaded {
            image,
            region,
            gpu_address: address,
            size,
            kernels: names,
        })
    }

    /// `ResolveEntry` on the device `h` holds.
    pub(crate) fn resolve_entry(
        &self,
        client: ClientId,
        h: &mut Held<'_>,
        image: ImageId,
        name: &str,
    ) -> Result<Response, Halt> {
        live(&h.d)?;
        let d = &h.d;
        let Some(img) = d.image(image) else {
            return Ok(refused(
                ErrorCode::NoSuchImage,
                format!("device {} has no image {}", d.id().0, image.0),
            ));
        };
        let Some(k) = img.kernels.get(name) else {
            return Ok(Response::Absent);
        };
        if let Some(services) = &k.services {
            return Ok(refused(
                ErrorCode::EntryRefused,
                format!(
                    "kernel {name} reads {services}, a runtime's service rig does not provide; build it without printf, hostcall or device-side enqueue"
                ),
            ));
        }
        let gpu = &d.description().gpu;
        let pm4 = gpu.dies == 1;
        if pm4 && k.reads_dispatch_packet {
            return Ok(refused(
                ErrorCode::EntryRefused,
                format!(
                    "kernel {name} reads its dispatch packet, which a GPU of one die (PM4 queue) does not have; compile it as code object v5 or later"
                ),
            ));
        }
        let private = k.descriptor.private_segment_fixed_size;
        let wave_bytes = wave_scratch(gpu, private, k.wave64);
        let waves = u64::from(gpu.compute_units) * u64::from(gpu.waves_per_cu);
        let mut entry = Entry {
            code: img.address + k.descriptor_offset,
            params: k.explicit_size,
            max_threads: k.max_threads,
            kernarg_size: k.kernarg_size,
            kernarg_align: k.kernarg_align,
            group_segment: k.descriptor.group_segment_fixed_size,
            private_segment: private,
            wave64: k.wave64,
            descriptor: Descriptor(k.descriptor.to_bytes()),
            hidden: k.hidden,
            scratch: None,
        };
        if wave_bytes == 0 {
            return Ok(Response::Entry(Box::new(entry)));
        }
        let bytes = wave_bytes.saturating_mul(waves);
        let have = d.scratch().map_or(0, |(_, b)| b);
        if have < bytes {
            self.reserve_memory(client, h, bytes)?;
            match h.d.grow_scratch(bytes) {
                Ok(()) => {}
                Err(Refusal::Lacking(_)) => {
                    return Ok(Response::NoMemory {
                        bytes,
                        shortage: Shortage::Gpu,
                        limit: None,
                    });
                }
                Err(Refusal::Full(r) | Refusal::Refused(r)) => {
                    return Ok(refused(ErrorCode::Fault, r.to_string()));
                }
            }
        }
        // A PM4 dispatch names the scratch; an AQL queue hands the device's scratch itself.
        if let Some((gpu_address, bytes)) = h.d.scratch().filter(|_| pm4) {
            entry.scratch = Some(Scratch {
                gpu_address,
                bytes,
                wave_bytes: u32::try_from(wave_bytes).unwrap_or(u32::MAX),
                waves: u32::try_from(bytes / wave_bytes).unwrap_or(u32::MAX),
            });
        }
        Ok(Response::Entry(Box::new(entry)))
    }
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
