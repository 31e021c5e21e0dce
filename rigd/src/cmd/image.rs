//! Code objects on a device: loading an image, resolving a kernel's entry (its descriptor
//! address, arguments, scratch), preparing one ahead, and unloading.
//!
//! What an image is and how a code object becomes one is [`crate::image`]'s; these are the
//! requests. A load is split in two so that the device's lock is held only for what needs
//! it: [`Prepared::new`] parses, bounds and builds the image's pieces before the lock (and
//! the request's copy of the file goes before the lock is taken), [`place`] allocates,
//! relocates and uploads under it. A load may block, so it always runs on the blocking
//! pool.

use rig_proto::Route;
use rig_proto::messages::{Descriptor, Entry, ImageId, RegionId, Response, Scratch};

use super::Answered;
use super::devices::live;
use crate::device::Footprint;
use crate::image::{ImageError, Kernels, Prepared, wave_scratch};
use crate::path::Refusal as PathRefusal;
use crate::refusal::Refusal;
use crate::state::{ClientId, State, none};
use crate::table::{Held, Mode};

/// `LoadImage`: parses `code_object` (and lets it go) before the device's lock, then
/// places the image under it.
pub(crate) fn load<M: Mode>(
    st: &State,
    client: ClientId,
    route: &Route,
    code_object: &mut Vec<u8>,
) -> Result<Answered, M::Busy> {
    // Parsing and building the image is the costly half: before the device's lock.
    let prepared = Prepared::new(code_object, st.max_image_bytes);
    drop(std::mem::take(code_object));
    st.on_device::<M>(client, route, |h| place(st, client, h, prepared).map(none))
}

/// `ResolveEntry`: what a launch of `name` needs, its scratch made.
pub(crate) fn resolve<M: Mode>(
    st: &State,
    client: ClientId,
    route: &Route,
    image: ImageId,
    name: &str,
) -> Result<Answered, M::Busy> {
    st.on_device::<M>(client, route, |h| {
        resolve_entry(st, client, h, image, name).map(none)
    })
}

/// `Prepare`: may make `name`'s entry ahead; reports nothing, failures included.
pub(crate) fn prepare<M: Mode>(
    st: &State,
    client: ClientId,
    route: &Route,
    image: ImageId,
    name: &str,
) -> Result<Answered, M::Busy> {
    st.on_device::<M>(client, route, |h| {
        let _ = resolve_entry(st, client, h, image, name);
        Ok(none(Response::Done))
    })
}

/// `Unload`: releases the image's entries; its region stays until freed.
pub(crate) fn unload<M: Mode>(
    st: &State,
    client: ClientId,
    route: &Route,
    image: ImageId,
) -> Result<Answered, M::Busy> {
    st.on_device::<M>(client, route, |h| {
        if h.d.unload(image) {
            Ok(none(Response::Done))
        } else {
            Err(Refusal::NoImage {
                device: h.d.id(),
                image,
            })
        }
    })
}

/// The half of `LoadImage` after parsing, on the device `h` holds: checks the code object
/// against the device's GPU and the client's quota, allocates its memory, writes its
/// relocations for that address and uploads its pieces.
fn place(
    st: &State,
    client: ClientId,
    h: &mut Held<'_>,
    prepared: Result<Prepared, ImageError>,
) -> Result<Response, Refusal> {
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
            return Err(e.into());
        }
    };
    code.check(&gpu)
        .map_err(|e| Refusal::ImageRefused(e.to_string()))?;
    if code.alignment() > 4096 {
        return Err(Refusal::ImageRefused(format!(
            "the code object's segments need {}-byte alignment; rigd places images on 4096-byte pages",
            code.alignment()
        )));
    }
    let size = code.image_size();
    // What rigd keeps of it, made and charged before the memory; the code object (with its
    // copy of the file) goes before the upload.
    let kernels = Kernels::new(&code);
    let names: Vec<String> = code.kernels().iter().map(|k| k.name().to_owned()).collect();
    drop(code);
    let keep = kernels.cost();
    st.reserve_for(
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
    let region = RegionId(st.new_object_id());
    let image = ImageId(st.new_object_id());
    let mut made = h.d.image_memory(size);
    if matches!(made, Err(PathRefusal::Lacking(_))) && st.reclaim(h) {
        made = h.d.image_memory(size);
    }
    let d = &mut h.d;
    let memory = match made {
        Ok(m) => m,
        Err(PathRefusal::Lacking(_)) => return Err(Refusal::gpu_short(size)),
        Err(PathRefusal::Full(r) | PathRefusal::Refused(r)) => {
            return Err(Refusal::Fault(r.to_string()));
        }
    };
    let placed = match pieces.place(memory.address) {
        Ok(p) => p,
        Err(e) => {
            d.discard(memory);
            return Err(Refusal::ImageRefused(e.to_string()));
        }
    };
    // The allocation is zeroed (a Path's promise): only the pieces need writing.
    for p in &placed {
        if let Err(f) = d.upload(&memory, p.offset, &p.bytes) {
            d.discard(memory);
            return Err(Refusal::Fault(format!("placing the image failed: {f}")));
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
fn resolve_entry(
    st: &State,
    client: ClientId,
    h: &mut Held<'_>,
    image: ImageId,
    name: &str,
) -> Result<Response, Refusal> {
    live(&h.d)?;
    let d = &h.d;
    let Some(img) = d.image(image) else {
        return Err(Refusal::NoImage {
            device: d.id(),
            image,
        });
    };
    let Some(k) = img.kernels.get(name) else {
        return Ok(Response::Absent);
    };
    if let Some(services) = &k.services {
        return Err(Refusal::Services {
            name: name.to_owned(),
            services: services.to_string(),
        });
    }
    let gpu = &d.description().gpu;
    let pm4 = gpu.dies == 1;
    if pm4 && k.reads_dispatch_packet {
        return Err(Refusal::DispatchPacket {
            name: name.to_owned(),
        });
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
        st.reserve_memory(client, h, bytes)?;
        let mut grown = h.d.grow_scratch(bytes);
        if matches!(grown, Err(PathRefusal::Lacking(_))) && st.reclaim(h) {
            grown = h.d.grow_scratch(bytes);
        }
        match grown {
            Ok(()) => {}
            Err(PathRefusal::Lacking(_)) => return Err(Refusal::gpu_short(bytes)),
            Err(PathRefusal::Full(r) | PathRefusal::Refused(r)) => {
                return Err(Refusal::Fault(r.to_string()));
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
