//! The ELF half of the parser: header checks, loadable segments, the metadata note, symbols
//! and dynamic relocations, through `object`'s bounds-checked ELF reader.
//!
//! Everything read here is checked against the file's length and the image's span before
//! use, so arbitrary bytes give a [`Malformed`] and never a panic.

use std::collections::HashMap;
use std::ops::Range;

use object::LittleEndian as Le;
use object::elf::{self, FileHeader64, ProgramHeader64, Sym64};
use object::read::elf::{
    FileHeader as _, ProgramHeader as _, Rel as _, Rela as _, SectionHeader as _, SectionTable,
    Sym as _, SymbolTable,
};

use super::{CodeObjectError, MAX_IMAGE, Malformed};

/// `EM_AMDGPU`.
pub(crate) const EM_AMDGPU: u16 = 224;
/// `ELFOSABI_AMDGPU_HSA`.
const ELFOSABI_AMDGPU_HSA: u8 = 64;
/// Indices of `e_ident`.
const EI_CLASS: usize = 4;
const EI_DATA: usize = 5;
const EI_OSABI: usize = 7;
const EI_ABIVERSION: usize = 8;
/// `NT_AMDGPU_METADATA`.
const NT_AMDGPU_METADATA: u32 = 32;

/// `R_AMDGPU_NONE`.
const R_AMDGPU_NONE: u32 = 0;
/// `R_AMDGPU_ABS64`: S + A.
const R_AMDGPU_ABS64: u32 = 3;
/// `R_AMDGPU_REL64`: S + A - P.
const R_AMDGPU_REL64: u32 = 5;
/// `R_AMDGPU_RELATIVE64`: B + A.
const R_AMDGPU_RELATIVE64: u32 = 13;

// The page the image is laid out in: segments start and the image ends on one.
use crate::PAGE_BYTES as PAGE;

type Elf64 = FileHeader64<Le>;

/// A loadable segment, placed at `offset` in the image.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    /// Byte offset in the image.
    pub offset: u64,
    /// Where its bytes lie in the file; the rest of `mem_size` is zero.
    pub file: Range<usize>,
    /// Bytes the segment takes in the image.
    pub mem_size: u64,
}

/// What a relocation's symbol resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// No symbol (index 0): S is 0.
    None,
    /// A symbol in the image, at this image offset.
    Image(u64),
    /// An absolute symbol.
    Absolute(u64),
    /// A symbol the object does not define (its name is kept once, in
    /// [`Relocations::undefined`], never per relocation).
    Undefined,
}

/// The three relocations a loader applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RelocKind {
    /// S + A.
    Abs64,
    /// S + A - P.
    Rel64,
    /// B + A, B the load address less the image's first virtual address.
    Relative64,
}

/// A dynamic relocation: eight bytes at `offset` in the image.
#[derive(Debug, Clone)]
pub(crate) struct Reloc {
    pub offset: u64,
    pub kind: RelocKind,
    pub addend: i64,
    pub target: Target,
}

/// The dynamic relocations, and the names of the undefined symbols they need.
#[derive(Debug, Default)]
pub(crate) struct Relocations {
    pub relocs: Vec<Reloc>,
    /// The first [`MAX_UNDEFINED_NAMES`] undefined symbols named, each once, shown to
    /// [`MAX_NAME_SHOWN`] bytes.
    pub undefined: Vec<String>,
}

/// Undefined symbols whose names a code object keeps (one is enough to refuse it).
pub(crate) const MAX_UNDEFINED_NAMES: usize = 16;

/// Bytes of a symbol's name an error shows; the rest is cut (names are the client's).
pub(crate) const MAX_NAME_SHOWN: usize = 512;

/// A symbol's name for a message: lossy UTF-8, cut at [`MAX_NAME_SHOWN`] bytes.
pub(crate) fn shown(name: &[u8]) -> String {
    let cut = name.len() > MAX_NAME_SHOWN;
    let mut s = String::from_utf8_lossy(&name[..name.len().min(MAX_NAME_SHOWN)]).into_owned();
    if cut {
        s.push_str(&format!("... ({} bytes)", name.len()));
    }
    s
}

/// The parts of the ELF file the code object keeps.
#[derive(Debug)]
pub(crate) struct Loaded<'d> {
    pub e_flags: u32,
    /// `EI_ABIVERSION`: 2, 3, 4 for code object v4, v5, v6.
    pub abi_version: u8,
    /// The first virtual address of the image (page-aligned).
    pub base: u64,
    pub image_size: u64,
    pub alignment: u64,
    pub segments: Vec<Segment>,
    pub metadata: &'d [u8],
    data: &'d [u8],
    sections: SectionTable<'d, Elf64, &'d [u8]>,
}

fn elf_err(e: object::read::Error) -> Malformed {
    Malformed::Elf(e.to_string())
}

/// Checks the identification and header fields, then reads segments and the metadata note.
/// An image whose segments span more than `max_image` bytes is refused from the program
/// headers alone, before anything is read or allocated for it.
pub(crate) fn load(data: &[u8], max_image: u64) -> Result<Loaded<'_>, CodeObjectError> {
    if data.len() < 64 {
        if data.len() < 4 || data[..4] != elf::ELFMAG {
            return Err(Malformed::NotElf.into());
        }
        return Err(Malformed::TooShort(data.len()).into());
    }
    // PANIC: the header's 64 bytes are there, so e_ident's indices are.
    if data[..4] != elf::ELFMAG {
        return Err(Malformed::NotElf.into());
    }
    if data[EI_CLASS] != elf::ELFCLASS64 {
        return Err(Malformed::Not64.into());
    }
    if data[EI_DATA] != elf::ELFDATA2LSB {
        return Err(Malformed::NotLittleEndian.into());
    }
    let header = Elf64::parse(data).map_err(elf_err)?;
    let e = Le;
    if header.e_machine(e) != EM_AMDGPU {
        return Err(Malformed::Machine(header.e_machine(e)).into());
    }
    if header.e_type(e) != elf::ET_DYN {
        return Err(Malformed::Type(header.e_type(e)).into());
    }
    let osabi = data[EI_OSABI];
    if osabi != ELFOSABI_AMDGPU_HSA {
        return Err(Malformed::OsAbi(osabi).into());
    }
    let abi_version = data[EI_ABIVERSION];
    if !(2..=4).contains(&abi_version) {
        return Err(Malformed::Version(abi_version).into());
    }
    let phdrs = header.program_headers(e, data).map_err(elf_err)?;
    let (base, image_size, alignment, segments) = segments(data, phdrs, max_image)?;
    let sections = header.sections(e, data).map_err(elf_err)?;
    let metadata = metadata_note(data, phdrs, &sections)?;
    Ok(Loaded {
        e_flags: header.e_flags(e),
        abi_version,
        base,
        image_size,
        alignment,
        segments,
        metadata,
        data,
        sections,
    })
}

type Layout = (u64, u64, u64, Vec<Segment>);

fn segments(
    data: &[u8],
    phdrs: &[ProgramHeader64<Le>],
    max_image: u64,
) -> Result<Layout, CodeObjectError> {
    let e = Le;
    let loads: Vec<_> = phdrs
        .iter()
        .filter(|p| p.p_type(e) == elf::PT_LOAD)
        .collect();
    let base = loads
        .iter()
        .map(|p| p.p_vaddr(e))
        .min()
        .ok_or(Malformed::NoLoad)?
        & !(PAGE - 1);
    // The span first, from the headers alone: nothing is allocated for an image too large.
    let span = loads
        .iter()
        .map(|p| p.p_vaddr(e).saturating_add(p.p_memsz(e)) - base)
        .max()
        .unwrap_or(0)
        .div_ceil(PAGE)
        .saturating_mul(PAGE);
    // Past MAX_IMAGE a span is malformed (the loop below says which segment), not large.
    if span > max_image && span <= MAX_IMAGE {
        return Err(CodeObjectError::TooLarge {
            bytes: span,
            limit: max_image,
        });
    }
    let mut end = base;
    let mut alignment = PAGE;
    let mut out = Vec::with_capacity(loads.len());
    for (i, p) in loads.iter().enumerate() {
        let seg = |why: &str| Malformed::Segment(format!("loadable segment {i} {why}"));
        let (vaddr, mem_size, file_size) = (p.p_vaddr(e), p.p_memsz(e), p.p_filesz(e));
        if file_size > mem_size {
            return Err(seg("has more file bytes than memory bytes").into());
        }
        let seg_end = vaddr
            .checked_add(mem_size)
            .filter(|&x| x - base <= MAX_IMAGE)
            .ok_or_else(|| seg("ends past 4 GiB of image"))?;
        let align = p.p_align(e);
        if align > 1 {
            if !align.is_power_of_two() || align > MAX_IMAGE {
                return Err(seg("has an invalid alignment").into());
            }
            alignment = alignment.max(align);
        }
        // Checked within the file here, so later slicing of the file cannot fail.
        let bytes = p.data(e, data).map_err(|_| seg("lies outside the file"))?;
        let start = p.p_offset(e) as usize;
        end = end.max(seg_end);
        out.push(Segment {
            offset: vaddr - base,
            file: start..start + bytes.len(),
            mem_size,
        });
    }
    out.sort_by_key(|s| s.offset);
    if out
        .windows(2)
        .any(|w| w[0].offset + w[0].mem_size > w[1].offset)
    {
        return Err(Malformed::Segment("two loadable segments overlap".into()).into());
    }
    let image_size = (end - base).div_ceil(PAGE) * PAGE;
    Ok((base, image_size, alignment, out))
}

/// The descriptor bytes of the first `NT_AMDGPU_METADATA` note named `AMDGPU`, from the
/// `PT_NOTE` segments or else the `SHT_NOTE` sections.
fn metadata_note<'d>(
    data: &'d [u8],
    phdrs: &'d [ProgramHeader64<Le>],
    sections: &SectionTable<'d, Elf64, &'d [u8]>,
) -> Result<&'d [u8], Malformed> {
    let e = Le;
    let is_metadata = |name: &[u8], n_type: u32| name == b"AMDGPU" && n_type == NT_AMDGPU_METADATA;
    for p in phdrs {
        if let Some(mut notes) = p.notes(e, data).map_err(elf_err)? {
            while let Some(note) = notes.next().map_err(elf_err)? {
                if is_metadata(note.name(), note.n_type(e)) {
                    return Ok(note.desc());
                }
            }
        }
    }
    for s in sections.iter() {
        if let Some(mut notes) = s.notes(e, data).map_err(elf_err)? {
            while let Some(note) = notes.next().map_err(elf_err)? {
                if is_metadata(note.name(), note.n_type(e)) {
                    return Ok(note.desc());
                }
            }
        }
    }
    Err(Malformed::NoMetadata)
}

impl<'d> Loaded<'d> {
    /// The image offset of virtual address `vaddr` if `len` bytes from it lie in the image.
    pub fn image_range(&self, vaddr: u64, len: u64) -> Option<Range<u64>> {
        let start = vaddr.checked_sub(self.base)?;
        let end = start.checked_add(len)?;
        (end <= self.image_size).then_some(start..end)
    }

    /// The `N` bytes at image offset `offset` as the image holds them once placed.
    pub fn read<const N: usize>(&self, offset: u64) -> Option<[u8; N]> {
        let end = offset.checked_add(N as u64)?;
        if end > self.image_size {
            return None;
        }
        let mut out = [0; N];
        for s in &self.segments {
            // PANIC: `segments` checked the range within the file.
            let bytes = &self.data[s.file.clone()];
            let (lo, hi) = (s.offset, s.offset + bytes.len() as u64);
            let (from, to) = (offset.max(lo), end.min(hi));
            if from < to {
                let src = &bytes[(from - lo) as usize..(to - lo) as usize];
                out[(from - offset) as usize..(to - offset) as usize].copy_from_slice(src);
            }
        }
        Some(out)
    }

    /// The values (virtual addresses) of the defined symbols, by name: the dynamic table's,
    /// then the static table's for names the dynamic one lacks.
    pub fn symbols(&self) -> Result<HashMap<&'d [u8], u64>, Malformed> {
        let e = Le;
        let mut out = HashMap::new();
        for sh_type in [elf::SHT_DYNSYM, elf::SHT_SYMTAB] {
            let table = self
                .sections
                .symbols(e, self.data, sh_type)
                .map_err(elf_err)?;
            for sym in table.iter() {
                if sym.st_shndx(e) == elf::SHN_UNDEF {
                    continue;
                }
                if let Ok(name) = table.symbol_name(e, sym) {
                    out.entry(name).or_insert(sym.st_value(e));
                }
            }
        }
        Ok(out)
    }

    /// The dynamic relocations: those of allocated `SHT_RELA`/`SHT_REL` sections. The linker
    /// applied the static ones already. Sections may overlap in the file, so their entries
    /// are counted first: more than the file has bytes for (one a 16 bytes, `Elf64_Rel`'s
    /// size) is refused before anything is allocated for them.
    pub fn relocations(&self) -> Result<Relocations, Malformed> {
        let e = Le;
        let allocated = || {
            self.sections
                .iter()
                .filter(|s| s.sh_flags(e) & u64::from(elf::SHF_ALLOC) != 0)
        };
        let mut count = 0usize;
        for s in allocated() {
            if let Some((relas, _)) = s.rela(e, self.data).map_err(elf_err)? {
                count = count.saturating_add(relas.len());
            } else if let Some((rels, _)) = s.rel(e, self.data).map_err(elf_err)? {
                count = count.saturating_add(rels.len());
            }
        }
        let most = self.data.len() / 16;
        if count > most {
            return Err(Malformed::Relocation(format!(
                "sections hold {count} entries, more than a {}-byte file has room for ({most}): they overlap",
                self.data.len()
            )));
        }
        let mut out = Relocations {
            relocs: Vec::with_capacity(count),
            undefined: Vec::new(),
        };
        // (symbol table, index) of the undefined symbols named so far, for `undefined`.
        let mut seen: Vec<(usize, u32)> = Vec::new();
        for s in allocated() {
            let mut add =
                |r: Option<Reloc>,
                 link: usize,
                 sym: u32,
                 table: &Option<SymbolTable<'d, Elf64, &'d [u8]>>| {
                    let Some(r) = r else { return };
                    if r.target == Target::Undefined
                        && seen.len() < MAX_UNDEFINED_NAMES
                        && !seen.contains(&(link, sym))
                    {
                        seen.push((link, sym));
                        out.undefined.push(self.symbol_name(table, sym));
                    }
                    out.relocs.push(r);
                };
            if let Some((relas, link)) = s.rela(e, self.data).map_err(elf_err)? {
                let table = self.linked_symbols(link)?;
                for r in relas {
                    let (offset, ty, sym) = (r.r_offset(e), r.r_type(e, false), r.r_sym(e, false));
                    let reloc = self.reloc(offset, ty, sym, Some(r.r_addend(e)), &table)?;
                    add(reloc, link.0, sym, &table);
                }
            } else if let Some((rels, link)) = s.rel(e, self.data).map_err(elf_err)? {
                let table = self.linked_symbols(link)?;
                for r in rels {
                    let (offset, ty, sym) = (r.r_offset(e), r.r_type(e), r.r_sym(e));
                    let reloc = self.reloc(offset, ty, sym, None, &table)?;
                    add(reloc, link.0, sym, &table);
                }
            }
        }
        Ok(out)
    }

    /// Symbol `sym`'s name in `table`, for a message.
    fn symbol_name(&self, table: &Option<SymbolTable<'d, Elf64, &'d [u8]>>, sym: u32) -> String {
        let name = table.as_ref().and_then(|t| {
            let s = t.symbol(object::SymbolIndex(sym as usize)).ok()?;
            t.symbol_name(Le, s).ok()
        });
        shown(name.unwrap_or(b"?"))
    }

    fn linked_symbols(
        &self,
        link: object::SectionIndex,
    ) -> Result<Option<SymbolTable<'d, Elf64, &'d [u8]>>, Malformed> {
        if link.0 == 0 {
            return Ok(None);
        }
        self.sections
            .symbol_table_by_index(Le, self.data, link)
            .map(Some)
            .map_err(elf_err)
    }

    fn reloc(
        &self,
        vaddr: u64,
        ty: u32,
        sym: u32,
        addend: Option<i64>,
        table: &Option<SymbolTable<'d, Elf64, &'d [u8]>>,
    ) -> Result<Option<Reloc>, Malformed> {
        let kind = match ty {
            R_AMDGPU_NONE => return Ok(None),
            R_AMDGPU_ABS64 => RelocKind::Abs64,
            R_AMDGPU_REL64 => RelocKind::Rel64,
            R_AMDGPU_RELATIVE64 => RelocKind::Relative64,
            _ => {
                return Err(Malformed::Relocation(format!(
                    "type {ty} at {vaddr:#x} is not supported"
                )));
            }
        };
        let offset = self
            .image_range(vaddr, 8)
            .ok_or_else(|| Malformed::Relocation(format!("at {vaddr:#x} lies outside the image")))?
            .start;
        // SHT_REL keeps the addend in the bytes the relocation rewrites.
        let addend = match addend {
            Some(a) => a,
            None => i64::from_le_bytes(self.read::<8>(offset).unwrap_or_default()),
        };
        let target = if sym == 0 || kind == RelocKind::Relative64 {
            Target::None
        } else {
            let table = table.as_ref().ok_or_else(|| {
                Malformed::Relocation(format!(
                    "at {vaddr:#x} names a symbol but has no symbol table"
                ))
            })?;
            let s: &Sym64<Le> = table
                .symbol(object::SymbolIndex(sym as usize))
                .map_err(elf_err)?;
            self.resolve(table, s)?
        };
        Ok(Some(Reloc {
            offset,
            kind,
            addend,
            target,
        }))
    }

    fn resolve(
        &self,
        table: &SymbolTable<'d, Elf64, &'d [u8]>,
        s: &Sym64<Le>,
    ) -> Result<Target, Malformed> {
        let e = Le;
        let name = || shown(table.symbol_name(e, s).unwrap_or(b"?"));
        Ok(match s.st_shndx(e) {
            // Weak ones too: ROCr's loader resolves an undefined symbol only against
            // variables the program defined, weak or not, and rig defines none.
            elf::SHN_UNDEF => Target::Undefined,
            elf::SHN_ABS => Target::Absolute(s.st_value(e)),
            _ => Target::Image(
                self.image_range(s.st_value(e), 0)
                    .ok_or_else(|| {
                        Malformed::Relocation(format!("symbol {} lies outside the image", name()))
                    })?
                    .start,
            ),
        })
    }
}
