//! AMDGPU code objects: what a binary holds and the bytes it becomes in GPU memory.
//!
//! A code object is an ELF shared object (`ET_DYN`, machine `EM_AMDGPU`) of code object
//! version 4, 5 or 6, as `ld.lld -shared` links it. [`CodeObject::parse`] reads:
//!
//! - the processor and its xnack/sramecc settings from `e_flags` ([`Target`]);
//! - the `NT_AMDGPU_METADATA` note, a msgpack map describing each kernel: its arguments
//!   with their offsets and kinds, its segment sizes, its wave size;
//! - each kernel's 64-byte descriptor at its `<name>.kd` symbol, which a dispatch names;
//! - the loadable segments, which make the image, and the dynamic relocations
//!   (`R_AMDGPU_RELATIVE64`, `ABS64`, `REL64`) that [`CodeObject::place`] applies for a
//!   load address.
//!
//! It cross-checks the note against the ELF (the target, each descriptor's sizes) and bounds
//! every offset and size it reads, so any input gives a [`CodeObjectError`] naming the
//! problem and never a panic. [`CodeObject::check`] says whether a GPU runs it.
//!
//! This module does not allocate GPU memory, resolve symbols against libraries (rig links
//! none: an undefined symbol, weak or not, is an error at [`CodeObject::check`]) or decide a launch's
//! arguments ([`crate::kernarg`] lays those out from [`Kernel::plan`]).
//!
//! Facts from LLVM's AMDGPUUsage ("ELF Header", "Note Records", "Kernel Descriptor",
//! "Relocation Records", "Code Object V5 Metadata").

mod descriptor;
mod elf;
mod metadata;
mod target;

pub use descriptor::*;
pub use metadata::{Arg, ArgKind, Axis, Hidden, MAX_ARGS, MAX_DEPTH, MAX_KERNELS, MAX_STRING};
pub use target::{Feature, GenericFamily, Processor, Target};

use crate::gpu::Gpu;
use crate::kernarg::{HiddenLayout, KernargPlan};
use elf::{RelocKind, Segment};

/// Why bytes are not a code object rig reads. Each message completes
/// "not a code object: ...".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// The file is shorter than an ELF header.
    #[error("{0} bytes are too few for an ELF header")]
    TooShort(usize),
    /// No ELF magic.
    #[error("it does not start with the ELF magic")]
    NotElf,
    /// `ELFCLASS32` or another class.
    #[error("it is not a 64-bit ELF file")]
    Not64,
    /// Big-endian or unknown data encoding.
    #[error("it is not a little-endian ELF file")]
    NotLittleEndian,
    /// Another machine.
    #[error("its machine is {0}, not EM_AMDGPU (224)")]
    Machine(u16),
    /// Not a shared object.
    #[error("its ELF type is {0}, not a shared object (ET_DYN); link it with ld.lld -shared")]
    Type(u16),
    /// Another OS ABI.
    #[error("its OS ABI is {0}, not AMDGPU HSA (64)")]
    OsAbi(u8),
    /// Code object v3 or older, or a version not yet known.
    #[error("its ABI version {0} is not code object v4, v5 or v6")]
    Version(u8),
    /// `e_flags` name no processor.
    #[error("its e_flags {0:#x} name no AMDGPU processor")]
    Processor(u32),
    /// The ELF structure is broken.
    #[error("malformed ELF: {0}")]
    Elf(String),
    /// A loadable segment is broken.
    #[error("{0}")]
    Segment(String),
    /// Nothing to load.
    #[error("it has no loadable segment")]
    NoLoad,
    /// No metadata note.
    #[error("it has no NT_AMDGPU_METADATA note")]
    NoMetadata,
    /// The note does not decode.
    #[error("its metadata note is not msgpack: {0}")]
    BadMsgpack(String),
    /// The note decodes but lacks or mistypes a field.
    #[error("its metadata is malformed: {0}")]
    BadMetadata(String),
    /// `e_flags` and the note's `amdhsa.target` disagree.
    #[error("its e_flags say {flags} but its metadata's target is {metadata}")]
    TargetMismatch {
        /// The target id from `e_flags`.
        flags: String,
        /// `amdhsa.target`.
        metadata: String,
    },
    /// A kernel's descriptor symbol is absent.
    #[error("kernel {kernel} has no descriptor symbol {symbol}")]
    MissingDescriptor {
        /// The kernel.
        kernel: String,
        /// The symbol the metadata names.
        symbol: String,
    },
    /// A kernel's descriptor or code lies outside the image.
    #[error("kernel {0}: {1}")]
    Kernel(String, String),
    /// A dynamic relocation rig cannot apply.
    #[error("relocation {0}")]
    Relocation(String),
    /// It holds more of something than rig reads from one code object.
    #[error("{what}, more than {limit} ({value}) allows")]
    Limit {
        /// What it holds, such as "its metadata lists 15000 kernels".
        what: String,
        /// The bound's name, such as `rig_amd::code_object::MAX_KERNELS`.
        limit: &'static str,
        /// The bound.
        value: u64,
    },
}

/// Why a code object cannot be used (on a GPU).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeObjectError {
    /// The bytes are not a code object rig reads.
    #[error("not a code object: {0}")]
    NotCodeObject(#[from] Malformed),
    /// The code object is for another processor.
    #[error("a code object for {object}; the GPU is {gpu}")]
    WrongProcessor {
        /// The code object's processor, such as `gfx90a`.
        object: String,
        /// The GPU's, such as `gfx1201`.
        gpu: String,
    },
    /// A kernel takes more LDS than the GPU has.
    #[error("kernel {kernel} takes {needs} bytes of local data share; the GPU has {has}")]
    TooMuchLds {
        /// The kernel.
        kernel: String,
        /// Its group segment.
        needs: u32,
        /// The GPU's LDS per workgroup.
        has: u32,
    },
    /// A relocation names a symbol the code object does not define.
    #[error("the code object needs symbol {0}, which it does not define and rig does not provide")]
    Undefined(String),
    /// The loadable segments span more than the loader allows (read from the program
    /// headers, before anything is allocated).
    #[error("the image takes {bytes} bytes once loaded, more than the {limit}-byte limit")]
    TooLarge {
        /// The span of its loadable segments.
        bytes: u64,
        /// The limit given to [`CodeObject::parse_within`].
        limit: u64,
    },
}

/// The largest image rig places (4 GiB), whatever limit [`CodeObject::parse_within`] is
/// given.
pub const MAX_IMAGE: u64 = 1 << 32;

/// Why [`CodeObject::place`] could not place the image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    /// The buffer is smaller than the image.
    #[error("the image takes {need} bytes; the buffer holds {have}")]
    BufferShort {
        /// [`CodeObject::image_size`].
        need: u64,
        /// The buffer's bytes.
        have: usize,
    },
    /// The load address breaks a segment's alignment.
    #[error("load address {address:#x} is not a multiple of {alignment}")]
    Misaligned {
        /// The address given.
        address: u64,
        /// [`CodeObject::alignment`].
        alignment: u64,
    },
    /// A relocation names a symbol the code object does not define.
    #[error("the code object needs symbol {0}, which it does not define")]
    Undefined(String),
}

/// A kernel of a code object.
#[derive(Debug, Clone)]
pub struct Kernel {
    name: String,
    symbol: String,
    descriptor_offset: u64,
    descriptor: KernelDescriptor,
    args: Vec<Arg>,
    max_threads: u32,
    wave64: bool,
    sgpr_count: u32,
    vgpr_count: u32,
    uses_dynamic_stack: bool,
    plan: KernargPlan,
}

impl Kernel {
    /// The kernel's name, such as `add`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its descriptor's symbol, such as `add.kd`.
    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    /// The descriptor's byte offset in the image: a dispatch names `load address + this`.
    pub fn descriptor_offset(&self) -> u64 {
        self.descriptor_offset
    }

    /// The code's byte offset in the image (256-byte aligned).
    pub fn code_offset(&self) -> u64 {
        self.descriptor_offset
            .wrapping_add_signed(self.descriptor.kernel_code_entry_byte_offset)
    }

    /// The kernel descriptor.
    pub fn descriptor(&self) -> &KernelDescriptor {
        &self.descriptor
    }

    /// Where its explicit arguments end: the bytes of parameters a launch passes
    /// (`.kernarg_segment_size` less the hidden arguments, LLVM's AMDGPUUsage).
    pub fn explicit_size(&self) -> u32 {
        self.plan.explicit_size
    }

    /// The most work-items of a group (`.max_flat_workgroup_size`, LLVM's AMDGPUUsage).
    pub fn max_threads(&self) -> u32 {
        self.max_threads
    }

    /// Bytes of static LDS a group takes.
    pub fn group_segment_size(&self) -> u32 {
        self.descriptor.group_segment_fixed_size
    }

    /// Bytes of scratch a work-item takes.
    pub fn private_segment_size(&self) -> u32 {
        self.descriptor.private_segment_fixed_size
    }

    /// Bytes of its kernarg segment, hidden arguments included.
    pub fn kernarg_size(&self) -> u32 {
        self.plan.size
    }

    /// Alignment of its kernarg segment.
    pub fn kernarg_align(&self) -> u32 {
        self.plan.align
    }

    /// Whether it runs in waves of 64 work-items (else 32).
    pub fn wave64(&self) -> bool {
        self.wave64
    }

    /// `COMPUTE_PGM_RSRC1`.
    pub fn rsrc1(&self) -> u32 {
        self.descriptor.compute_pgm_rsrc1
    }

    /// `COMPUTE_PGM_RSRC2`.
    pub fn rsrc2(&self) -> u32 {
        self.descriptor.compute_pgm_rsrc2
    }

    /// `COMPUTE_PGM_RSRC3`.
    pub fn rsrc3(&self) -> u32 {
        self.descriptor.compute_pgm_rsrc3
    }

    /// The descriptor's `kernel_code_properties` (see the `ENABLE_*` constants).
    pub fn code_properties(&self) -> u16 {
        self.descriptor.kernel_code_properties
    }

    /// SGPRs and VGPRs a wave takes, as the metadata states them.
    pub fn registers(&self) -> (u32, u32) {
        (self.sgpr_count, self.vgpr_count)
    }

    /// Whether its stack is sized at run time (its private segment is then a lower bound).
    pub fn uses_dynamic_stack(&self) -> bool {
        self.uses_dynamic_stack
    }

    /// Every argument, explicit and hidden, in metadata order.
    pub fn args(&self) -> &[Arg] {
        &self.args
    }

    /// The arguments a launch passes.
    pub fn explicit_args(&self) -> impl Iterator<Item = &Arg> {
        self.args.iter().filter(|a| a.kind.is_explicit())
    }

    /// The hidden arguments it reads, with their offsets (`hidden_none` padding left out).
    pub fn hidden(&self) -> impl Iterator<Item = (&Hidden, u32)> {
        self.args.iter().filter_map(|a| match &a.kind {
            ArgKind::Hidden(h) => Some((h, a.offset)),
            _ => None,
        })
    }

    /// The runtime services it needs, which rig does not provide: the [`Hidden::Other`]
    /// arguments it reads, such as `printf_buffer`, and `queue_ptr` if its descriptor asks
    /// for the queue's address in SGPRs (code object v4's way). A kernel with any is refused
    /// at `entry`.
    pub fn runtime_services(&self) -> impl Iterator<Item = &str> {
        let others = self.hidden().filter_map(|(h, _)| match h {
            Hidden::Other(name) => Some(name.as_str()),
            _ => None,
        });
        let queue = self.descriptor.has(ENABLE_SGPR_QUEUE_PTR)
            && !self
                .hidden()
                .any(|(h, _)| matches!(h, Hidden::Other(n) if n == "queue_ptr"));
        others.chain(queue.then_some("queue_ptr"))
    }

    /// Whether it reads its dispatch packet (`ENABLE_SGPR_DISPATCH_PTR`), which a PM4 queue
    /// does not have: code object v4 reads group sizes there.
    pub fn reads_dispatch_packet(&self) -> bool {
        self.descriptor.has(ENABLE_SGPR_DISPATCH_PTR)
    }

    /// What a launch's argument layout needs of it.
    pub fn plan(&self) -> &KernargPlan {
        &self.plan
    }
}

/// A parsed code object.
#[derive(Debug, Clone)]
pub struct CodeObject {
    target: Target,
    version: u8,
    target_id: String,
    metadata_version: [u32; 2],
    kernels: Vec<Kernel>,
    image_size: u64,
    alignment: u64,
    base: u64,
    segments: Vec<Segment>,
    relocs: Vec<elf::Reloc>,
    /// Undefined symbols its relocations name, each once (at most
    /// `elf::MAX_UNDEFINED_NAMES`).
    undefined: Vec<String>,
    /// The file, which the segments' bytes are ranges of: a copy of the input, so that the
    /// parse's memory is bounded by the input's size however the segments overlap in it.
    file: Vec<u8>,
}

/// The prefix of `amdhsa.target` before the target id.
const TRIPLE: &str = "amdgcn-amd-amdhsa--";

impl CodeObject {
    /// Parses a code object, or says why the bytes are not one. Its image may take up to
    /// [`MAX_IMAGE`] bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, CodeObjectError> {
        Self::parse_within(bytes, MAX_IMAGE)
    }

    /// [`parse`](Self::parse), refusing with [`CodeObjectError::TooLarge`] an image whose
    /// loadable segments span more than `max_image` bytes. That is decided from the program
    /// headers before anything is allocated, so a small file declaring a huge segment costs
    /// nothing.
    pub fn parse_within(bytes: &[u8], max_image: u64) -> Result<Self, CodeObjectError> {
        let loaded = elf::load(bytes, max_image)?;
        Ok(Self::parse_inner(bytes, loaded)?)
    }

    fn parse_inner(bytes: &[u8], loaded: elf::Loaded<'_>) -> Result<Self, Malformed> {
        let target =
            Target::from_e_flags(loaded.e_flags).ok_or(Malformed::Processor(loaded.e_flags))?;
        let meta = metadata::parse(loaded.metadata)?;
        if meta.version[0] != 1 {
            return Err(Malformed::BadMetadata(format!(
                "amdhsa.version {}.{} is not 1.x",
                meta.version[0], meta.version[1]
            )));
        }
        if meta.target.strip_prefix(TRIPLE) != Some(target.id().as_str()) {
            return Err(Malformed::TargetMismatch {
                flags: target.id(),
                metadata: meta.target,
            });
        }
        let gfx9 = match target.processor {
            Processor::Gfx(v) => v.major == 9,
            Processor::Generic { family, .. } => {
                matches!(family, GenericFamily::Gfx9 | GenericFamily::Gfx9_4)
            }
        };
        let symbols = loaded.symbols()?;
        // Names borrowed, not copied: the metadata's own bound its cost.
        let mut names = std::collections::HashSet::with_capacity(meta.kernels.len());
        if let Some(m) = meta.kernels.iter().find(|m| !names.insert(m.name.as_str())) {
            return Err(Malformed::BadMetadata(format!(
                "two kernels are named {}",
                m.name
            )));
        }
        drop(names);
        let mut kernels: Vec<Kernel> = Vec::with_capacity(meta.kernels.len());
        for m in meta.kernels {
            let vaddr = symbols.get(m.symbol.as_bytes()).copied();
            kernels.push(kernel(&loaded, vaddr, m, gfx9)?);
        }
        let relocs = loaded.relocations()?;
        Ok(Self {
            target,
            version: loaded.abi_version + 2,
            target_id: meta.target,
            metadata_version: meta.version,
            kernels,
            image_size: loaded.image_size,
            alignment: loaded.alignment,
            base: loaded.base,
            segments: loaded.segments,
            relocs: relocs.relocs,
            undefined: relocs.undefined,
            file: bytes.to_vec(),
        })
    }

    /// What its `e_flags` say it runs on.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Its processor.
    pub fn processor(&self) -> Processor {
        self.target.processor
    }

    /// The metadata's `amdhsa.target`, such as `amdgcn-amd-amdhsa--gfx942:xnack-`.
    pub fn target_id(&self) -> &str {
        &self.target_id
    }

    /// The code object version: 4, 5 or 6.
    pub fn version(&self) -> u8 {
        self.version
    }

    /// The metadata's `amdhsa.version`: 1.1 for v4, 1.2 for v5 and v6.
    pub fn metadata_version(&self) -> [u32; 2] {
        self.metadata_version
    }

    /// Its kernels, in metadata order.
    pub fn kernels(&self) -> &[Kernel] {
        &self.kernels
    }

    /// The kernel named `name`.
    pub fn kernel(&self, name: &str) -> Option<&Kernel> {
        self.kernels.iter().find(|k| k.name == name)
    }

    /// Bytes of GPU memory the image takes: the span of its loadable segments, in whole
    /// 4 KiB pages.
    pub fn image_size(&self) -> u64 {
        self.image_size
    }

    /// The alignment a load address needs: 4096, or a segment's larger alignment.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Whether `gpu` runs it: its processor, each kernel's LDS, and its symbols.
    pub fn check(&self, gpu: &Gpu) -> Result<(), CodeObjectError> {
        if !self.target.processor.runs_on(gpu.processor) {
            return Err(CodeObjectError::WrongProcessor {
                object: self.target.processor.name(),
                gpu: gpu.name(),
            });
        }
        if let Some(k) = self
            .kernels
            .iter()
            .find(|k| k.group_segment_size() > gpu.lds_bytes)
        {
            return Err(CodeObjectError::TooMuchLds {
                kernel: k.name.clone(),
                needs: k.group_segment_size(),
                has: gpu.lds_bytes,
            });
        }
        if let Some(name) = self.undefined().next() {
            return Err(CodeObjectError::Undefined(name.to_string()));
        }
        Ok(())
    }

    /// Symbols its relocations need that it does not define, weak ones included (as ROCr's
    /// loader has it, a weak symbol resolves only to a variable the program defines, and rig
    /// defines none): each once, the first 16, names cut at 512 bytes.
    pub fn undefined(&self) -> impl Iterator<Item = &str> {
        self.undefined.iter().map(String::as_str)
    }

    /// Places the image for `load_address` into `out`, which must hold
    /// [`image_size`](Self::image_size) bytes: the segments' bytes, zeros elsewhere, and the
    /// relocations applied.
    pub fn place(&self, load_address: u64, out: &mut [u8]) -> Result<(), PlaceError> {
        let have = out.len();
        let out = usize::try_from(self.image_size)
            .ok()
            .and_then(|n| out.get_mut(..n))
            .ok_or(PlaceError::BufferShort {
                need: self.image_size,
                have,
            })?;
        let pieces = self.pieces()?.place(load_address)?;
        out.fill(0);
        for p in &pieces {
            // PANIC: every piece lies within the image (see `pieces`).
            let at = p.offset as usize;
            out[at..at + p.bytes.len()].copy_from_slice(&p.bytes);
        }
        Ok(())
    }

    /// The placed image for `load_address`, in a new buffer of
    /// [`image_size`](Self::image_size) bytes.
    pub fn placed(&self, load_address: u64) -> Result<Vec<u8>, PlaceError> {
        let need = usize::try_from(self.image_size).map_err(|_| PlaceError::BufferShort {
            need: self.image_size,
            have: 0,
        })?;
        let mut out = vec![0; need];
        self.place(load_address, &mut out)?;
        Ok(out)
    }

    /// The image's bytes that are not zero, for a loader that writes into memory that is
    /// zero already: the segments' file bytes and the words relocations write, merged into
    /// disjoint pieces. They take at most the file's size plus eight bytes a relocation,
    /// however large the image; the rest of the image (a segment's memory past its file
    /// bytes, gaps between segments) is zero and left out.
    ///
    /// The pieces are built for no load address yet: [`Pieces::place`] writes the
    /// relocations for one, which costs a few stores a relocation, so a loader can build
    /// them before it knows where the image goes.
    pub fn pieces(&self) -> Result<Pieces, PlaceError> {
        if let Some(name) = self.undefined().next() {
            return Err(PlaceError::Undefined(name.to_string()));
        }
        // Every range that holds bytes: segments' file bytes and relocated words.
        let mut ranges: Vec<(u64, u64)> = self
            .segments
            .iter()
            .filter(|s| !s.file.is_empty())
            .map(|s| (s.offset, s.offset + s.file.len() as u64))
            .chain(self.relocs.iter().map(|r| (r.offset, r.offset + 8)))
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (start, end) in ranges {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        let mut pieces: Vec<Piece> = merged
            .iter()
            .map(|&(start, end)| Piece {
                offset: start,
                // PANIC: parse bounded segments and relocations within the image, whose
                // size fits memory the caller could allocate.
                bytes: vec![0; (end - start) as usize],
            })
            .collect();
        // The piece holding image offset `at` (each range above lies in one piece).
        let piece_of = |at: u64| merged.partition_point(|&(start, _)| start <= at) - 1;
        for s in self.segments.iter().filter(|s| !s.file.is_empty()) {
            let p = &mut pieces[piece_of(s.offset)];
            // PANIC: the segment's range lies within the piece, and parse bounded its file
            // range within the file.
            let at = (s.offset - p.offset) as usize;
            p.bytes[at..at + s.file.len()].copy_from_slice(&self.file[s.file.clone()]);
        }
        let words = self
            .relocs
            .iter()
            .map(|r| {
                // Each value is `constant + scale * load address`, wrapping.
                let (s, s_scale) = match &r.target {
                    elf::Target::None | elf::Target::Undefined => (0, 0),
                    elf::Target::Image(offset) => (*offset, 1),
                    elf::Target::Absolute(v) => (*v, 0),
                };
                let (constant, scale) = match r.kind {
                    RelocKind::Abs64 => (s.wrapping_add_signed(r.addend), s_scale),
                    // P is load address + offset.
                    RelocKind::Rel64 => (
                        s.wrapping_add_signed(r.addend).wrapping_sub(r.offset),
                        s_scale - 1,
                    ),
                    // B is load address - base.
                    RelocKind::Relative64 => (
                        0u64.wrapping_sub(self.base).wrapping_add_signed(r.addend),
                        1,
                    ),
                };
                let piece = piece_of(r.offset);
                Word {
                    piece,
                    at: (r.offset - pieces[piece].offset) as usize,
                    constant,
                    scale,
                }
            })
            .collect();
        Ok(Pieces {
            alignment: self.alignment,
            pieces,
            words,
        })
    }
}

/// A piece of a placed image: `bytes` at image offset `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// Byte offset in the image.
    pub offset: u64,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// A relocated word: `constant + scale * load address` at byte `at` of piece `piece`.
#[derive(Debug, Clone)]
struct Word {
    piece: usize,
    at: usize,
    constant: u64,
    scale: i8,
}

/// The non-zero bytes of an image, for any load address ([`CodeObject::pieces`]).
#[derive(Debug, Clone)]
pub struct Pieces {
    alignment: u64,
    pieces: Vec<Piece>,
    words: Vec<Word>,
}

impl Pieces {
    /// Bytes the pieces hold.
    pub fn bytes(&self) -> u64 {
        self.pieces.iter().map(|p| p.bytes.len() as u64).sum()
    }

    /// The pieces for an image at `load_address`, its relocations written in their order
    /// (so a later one overlapping an earlier one wins, as a loader applying them in turn
    /// has it).
    pub fn place(mut self, load_address: u64) -> Result<Vec<Piece>, PlaceError> {
        if !load_address.is_multiple_of(self.alignment) {
            return Err(PlaceError::Misaligned {
                address: load_address,
                alignment: self.alignment,
            });
        }
        for w in &self.words {
            let value = match w.scale {
                0 => w.constant,
                1 => w.constant.wrapping_add(load_address),
                _ => w.constant.wrapping_sub(load_address),
            };
            // PANIC: `pieces` put each word's eight bytes within its piece.
            self.pieces[w.piece].bytes[w.at..w.at + 8].copy_from_slice(&value.to_le_bytes());
        }
        Ok(self.pieces)
    }
}

/// Builds a kernel from its metadata, its descriptor and its symbol, checking them together.
fn kernel(
    loaded: &elf::Loaded<'_>,
    vaddr: Option<u64>,
    m: metadata::KernelMeta,
    gfx9: bool,
) -> Result<Kernel, Malformed> {
    let fail = |why: String| Malformed::Kernel(m.name.clone(), why);
    let vaddr = vaddr.ok_or_else(|| Malformed::MissingDescriptor {
        kernel: m.name.clone(),
        symbol: m.symbol.clone(),
    })?;
    let descriptor_offset = loaded
        .image_range(vaddr, KernelDescriptor::SIZE as u64)
        .ok_or_else(|| fail("its descriptor lies outside the image".into()))?
        .start;
    if !descriptor_offset.is_multiple_of(64) {
        return Err(fail("its descriptor is not 64-byte aligned".into()));
    }
    let bytes = loaded
        .read::<{ KernelDescriptor::SIZE }>(descriptor_offset)
        .ok_or_else(|| fail("its descriptor lies outside the image".into()))?;
    let d = KernelDescriptor::from_bytes(&bytes);
    let code = descriptor_offset.checked_add_signed(d.kernel_code_entry_byte_offset);
    if !code.is_some_and(|c| c < loaded.image_size && c.is_multiple_of(256)) {
        return Err(fail(format!(
            "its code entry offset {} from the descriptor lies outside the image or is not 256-byte aligned",
            d.kernel_code_entry_byte_offset
        )));
    }
    for (what, meta, desc) in [
        (
            "group segment size",
            m.group_segment_fixed_size,
            d.group_segment_fixed_size,
        ),
        (
            "private segment size",
            m.private_segment_fixed_size,
            d.private_segment_fixed_size,
        ),
        (
            "kernarg segment size",
            m.kernarg_segment_size,
            d.kernarg_size,
        ),
    ] {
        if meta != desc {
            return Err(fail(format!(
                "the metadata's {what} ({meta}) differs from its descriptor's ({desc})"
            )));
        }
    }
    let wave64 = crate::hal::runs_wave64(gfx9, d.has(ENABLE_WAVEFRONT_SIZE32));
    let wave = if wave64 { 64 } else { 32 };
    if m.wavefront_size != wave {
        return Err(fail(format!(
            "the metadata's wavefront size {} differs from its descriptor's {wave}",
            m.wavefront_size
        )));
    }
    if m.max_flat_workgroup_size == 0 {
        return Err(fail("its .max_flat_workgroup_size is 0".into()));
    }
    if !m.kernarg_segment_align.is_power_of_two() {
        return Err(fail(format!(
            "its .kernarg_segment_align {} is not a power of two",
            m.kernarg_segment_align
        )));
    }
    let mut explicit_size = 0;
    for (i, a) in m.args.iter().enumerate() {
        let end = a.offset.checked_add(a.size);
        if end.is_none_or(|e| e > m.kernarg_segment_size) {
            return Err(fail(format!(
                "argument {i} (bytes {} to {}) lies outside its {}-byte kernarg segment",
                a.offset,
                u64::from(a.offset) + u64::from(a.size),
                m.kernarg_segment_size
            )));
        }
        if let ArgKind::Hidden(h) = &a.kind {
            if let Some(size) = h.size().filter(|&s| s != a.size) {
                return Err(fail(format!(
                    "hidden argument {i} ({h:?}) takes {} bytes, not {size}",
                    a.size
                )));
            }
        } else if a.kind.is_explicit() {
            explicit_size = explicit_size.max(a.offset + a.size);
        }
    }
    let plan = KernargPlan {
        explicit_size,
        size: m.kernarg_segment_size,
        align: m.kernarg_segment_align,
        hidden: HiddenLayout::from_args(&m.args),
    };
    Ok(Kernel {
        descriptor_offset,
        descriptor: d,
        args: m.args,
        max_threads: m.max_flat_workgroup_size,
        wave64,
        sgpr_count: m.sgpr_count,
        vgpr_count: m.vgpr_count,
        uses_dynamic_stack: m.uses_dynamic_stack,
        plan,
        name: m.name,
        symbol: m.symbol,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use elf::{Reloc, Target as Sym};

    const ADD: &[u8] = include_bytes!("../../../kernels/out/gfx1100/add.co");

    /// The committed objects hold RELATIVE64 and an undefined ABS64 only; this gives `add.co`
    /// one relocation of each kind and checks the values placed.
    #[test]
    fn each_relocation_kind_is_applied() {
        let mut co = CodeObject::parse(ADD).unwrap();
        let at = |i: u64| 0x2000 + 8 * i;
        let reloc = |i, kind, addend, target| Reloc {
            offset: at(i),
            kind,
            addend,
            target,
        };
        co.relocs = vec![
            reloc(0, RelocKind::Relative64, 0x40, Sym::None),
            reloc(1, RelocKind::Abs64, 8, Sym::Image(0x100)),
            reloc(2, RelocKind::Abs64, -1, Sym::Absolute(0x5000)),
            reloc(3, RelocKind::Rel64, 4, Sym::Image(0x100)),
        ];
        let load = 0x7000_0000_0000;
        let image = co.placed(load).unwrap();
        let word = |i: u64| {
            let o = at(i) as usize;
            u64::from_le_bytes(image[o..o + 8].try_into().unwrap())
        };
        assert_eq!(word(0), load + 0x40);
        assert_eq!(word(1), load + 0x108);
        assert_eq!(word(2), 0x4fff);
        assert_eq!(word(3), (0x100 + 4u64).wrapping_sub(at(3)));

        co.relocs
            .push(reloc(4, RelocKind::Abs64, 0, Sym::Undefined));
        co.undefined.push("strong".into());
        assert_eq!(co.undefined().collect::<Vec<_>>(), ["strong"]);
        assert_eq!(co.placed(load), Err(PlaceError::Undefined("strong".into())));
        let gpu = Gpu::by_name("gfx1100").unwrap();
        assert_eq!(
            co.check(gpu),
            Err(CodeObjectError::Undefined("strong".into()))
        );
    }

    #[test]
    fn placing_needs_an_aligned_address_and_room() {
        let co = CodeObject::parse(ADD).unwrap();
        assert_eq!(co.alignment(), 4096);
        assert_eq!(
            co.place(0x1800, &mut vec![0; co.image_size() as usize]),
            Err(PlaceError::Misaligned {
                address: 0x1800,
                alignment: 4096
            })
        );
        assert_eq!(
            co.place(0x1000, &mut [0; 100]),
            Err(PlaceError::BufferShort {
                need: co.image_size(),
                have: 100
            })
        );
        // The image is the file's loadable bytes at their offsets, zeros elsewhere.
        let image = co.placed(0).unwrap();
        let add = co.kernel("add").unwrap();
        let d = add.descriptor_offset() as usize;
        let bytes: &[u8; 64] = image[d..d + 64].try_into().unwrap();
        assert_eq!(&KernelDescriptor::from_bytes(bytes), add.descriptor());
    }

    /// `ADD` with its last loadable segment (by address) declaring `memsz` bytes of memory.
    fn with_memsz(memsz: u64) -> Vec<u8> {
        let mut f = ADD.to_vec();
        let u16_at = |f: &[u8], o: usize| u16::from_le_bytes([f[o], f[o + 1]]) as usize;
        let u64_at = |f: &[u8], o: usize| u64::from_le_bytes(f[o..o + 8].try_into().unwrap());
        let phoff = u64_at(&f, 0x20) as usize;
        let (size, count) = (u16_at(&f, 0x36), u16_at(&f, 0x38));
        let last = (0..count)
            .map(|i| phoff + i * size)
            .filter(|&p| u32::from_le_bytes(f[p..p + 4].try_into().unwrap()) == 1)
            .max_by_key(|&p| u64_at(&f, p + 16))
            .unwrap();
        f[last + 40..last + 48].copy_from_slice(&memsz.to_le_bytes());
        f
    }

    #[test]
    fn a_huge_segment_is_refused_from_the_headers_and_never_zero_filled() {
        let huge = with_memsz(0xf000_0000);
        assert_eq!(
            CodeObject::parse_within(&huge, 1 << 30).unwrap_err(),
            CodeObjectError::TooLarge {
                bytes: CodeObject::parse(&huge).unwrap().image_size(),
                limit: 1 << 30
            }
        );
        // Under the limit it parses, and its pieces are the file's bytes, not its span.
        let co = CodeObject::parse(&huge).unwrap();
        assert!(co.image_size() >= 0xf000_0000);
        let pieces = co.pieces().unwrap();
        assert!(pieces.bytes() <= ADD.len() as u64 + 8 * co.relocs.len() as u64);
        let small = CodeObject::parse(ADD).unwrap();
        let placed = small.placed(0x10_0000).unwrap();
        let mut rebuilt = vec![0; placed.len()];
        for p in small.pieces().unwrap().place(0x10_0000).unwrap() {
            rebuilt[p.offset as usize..][..p.bytes.len()].copy_from_slice(&p.bytes);
        }
        assert_eq!(rebuilt, placed);
        assert!(matches!(
            small.pieces().unwrap().place(0x10_0800),
            Err(PlaceError::Misaligned { .. })
        ));
    }
}
