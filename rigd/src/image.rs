//! Code objects on a device: placing an image in the client's Device memory, resolving a
//! kernel's entry (its descriptor address, arguments, scratch) and unloading.
//!
//! Parsing, checking and relocating code objects is `rig_amd::code_object`'s; this module
//! owns what rigd does with the result: where the image lies, the device's scratch, and
//! the seed's refusals (not a code object, another processor, too much LDS, a runtime
//! service's hidden argument, a dispatch-packet read on a GPU of one die).

use rig_amd::code_object::{CodeObject, Hidden};
use rig_proto::messages::{
    Axis, Descriptor, DeviceId, Entry, ErrorCode, ErrorReply, HiddenArg, HiddenValue, ImageId,
    MemoryKind, RegionId, Response, Scratch, Shortage,
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

fn refused(code: ErrorCode, message: impl Into<String>) -> Response {
    Response::Error(ErrorReply::new(code, message))
}

fn axis(a: rig_amd::code_object::Axis) -> Axis {
    match a {
        rig_amd::code_object::Axis::X => Axis::X,
        rig_amd::code_object::Axis::Y => Axis::Y,
        rig_amd::code_object::Axis::Z => Axis::Z,
    }
}

fn hidden_value(h: &Hidden) -> Option<HiddenValue> {
    Some(match h {
        Hidden::BlockCount(a) => HiddenValue::BlockCount(axis(*a)),
        Hidden::GroupSize(a) => HiddenValue::GroupSize(axis(*a)),
        Hidden::Remainder(a) => HiddenValue::Remainder(axis(*a)),
        Hidden::GlobalOffset(a) => HiddenValue::GlobalOffset(axis(*a)),
        Hidden::GridDims => HiddenValue::GridDims,
        Hidden::DynamicLdsSize => HiddenValue::DynamicLdsSize,
        Hidden::Other(_) => return None,
    })
}

/// Bytes of scratch one wave of a kernel takes: its per-item bytes for every lane, in the
/// 1 KiB units the hardware's wave-size field counts.
fn wave_scratch(private: u32, wave64: bool) -> u64 {
    let lanes = if wave64 { 64 } else { 32 };
    (u64::from(private) * lanes).div_ceil(1024) * 1024
}

impl State {
    /// `LoadImage`.
    pub(crate) fn load_image(&mut self, client: ClientId, id: DeviceId, elf: &[u8]) -> Response {
        let gpu = match self.live_device(client, id) {
            Ok(d) => d.desc.gpu.clone(),
            Err(e) => return e,
        };
        let code = match CodeObject::parse(elf) {
            Ok(c) => c,
            Err(e) => return refused(ErrorCode::ImageRefused, e.to_string()),
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
                };
            }
            Err(Refusal::Full(r) | Refusal::Refused(r)) => return refused(ErrorCode::Fault, r),
        };
        let placed = match code.placed(memory.address) {
            Ok(p) => p,
            Err(e) => {
                d.path.free(memory);
                return refused(ErrorCode::ImageRefused, e.to_string());
            }
        };
        if let Err(f) = d.path.upload(&memory, 0, &placed) {
            d.path.free(memory);
            return refused(ErrorCode::Fault, format!("placing the image failed: {f}"));
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
            let hidden: Vec<HiddenArg> = k
                .hidden()
                .filter_map(|(h, offset)| {
                    Some(HiddenArg {
                        offset,
                        size: h.size()?,
                        value: hidden_value(h)?,
                    })
                })
                .collect();
            let wave_bytes = wave_scratch(k.private_segment_size(), k.wave64());
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
                hidden,
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
    #[test]
    fn wave_scratch_rounds_to_kib() {
        assert_eq!(super::wave_scratch(0, false), 0);
        assert_eq!(super::wave_scratch(4, false), 1024);
        assert_eq!(super::wave_scratch(48, true), 3072);
    }
}
