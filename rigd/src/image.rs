//! Code objects on a device: placing an image in the client's Device memory, resolving a
//! kernel's entry (its descriptor address, arguments, scratch) and unloading.
//!
//! Parsing, checking and relocating code objects is `rig_amd::code_object`'s; this module
//! owns what rigd does with the result: where the image lies, the device's scratch, and
//! the seed's refusals (not a code object, another processor, too much LDS, a runtime
//! service's hidden argument, a dispatch-packet read on a GPU of one die).
//!
//! Loading is split in two so that the state's lock is held only for what needs it:
//! [`Prepared::new`] parses, bounds (`images.max_bytes`, from the program headers before
//! anything is allocated) and builds the image's pieces, in the connection's task before
//! the lock; [`State::place_image`] allocates, writes the relocations for the address it
//! got and uploads the pieces, under it. Only the file's bytes are uploaded: the rest of
//! the image (a segment's zero-filled memory) is the allocation's own, which every path
//! gives zeroed ([`crate::path::Path::alloc`]), so a small file declaring a huge segment
//! costs rigd neither memory nor time beyond the allocation charged to the client.

use rig_amd::code_object::{CodeObject, CodeObjectError, Pieces, PlaceError};
use rig_proto::messages::{
    Descriptor, DeviceId, Entry, ErrorCode, ErrorReply, ImageId, MemoryKind, RegionId, Response,
    Scratch, Shortage,
};

use crate::device::Region;
use crate::path::Refusal;
use crate::state::{ClientId, State};

/// An image loaded on a device.
#[derive(Debug)]
pub struct Image {
    /// The Device memory it lies in.
    pub region: RegionId,
    /// The GPU address of its first byte.
    pub address: u64,
    /// The parsed code object, for entries.
    pub code: CodeObject,
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
    /// and builds its pieces. The costly half of a load, run before the state's lock.
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
    /// `LoadImage`, parsing under the lock: for callers of [`crate::state::Handler`]
    /// without a task of their own. The server prepares first ([`Prepared::new`]) and
    /// calls [`place_image`](Self::place_image).
    pub(crate) fn load_image(&mut self, client: ClientId, id: DeviceId, elf: &[u8]) -> Response {
        let prepared = Prepared::new(elf, self.max_image_bytes);
        self.place_image(client, id, prepared)
    }

    /// The half of `LoadImage` under the lock: checks the code object against the device's
    /// GPU and the client's quota, allocates its memory, writes its relocations for that
    /// address and uploads its pieces.
    pub fn place_image(
        &mut self,
        client: ClientId,
        id: DeviceId,
        prepared: Result<Prepared, ImageError>,
    ) -> Response {
        let gpu = match self.live_device(client, id) {
            Ok(d) => d.desc.gpu.clone(),
            Err(e) => return e,
        };
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
                return e.response();
            }
        };
        if let Err(e) = code.check(&gpu) {
            return refused(ErrorCode::ImageRefused, e.to_string());
        }
        if code.alignment() > 4096 {
            return refused(
                ErrorCode::ImageRefused,
                format!(
                    "the code object's segments need {}-byte alignment; rigd places images on 4096-byte pages",
                    code.alignment()
                ),
            );
        }
        let size = code.image_size();
        if let Some(r) = self.quota_for(client, size) {
            return r;
        }
        let region = RegionId(self.new_object_id());
        let image = ImageId(self.new_object_id());
        let Ok(d) = self.live_device(client, id) else {
            return refused(ErrorCode::Internal, "device vanished");
        };
        let memory = match d.path.alloc(MemoryKind::Device, size) {
            Ok(m) => m,
            Err(Refusal::Lacking(_)) => {
                return Response::NoMemory {
                    bytes: size,
                    shortage: Shortage::Gpu,
                    limit: None,
                };
            }
            Err(Refusal::Full(r) | Refusal::Refused(r)) => return refused(ErrorCode::Fault, r),
        };
        let placed = match pieces.place(memory.address) {
            Ok(p) => p,
            Err(e) => {
                d.path.free(memory);
                return refused(ErrorCode::ImageRefused, e.to_string());
            }
        };
        // The allocation is zeroed (a Path's promise): only the pieces need writing.
        for p in &placed {
            if let Err(f) = d.path.upload(&memory, p.offset, &p.bytes) {
                d.path.free(memory);
                return refused(ErrorCode::Fault, format!("placing the image failed: {f}"));
            }
        }
        let address = memory.address;
        let kernels = code.kernels().iter().map(|k| k.name().to_owned()).collect();
        d.regions.insert(
            region,
            Region {
                memory,
                image: Some(image),
            },
        );
        d.images.insert(
            image,
            Image {
                region,
                address,
                code,
            },
        );
        Response::ImageLoaded {
            image,
            region,
            gpu_address: address,
            size,
            kernels,
        }
    }

    /// `ResolveEntry`.
    pub(crate) fn resolve_entry(
        &mut self,
        client: ClientId,
        id: DeviceId,
        image: ImageId,
        name: &str,
    ) -> Response {
        let (entry_base, scratch_need) = {
            let d = match self.live_device(client, id) {
                Ok(d) => d,
                Err(e) => return e,
            };
            let Some(img) = d.images.get(&image) else {
                return refused(
                    ErrorCode::NoSuchImage,
                    format!("device {} has no image {}", id.0, image.0),
                );
            };
            let Some(k) = img.code.kernel(name) else {
                return Response::Absent;
            };
            let services: Vec<&str> = k.runtime_services().collect();
            if !services.is_empty() {
                return refused(
                    ErrorCode::EntryRefused,
                    format!(
                        "kernel {name} reads {}, a runtime's service rig does not provide; build it without printf, hostcall or device-side enqueue",
                        services.join(", ")
                    ),
                );
            }
            let pm4 = d.desc.gpu.dies == 1;
            if pm4 && k.reads_dispatch_packet() {
                return refused(
                    ErrorCode::EntryRefused,
                    format!(
                        "kernel {name} reads its dispatch packet, which a GPU of one die (PM4 queue) does not have; compile it as code object v5 or later"
                    ),
                );
            }
            let wave_bytes = wave_scratch(&d.desc.gpu, k.private_segment_size(), k.wave64());
            let waves = u64::from(d.desc.gpu.compute_units) * u64::from(d.desc.gpu.waves_per_cu);
            let entry = Entry {
                code: img.address + k.descriptor_offset(),
                params: k.explicit_size(),
                max_threads: k.max_threads(),
                kernarg_size: k.kernarg_size(),
                kernarg_align: k.kernarg_align(),
                group_segment: k.group_segment_size(),
                private_segment: k.private_segment_size(),
                wave64: k.wave64(),
                descriptor: Descriptor(k.descriptor().to_bytes()),
                hidden: k.plan().hidden,
                scratch: None,
            };
            (entry, (wave_bytes, waves, pm4))
        };
        let mut entry = entry_base;
        let (wave_bytes, waves, pm4) = scratch_need;
        if wave_bytes == 0 {
            return Response::Entry(Box::new(entry));
        }
        let bytes = wave_bytes.saturating_mul(waves);
        let have = self
            .live_device(client, id)
            .ok()
            .and_then(|d| d.scratch.as_ref().map(|s| s.bytes))
            .unwrap_or(0);
        if have < bytes {
            if let Some(r) = self.quota_for(client, bytes) {
                return r;
            }
            let Ok(d) = self.live_device(client, id) else {
                return refused(ErrorCode::Internal, "device vanished");
            };
            match d.path.alloc(MemoryKind::Device, bytes) {
                Ok(m) => {
                    // Work already submitted may still use the old scratch: keep it until close.
                    if let Some(old) = d.scratch.replace(m) {
                        d.spent.push(old);
                    }
                }
                Err(Refusal::Lacking(_)) => {
                    return Response::NoMemory {
                        bytes,
                        shortage: Shortage::Gpu,
                        limit: None,
                    };
                }
                Err(Refusal::Full(r) | Refusal::Refused(r)) => return refused(ErrorCode::Fault, r),
            }
        }
        let Ok(d) = self.live_device(client, id) else {
            return refused(ErrorCode::Internal, "device vanished");
        };
        // A PM4 dispatch names the scratch; an AQL queue hands the device's scratch itself.
        if let Some(s) = d.scratch.as_ref().filter(|_| pm4) {
            entry.scratch = Some(Scratch {
                gpu_address: s.address,
                bytes: s.bytes,
                wave_bytes: u32::try_from(wave_bytes).unwrap_or(u32::MAX),
                waves: u32::try_from(s.bytes / wave_bytes).unwrap_or(u32::MAX),
            });
        }
        Response::Entry(Box::new(entry))
    }

    /// `Unload`: the image's entries go; its region stays until freed.
    pub(crate) fn unload(&mut self, client: ClientId, id: DeviceId, image: ImageId) -> Response {
        let d = match self.owned_device(client, id) {
            Ok(d) => d,
            Err(e) => return e,
        };
        match d.images.remove(&image) {
            Some(img) => {
                if let Some(r) = d.regions.get_mut(&img.region) {
                    r.image = None;
                }
                Response::Done
            }
            None => refused(
                ErrorCode::NoSuchImage,
                format!("device {} has no image {}", id.0, image.0),
            ),
        }
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
