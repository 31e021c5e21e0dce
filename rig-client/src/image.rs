//! Images and kernels: code loaded on a device, and what a launch of one of its kernels
//! needs, made once at resolve so that a launch costs a few stores.
//!
//! This module owns [`Image`] (a loaded code object, unloaded once nothing uses it) and
//! [`Kernel`] (a resolved entry: rigd's answer plus the dispatch packets precomputed for
//! the device). Loading and resolving go through rigd; the packets come from
//! [`crate::place`].
//!
//! Ownership runs one way: a kernel keeps its image loaded, and an image keeps its device
//! open, never the reverse. The image's cache of resolved kernels holds their data
//! ([`KernelInner`]) without a pointer back to the image, so dropping the last handle of
//! an image unloads it, kernels resolved or not.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rig_proto::{Entry, ImageId, RegionId};

use crate::args::{Args, KernelFacts, Param, ParamTable, Registers};
use crate::device::DeviceShared;
use crate::dispatch::Kernargs;
use crate::error::{Error, Result};
use crate::place::LaunchTemplate;

/// Code loaded on a device. Cheap to clone; unloaded once the last clone and the last
/// kernel resolved from it drop and no submitted work runs it.
#[derive(Debug, Clone)]
pub struct Image(pub(crate) Arc<ImageInner>);

#[derive(Debug)]
pub(crate) struct ImageInner {
    pub device: Arc<DeviceShared>,
    pub id: ImageId,
    pub region: RegionId,
    pub gpu_address: u64,
    pub size: u64,
    pub kernels: Vec<String>,
    /// Its kernels' parameters and registers, from the client's parse of its metadata.
    pub facts: ParamTable,
    /// Kernels resolved so far, by name: their data only, so the cache keeps no kernel's
    /// image (itself) alive.
    pub resolved: Mutex<HashMap<String, Arc<KernelInner>>>,
}

impl Image {
    /// The names of its kernels.
    pub fn kernels(&self) -> &[String] {
        &self.0.kernels
    }

    /// The GPU address of its first byte.
    pub fn address(&self) -> u64 {
        self.0.gpu_address
    }

    /// The bytes of device memory it takes.
    pub fn size(&self) -> u64 {
        self.0.size
    }

    /// The kernel `name`, made ready to launch: rigd grows the device's scratch for it, and
    /// its dispatch packets are precomputed. A second call returns the same kernel.
    pub fn resolve(&self, name: &str) -> Result<Kernel> {
        if let Some(k) = self.0.resolved.lock().map_err(poisoned)?.get(name) {
            return Ok(Kernel(k.clone(), Some(self.0.clone())));
        }
        let entry = self.0.device.resolve(self.0.id, name, &self.0.kernels)?;
        let dev = &self.0.device;
        let template = LaunchTemplate::new(&dev.target, &entry);
        let kernargs = Kernargs::of(&entry)?;
        let kernel = Arc::new(KernelInner {
            device_id: dev.id.0,
            name: name.to_owned(),
            lds_bytes: dev.facts.lds_bytes,
            dies: dev.facts.dies,
            entry,
            template,
            kernargs,
            facts: self
                .0
                .facts
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, f)| f.clone()),
        });
        let mut resolved = self.0.resolved.lock().map_err(poisoned)?;
        let kernel = resolved.entry(name.to_owned()).or_insert(kernel).clone();
        Ok(Kernel(kernel, Some(self.0.clone())))
    }

    /// Starts making the entries of `names` without waiting, so that several kernels are
    /// made at once; a later [`Image::resolve`] waits for each and reports its failures.
    pub fn prepare(&self, names: &[&str]) -> Result<()> {
        for name in names {
            self.0.device.prepare(self.0.id, name)?;
        }
        Ok(())
    }
}

fn poisoned<T>(_: T) -> Error {
    Error::Invalid("a thread panicked while it held the image's lock".into())
}

impl Drop for ImageInner {
    fn drop(&mut self) {
        self.device.unload_after(self.id, self.region);
    }
}

/// A kernel of an image, ready to launch ([`crate::Submission::launch`]). Cheap to clone;
/// it keeps its image loaded (and so its device open) while it lives.
#[derive(Debug, Clone)]
pub struct Kernel(
    pub(crate) Arc<KernelInner>,
    /// The image, kept loaded while the kernel lives; `None` for unit tests.
    pub(crate) Option<Arc<ImageInner>>,
);

#[derive(Debug)]
pub(crate) struct KernelInner {
    pub device_id: u64,
    pub name: String,
    /// The GPU's local data share per group.
    pub lds_bytes: u32,
    /// Dies that run the compute queue's work.
    pub dies: u32,
    pub entry: Entry,
    pub template: LaunchTemplate,
    pub kernargs: Kernargs,
    /// Its parameters and registers; `None` where the client could not read its metadata.
    pub facts: Option<KernelFacts>,
}

impl Kernel {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Bytes of its explicit arguments: a launch's parameters are at least this long.
    pub fn params(&self) -> u32 {
        self.0.entry.params
    }

    /// The image it was resolved from.
    pub fn image(&self) -> Option<Image> {
        self.1.clone().map(Image)
    }

    /// The most work-items of one of its groups.
    pub fn max_threads(&self) -> u32 {
        self.0.entry.max_threads
    }

    /// Its explicit parameters, in order, as its code object's metadata states them (empty
    /// where the client could not read the metadata).
    pub fn arguments(&self) -> &[Param] {
        self.0.facts.as_ref().map_or(&[], |f| &f.params)
    }

    /// Bytes of static LDS (the group segment) each group takes; a launch's dynamic LDS
    /// starts after it.
    pub fn static_lds(&self) -> u32 {
        self.0.entry.group_segment
    }

    /// Bytes of scratch (the private segment) each work-item takes.
    pub fn scratch(&self) -> u32 {
        self.0.entry.private_segment
    }

    /// The registers a wave takes (zeros where the client could not read the metadata).
    pub fn registers(&self) -> Registers {
        self.0
            .facts
            .as_ref()
            .map(|f| f.registers)
            .unwrap_or_default()
    }

    /// Whether it runs in waves of 64 work-items (else 32).
    pub fn wave64(&self) -> bool {
        self.0.entry.wave64
    }

    /// New arguments for a launch of it, filled by name or position ([`Args`]).
    pub fn args(&self) -> Args {
        Args::new(self)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rig_proto::{Descriptor, Entry};

    /// A kernel of device `device_id` taking `params` explicit bytes, for unit tests.
    pub(crate) fn kernel(device_id: u64, params: u32, max_threads: u32, group: u32) -> Kernel {
        let entry = Entry {
            code: 0x7000_0000,
            params,
            max_threads,
            kernarg_size: params + 256,
            kernarg_align: 16,
            group_segment: group,
            private_segment: 0,
            wave64: false,
            descriptor: Descriptor([0; 64]),
            hidden: rig_amd::kernarg::HiddenLayout::default(),
            scratch: None,
        };
        let target = crate::place::Target::of(&crate::place::tests::facts()).unwrap();
        let template = LaunchTemplate::new(&target, &entry);
        let kernargs = Kernargs::of(&entry).unwrap();
        Kernel(
            Arc::new(KernelInner {
                device_id,
                name: "k".into(),
                lds_bytes: 65536,
                dies: 1,
                entry,
                template,
                kernargs,
                facts: None,
            }),
            None,
        )
    }
}
