//! The `NT_AMDGPU_METADATA` note: a msgpack map that describes each kernel.
//!
//! Keys and value kinds from LLVM AMDGPUUsage, "Code Object V3 Metadata" and its v4/v5
//! amendments (`amdhsa.version`, `amdhsa.target`, `amdhsa.kernels`). This module turns the
//! map into plain structs and classifies each argument; it checks types and presence of the
//! keys rig needs, and leaves the cross-checks with the ELF (symbols, descriptors) to the
//! caller.
//!
//! The note is the client's: it is read in place, never as a tree, so skipping what rig does
//! not read allocates nothing, and what rig keeps is bounded ([`MAX_KERNELS`], [`MAX_ARGS`],
//! [`MAX_STRING`], [`MAX_DEPTH`]).

use super::Malformed as Why;

/// A grid axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Axis {
    /// x, the fastest-varying.
    X,
    /// y.
    Y,
    /// z.
    Z,
}

impl Axis {
    /// The axis's index: 0, 1, 2.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A hidden (implicit) argument: one the runtime, not the caller, supplies.
///
/// rig supplies the grid's geometry and the launch's dynamic LDS size. Everything else is a
/// runtime's service (`Other`), which rig does not provide, so it refuses such a kernel:
/// `printf_buffer`, `hostcall_buffer`, `multigrid_sync_arg`, `heap_v1`, `default_queue`,
/// `completion_action`, `queue_ptr`, `private_base`, `shared_base`, and any kind this parser
/// does not know.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Hidden {
    /// `hidden_block_count_*`: groups along the axis (u32).
    BlockCount(Axis),
    /// `hidden_group_size_*`: work-items of a group along the axis (u16).
    GroupSize(Axis),
    /// `hidden_remainder_*`: work-items of the last, partial group along the axis (u16).
    Remainder(Axis),
    /// `hidden_global_offset_*`: the grid's first work-item along the axis (u64).
    GlobalOffset(Axis),
    /// `hidden_grid_dims`: the grid's dimensions, 1 to 3 (u16).
    GridDims,
    /// `hidden_dynamic_lds_size`: bytes of LDS the launch adds to the static group segment (u32).
    DynamicLdsSize,
    /// A runtime's service, named by its value kind without `hidden_`, such as `printf_buffer`.
    Other(String),
}

impl Hidden {
    /// The argument's size in bytes for the kinds rig supplies, `None` for `Other`.
    pub fn size(&self) -> Option<u32> {
        match self {
            Self::BlockCount(_) | Self::DynamicLdsSize => Some(4),
            Self::GroupSize(_) | Self::Remainder(_) | Self::GridDims => Some(2),
            Self::GlobalOffset(_) => Some(8),
            Self::Other(_) => None,
        }
    }

    /// Its value kind without `hidden_`, such as `block_count_x` or `printf_buffer`.
    pub fn name(&self) -> String {
        let axis = |a: &Axis| match a {
            Axis::X => 'x',
            Axis::Y => 'y',
            Axis::Z => 'z',
        };
        match self {
            Self::BlockCount(a) => format!("block_count_{}", axis(a)),
            Self::GroupSize(a) => format!("group_size_{}", axis(a)),
            Self::Remainder(a) => format!("remainder_{}", axis(a)),
            Self::GlobalOffset(a) => format!("global_offset_{}", axis(a)),
            Self::GridDims => "grid_dims".into(),
            Self::DynamicLdsSize => "dynamic_lds_size".into(),
            Self::Other(name) => name.clone(),
        }
    }

    fn from_kind(kind: &str) -> Option<Self> {
        let rest = kind.strip_prefix("hidden_")?;
        let axis = |s: &str| match s {
            "x" => Some(Axis::X),
            "y" => Some(Axis::Y),
            "z" => Some(Axis::Z),
            _ => None,
        };
        let with_axis = |prefix: &str| rest.strip_prefix(prefix).and_then(axis);
        Some(if let Some(a) = with_axis("block_count_") {
            Self::BlockCount(a)
        } else if let Some(a) = with_axis("group_size_") {
            Self::GroupSize(a)
        } else if let Some(a) = with_axis("remainder_") {
            Self::Remainder(a)
        } else if let Some(a) = with_axis("global_offset_") {
            Self::GlobalOffset(a)
        } else if rest == "grid_dims" {
            Self::GridDims
        } else if rest == "dynamic_lds_size" {
            Self::DynamicLdsSize
        } else {
            Self::Other(rest.to_string())
        })
    }
}

/// What an argument is, from its `.value_kind`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ArgKind {
    /// `by_value`: bytes the caller passes.
    ByValue,
    /// `global_buffer`: a global pointer the caller passes.
    GlobalBuffer,
    /// `dynamic_shared_pointer`: an LDS offset the caller passes (OpenCL `__local` pointer).
    DynamicSharedPointer,
    /// `sampler`, `image`, `pipe`, `queue`, or a kind this parser does not know: an explicit
    /// argument rig passes as the caller's bytes.
    OtherExplicit(String),
    /// `hidden_none`: padding the kernel does not read.
    HiddenNone,
    /// A hidden argument the kernel reads.
    Hidden(Hidden),
}

impl ArgKind {
    fn from_kind(kind: &str) -> Self {
        match kind {
            "by_value" => Self::ByValue,
            "global_buffer" => Self::GlobalBuffer,
            "dynamic_shared_pointer" => Self::DynamicSharedPointer,
            "hidden_none" => Self::HiddenNone,
            _ => match Hidden::from_kind(kind) {
                Some(h) => Self::Hidden(h),
                None => Self::OtherExplicit(kind.to_string()),
            },
        }
    }

    /// The `.value_kind` string it was read from, such as `hidden_block_count_x`.
    pub fn value_kind(&self) -> String {
        match self {
            Self::ByValue => "by_value".into(),
            Self::GlobalBuffer => "global_buffer".into(),
            Self::DynamicSharedPointer => "dynamic_shared_pointer".into(),
            Self::OtherExplicit(kind) => kind.clone(),
            Self::HiddenNone => "hidden_none".into(),
            Self::Hidden(h) => format!("hidden_{}", h.name()),
        }
    }

    /// Whether the caller passes it (not hidden).
    pub fn is_explicit(&self) -> bool {
        !matches!(self, Self::HiddenNone | Self::Hidden(_))
    }
}

/// One kernel argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg {
    /// The source's name for it (`.name`), if the compiler kept one.
    pub name: Option<String>,
    /// Byte offset in the kernarg segment.
    pub offset: u32,
    /// Bytes.
    pub size: u32,
    /// What it is.
    pub kind: ArgKind,
    /// `.address_space` of a pointer, such as `global`.
    pub address_space: Option<String>,
}

/// One entry of `amdhsa.kernels`.
#[derive(Debug, Clone)]
pub(crate) struct KernelMeta {
    pub name: String,
    pub symbol: String,
    pub args: Vec<Arg>,
    pub group_segment_fixed_size: u32,
    pub private_segment_fixed_size: u32,
    pub kernarg_segment_size: u32,
    pub kernarg_segment_align: u32,
    pub wavefront_size: u32,
    pub max_flat_workgroup_size: u32,
    pub sgpr_count: u32,
    pub vgpr_count: u32,
    pub uses_dynamic_stack: bool,
}

/// The whole note.
#[derive(Debug, Clone)]
pub(crate) struct Metadata {
    /// `amdhsa.version`: [1, 1] for v4, [1, 2] for v5 and v6.
    pub version: [u32; 2],
    /// `amdhsa.target`, such as `amdgcn-amd-amdhsa--gfx1100`.
    pub target: String,
    pub kernels: Vec<KernelMeta>,
}

/// Deeper maps than the metadata's own (about four levels) are malformed; the bound keeps
/// the decoder's recursion small.
pub const MAX_DEPTH: usize = 16;

/// The most kernels one code object's metadata may list. Large libraries hold a few
/// thousand per code object; each kernel rig reads costs a few hundred bytes kept.
pub const MAX_KERNELS: usize = 4096;

/// The most arguments one kernel may list, hidden ones included (a kernarg segment of
/// 4 KiB holds at most 4096 one-byte arguments; real kernels have tens).
pub const MAX_ARGS: usize = 1024;

/// The longest string rig keeps from the metadata (a kernel's name, symbol, argument
/// name, value kind, address space, the target): mangled C++ names run to a few hundred
/// bytes.
pub const MAX_STRING: usize = 4096;

fn bad(msg: String) -> Why {
    Why::BadMetadata(msg)
}

fn limit(what: String, limit: &'static str, value: usize) -> Why {
    Why::Limit {
        what,
        limit,
        value: value as u64,
    }
}

/// One msgpack item's head: scalars with their value, strings borrowed from the input,
/// containers with their count (their items follow).
#[derive(Debug, Clone, Copy)]
enum Token<'a> {
    Nil,
    Bool(bool),
    Uint(u64),
    Int(i64),
    Float,
    Str(&'a [u8]),
    Bin,
    Ext,
    Array(u32),
    Map(u32),
}

/// A msgpack reader over the note's bytes that allocates nothing: it borrows strings from
/// the input and skips what rig does not read. A container's count is checked against the
/// bytes left (each item takes at least one) before anything is sized from it.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Why> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(Why::BadMsgpack(format!(
                "a value at byte {} needs {n} bytes; {} are left",
                self.pos,
                self.buf.len() - self.pos
            )));
        };
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn be(&mut self, n: usize) -> Result<u64, Why> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |v, &b| (v << 8) | u64::from(b)))
    }

    fn container(&mut self, count: u64, per_item: u64) -> Result<u64, Why> {
        let left = (self.buf.len() - self.pos) as u64;
        if count.saturating_mul(per_item) > left {
            return Err(Why::BadMsgpack(format!(
                "a container at byte {} declares {count} entries in {left} bytes",
                self.pos
            )));
        }
        Ok(count)
    }

    fn next(&mut self) -> Result<Token<'a>, Why> {
        let m = self.take(1)?[0];
        let len = |r: &mut Self, n: usize| r.be(n).map(|v| v as usize);
        Ok(match m {
            0x00..=0x7f => Token::Uint(u64::from(m)),
            0xe0..=0xff => Token::Int(i64::from(m as i8)),
            0x80..=0x8f => Token::Map(self.container(u64::from(m & 0x0f), 2)? as u32),
            0x90..=0x9f => Token::Array(self.container(u64::from(m & 0x0f), 1)? as u32),
            0xa0..=0xbf => Token::Str(self.take(usize::from(m & 0x1f))?),
            0xc0 => Token::Nil,
            0xc2 => Token::Bool(false),
            0xc3 => Token::Bool(true),
            0xc4..=0xc6 => {
                let n = len(self, 1 << (m - 0xc4))?;
                self.take(n)?;
                Token::Bin
            }
            0xc7..=0xc9 => {
                let n = len(self, 1 << (m - 0xc7))?;
                self.take(1 + n)?;
                Token::Ext
            }
            0xca => {
                self.take(4)?;
                Token::Float
            }
            0xcb => {
                self.take(8)?;
                Token::Float
            }
            0xcc..=0xcf => Token::Uint(self.be(1 << (m - 0xcc))?),
            0xd0..=0xd3 => {
                let n = 1usize << (m - 0xd0);
                let v = self.be(n)?;
                let shift = 64 - 8 * n as u32;
                Token::Int(((v << shift) as i64) >> shift)
            }
            0xd4..=0xd8 => {
                self.take(1 + (1 << (m - 0xd4)))?;
                Token::Ext
            }
            0xd9..=0xdb => {
                let n = len(self, 1 << (m - 0xd9))?;
                Token::Str(self.take(n)?)
            }
            0xdc | 0xdd => {
                let n = self.be(if m == 0xdc { 2 } else { 4 })?;
                Token::Array(self.container(n, 1)? as u32)
            }
            0xde | 0xdf => {
                let n = self.be(if m == 0xde { 2 } else { 4 })?;
                Token::Map(self.container(n, 2)? as u32)
            }
            0xc1 => {
                return Err(Why::BadMsgpack(format!(
                    "byte {} is 0xc1, which msgpack never uses",
                    self.pos - 1
                )));
            }
        })
    }

    /// Skips the items of a container whose head was `t`, `depth` levels down.
    fn skip_items(&mut self, t: Token<'a>, depth: usize) -> Result<(), Why> {
        let items = match t {
            Token::Array(n) => u64::from(n),
            Token::Map(n) => 2 * u64::from(n),
            _ => return Ok(()),
        };
        if depth >= MAX_DEPTH {
            return Err(Why::BadMsgpack(format!(
                "it nests deeper than {MAX_DEPTH} levels (rig_amd::code_object::MAX_DEPTH)"
            )));
        }
        for _ in 0..items {
            let t = self.next()?;
            self.skip_items(t, depth + 1)?;
        }
        Ok(())
    }

    /// The bytes of the next whole value, `depth` levels down, checked and skipped.
    fn value(&mut self, depth: usize) -> Result<&'a [u8], Why> {
        let start = self.pos;
        let t = self.next()?;
        self.skip_items(t, depth)?;
        Ok(&self.buf[start..self.pos])
    }

    /// Reads a map whose head was `t` (`depth` levels down), keeping the first value of
    /// each of `keys` as its bytes; other entries are checked and skipped.
    fn fields<const N: usize>(
        &mut self,
        entries: u32,
        keys: [&str; N],
        depth: usize,
    ) -> Result<[Option<&'a [u8]>; N], Why> {
        if depth >= MAX_DEPTH {
            return Err(Why::BadMsgpack(format!(
                "it nests deeper than {MAX_DEPTH} levels (rig_amd::code_object::MAX_DEPTH)"
            )));
        }
        let mut out = [None; N];
        for _ in 0..entries {
            let k = self.next()?;
            let slot = match k {
                Token::Str(s) => keys.iter().position(|k| k.as_bytes() == s),
                _ => {
                    self.skip_items(k, depth + 1)?;
                    None
                }
            };
            let v = self.value(depth + 1)?;
            if let Some(i) = slot {
                out[i].get_or_insert(v);
            }
        }
        Ok(out)
    }
}

/// The head of a value kept as bytes by [`Reader::fields`].
fn head(bytes: &[u8]) -> Result<(Token<'_>, Reader<'_>), Why> {
    let mut r = Reader::new(bytes);
    let t = r.next()?;
    Ok((t, r))
}

/// Field reader for one map's kept values, naming `what` (such as `kernel 'add'`) in its
/// errors.
struct Fields<'a, 'w, const N: usize> {
    keys: [&'static str; N],
    values: [Option<&'a [u8]>; N],
    what: &'w str,
}

impl<'a, const N: usize> Fields<'a, '_, N> {
    fn get(&self, key: &str) -> Option<&'a [u8]> {
        // PANIC: callers ask only for keys they listed.
        self.values[self
            .keys
            .iter()
            .position(|k| *k == key)
            .expect("a listed key")]
    }

    fn opt_u32(&self, key: &str) -> Result<Option<u32>, Why> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let n = match head(v)?.0 {
            Token::Uint(n) => u32::try_from(n).ok(),
            Token::Int(n) => u32::try_from(n).ok(),
            _ => None,
        };
        n.map(Some).ok_or_else(|| {
            bad(format!(
                "{}: {key} is not a 32-bit unsigned integer",
                self.what
            ))
        })
    }

    fn u32(&self, key: &str) -> Result<u32, Why> {
        self.opt_u32(key)?
            .ok_or_else(|| bad(format!("{}: {key} is missing", self.what)))
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>, Why> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match head(v)?.0 {
            Token::Bool(b) => Ok(Some(b)),
            _ => Err(bad(format!("{}: {key} is not a boolean", self.what))),
        }
    }

    fn opt_str(&self, key: &str) -> Result<Option<&'a str>, Why> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let s = match head(v)?.0 {
            Token::Str(s) => std::str::from_utf8(s).ok(),
            _ => None,
        };
        let s = s.ok_or_else(|| bad(format!("{}: {key} is not a string", self.what)))?;
        if s.len() > MAX_STRING {
            return Err(limit(
                format!("{}: {key} is {} bytes long", self.what, s.len()),
                "rig_amd::code_object::MAX_STRING",
                MAX_STRING,
            ));
        }
        Ok(Some(s))
    }

    fn str(&self, key: &str) -> Result<&'a str, Why> {
        self.opt_str(key)?
            .ok_or_else(|| bad(format!("{}: {key} is missing", self.what)))
    }

    /// The array at `key` as its count and a reader at its first item, if present.
    fn opt_array(&self, key: &str) -> Result<Option<(u32, Reader<'a>)>, Why> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match head(v)? {
            (Token::Array(n), r) => Ok(Some((n, r))),
            _ => Err(bad(format!("{}: {key} is not an array", self.what))),
        }
    }
}

/// Parses the note's descriptor bytes. Nothing is allocated for what rig does not read, and
/// what it keeps is bounded by [`MAX_KERNELS`], [`MAX_ARGS`] and [`MAX_STRING`], each
/// item of it taken from input bytes of its own (so the result is a small multiple of the
/// note's size).
pub(crate) fn parse(desc: &[u8]) -> Result<Metadata, Why> {
    let mut r = Reader::new(desc);
    let Token::Map(n) = r.next()? else {
        return Err(bad("the root is not a map".into()));
    };
    let keys = ["amdhsa.version", "amdhsa.target", "amdhsa.kernels"];
    let top = Fields {
        keys,
        values: r.fields(n, keys, 0)?,
        what: "metadata",
    };
    let two = "amdhsa.version is missing or not two integers";
    let version = match top
        .opt_array("amdhsa.version")
        .map_err(|_| bad(two.into()))?
    {
        Some((2, mut v)) => {
            let mut part = || match v.next()? {
                Token::Uint(n) => Ok(u32::try_from(n).ok()),
                Token::Int(n) => Ok(u32::try_from(n).ok()),
                _ => Ok(None),
            };
            match (part()?, part()?) {
                (Some(a), Some(b)) => [a, b],
                _ => return Err(bad("amdhsa.version is not two integers".into())),
            }
        }
        _ => return Err(bad(two.into())),
    };
    let target = top.str("amdhsa.target")?.to_string();
    let missing = || bad("amdhsa.kernels is missing or not an array".into());
    let (count, mut items) = top
        .opt_array("amdhsa.kernels")
        .map_err(|_| missing())?
        .ok_or_else(missing)?;
    let count = count as usize;
    if count > MAX_KERNELS {
        return Err(limit(
            format!("its metadata lists {count} kernels"),
            "rig_amd::code_object::MAX_KERNELS",
            MAX_KERNELS,
        ));
    }
    let mut kernels = Vec::with_capacity(count);
    for i in 0..count {
        kernels.push(kernel(i, &mut items)?);
    }
    Ok(Metadata {
        version,
        target,
        kernels,
    })
}

const KERNEL_KEYS: [&str; 12] = [
    ".name",
    ".symbol",
    ".args",
    ".group_segment_fixed_size",
    ".private_segment_fixed_size",
    ".kernarg_segment_size",
    ".kernarg_segment_align",
    ".wavefront_size",
    ".max_flat_workgroup_size",
    ".sgpr_count",
    ".vgpr_count",
    ".uses_dynamic_stack",
];

fn kernel(index: usize, r: &mut Reader<'_>) -> Result<KernelMeta, Why> {
    let Token::Map(n) = r.next()? else {
        return Err(bad(format!("amdhsa.kernels[{index}] is not a map")));
    };
    let values = r.fields(n, KERNEL_KEYS, 2)?;
    let unnamed = format!("amdhsa.kernels[{index}]");
    let name = Fields {
        keys: KERNEL_KEYS,
        values,
        what: &unnamed,
    }
    .str(".name")?;
    let what = format!("kernel '{name}'");
    let f = Fields {
        keys: KERNEL_KEYS,
        values,
        what: &what,
    };
    let args = match f.opt_array(".args")? {
        None => Vec::new(),
        Some((count, mut items)) => {
            let count = count as usize;
            if count > MAX_ARGS {
                return Err(limit(
                    format!("{what} lists {count} arguments"),
                    "rig_amd::code_object::MAX_ARGS",
                    MAX_ARGS,
                ));
            }
            let mut args = Vec::with_capacity(count);
            for i in 0..count {
                args.push(arg(&what, i, &mut items)?);
            }
            args
        }
    };
    Ok(KernelMeta {
        symbol: f.str(".symbol")?.to_string(),
        args,
        group_segment_fixed_size: f.u32(".group_segment_fixed_size")?,
        private_segment_fixed_size: f.u32(".private_segment_fixed_size")?,
        kernarg_segment_size: f.u32(".kernarg_segment_size")?,
        kernarg_segment_align: f.u32(".kernarg_segment_align")?,
        wavefront_size: f.u32(".wavefront_size")?,
        max_flat_workgroup_size: f.u32(".max_flat_workgroup_size")?,
        sgpr_count: f.u32(".sgpr_count")?,
        vgpr_count: f.u32(".vgpr_count")?,
        uses_dynamic_stack: f.opt_bool(".uses_dynamic_stack")?.unwrap_or(false),
        name: name.to_string(),
    })
}

const ARG_KEYS: [&str; 5] = [".name", ".offset", ".size", ".value_kind", ".address_space"];

fn arg(kernel: &str, index: usize, r: &mut Reader<'_>) -> Result<Arg, Why> {
    let what = format!("{kernel}: .args[{index}]");
    let Token::Map(n) = r.next()? else {
        return Err(bad(format!("{what} is not a map")));
    };
    let f = Fields {
        keys: ARG_KEYS,
        values: r.fields(n, ARG_KEYS, 4)?,
        what: &what,
    };
    Ok(Arg {
        name: f.opt_str(".name")?.map(str::to_string),
        offset: f.u32(".offset")?,
        size: f.u32(".size")?,
        kind: ArgKind::from_kind(f.str(".value_kind")?),
        address_space: f.opt_str(".address_space")?.map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmpv::Value;

    #[test]
    fn hidden_kinds_are_classified() {
        assert_eq!(
            ArgKind::from_kind("hidden_block_count_y"),
            ArgKind::Hidden(Hidden::BlockCount(Axis::Y))
        );
        assert_eq!(
            ArgKind::from_kind("hidden_group_size_z"),
            ArgKind::Hidden(Hidden::GroupSize(Axis::Z))
        );
        assert_eq!(
            ArgKind::from_kind("hidden_remainder_x"),
            ArgKind::Hidden(Hidden::Remainder(Axis::X))
        );
        assert_eq!(
            ArgKind::from_kind("hidden_global_offset_z"),
            ArgKind::Hidden(Hidden::GlobalOffset(Axis::Z))
        );
        assert_eq!(
            ArgKind::from_kind("hidden_grid_dims"),
            ArgKind::Hidden(Hidden::GridDims)
        );
        assert_eq!(
            ArgKind::from_kind("hidden_dynamic_lds_size"),
            ArgKind::Hidden(Hidden::DynamicLdsSize)
        );
        assert_eq!(ArgKind::from_kind("hidden_none"), ArgKind::HiddenNone);
        for kind in [
            "by_value",
            "global_buffer",
            "dynamic_shared_pointer",
            "image",
            "hidden_none",
            "hidden_block_count_x",
            "hidden_group_size_y",
            "hidden_remainder_z",
            "hidden_global_offset_x",
            "hidden_grid_dims",
            "hidden_dynamic_lds_size",
            "hidden_heap_v1",
        ] {
            assert_eq!(ArgKind::from_kind(kind).value_kind(), kind);
        }
        for service in [
            "printf_buffer",
            "hostcall_buffer",
            "multigrid_sync_arg",
            "heap_v1",
            "default_queue",
            "completion_action",
            "queue_ptr",
            "private_base",
            "shared_base",
            "block_count_w",
        ] {
            assert_eq!(
                ArgKind::from_kind(&format!("hidden_{service}")),
                ArgKind::Hidden(Hidden::Other(service.into()))
            );
        }
        assert_eq!(
            ArgKind::from_kind("image"),
            ArgKind::OtherExplicit("image".into())
        );
        assert!(ArgKind::from_kind("by_value").is_explicit());
        assert!(!ArgKind::from_kind("hidden_none").is_explicit());
    }

    fn encode(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    fn s(x: &str) -> Value {
        Value::from(x)
    }

    #[test]
    fn errors_name_the_kernel_and_key() {
        let kernel = Value::Map(vec![(s(".name"), s("k")), (s(".symbol"), s("k.kd"))]);
        let root = Value::Map(vec![
            (s("amdhsa.version"), Value::Array(vec![1.into(), 2.into()])),
            (s("amdhsa.target"), s("amdgcn-amd-amdhsa--gfx1100")),
            (s("amdhsa.kernels"), Value::Array(vec![kernel])),
        ]);
        let err = parse(&encode(&root)).unwrap_err().to_string();
        assert!(
            err.contains("kernel 'k'") && err.contains(".group_segment_fixed_size"),
            "{err}"
        );
        let err = parse(&[0xdf, 0xff, 0xff, 0xff, 0xff])
            .unwrap_err()
            .to_string();
        assert!(err.contains("msgpack"), "{err}");
        let err = parse(&encode(&Value::from(3))).unwrap_err().to_string();
        assert!(err.contains("not a map"), "{err}");
        // Deep nesting is refused, not recursed into.
        let deep = vec![0x91; 100_000];
        assert!(parse(&deep).is_err());
    }

    /// The heap bytes a parsed note holds: its vectors' capacities and its strings.
    fn held(m: &Metadata) -> u64 {
        use std::mem::size_of;
        let text = |s: &Option<String>| s.as_ref().map_or(0, String::capacity);
        let kind = |k: &ArgKind| match k {
            ArgKind::OtherExplicit(s) | ArgKind::Hidden(Hidden::Other(s)) => s.capacity(),
            _ => 0,
        };
        let args = |k: &KernelMeta| {
            (k.args.capacity() * size_of::<Arg>()) as u64
                + k.args
                    .iter()
                    .map(|a| (text(&a.name) + text(&a.address_space) + kind(&a.kind)) as u64)
                    .sum::<u64>()
        };
        (m.target.capacity() + m.kernels.capacity() * size_of::<KernelMeta>()) as u64
            + m.kernels
                .iter()
                .map(|k| (k.name.capacity() + k.symbol.capacity()) as u64 + args(k))
                .sum::<u64>()
    }

    fn kernel_map(name: &str, extra: Vec<(Value, Value)>) -> Value {
        let mut m = vec![
            (s(".name"), s(name)),
            (s(".symbol"), s(&format!("{name}.kd"))),
            (
                s(".args"),
                Value::Array(vec![Value::Map(vec![
                    (s(".offset"), 0.into()),
                    (s(".size"), 8.into()),
                    (s(".value_kind"), s("global_buffer")),
                    (s(".address_space"), s("global")),
                ])]),
            ),
        ];
        for k in [
            ".group_segment_fixed_size",
            ".private_segment_fixed_size",
            ".sgpr_count",
            ".vgpr_count",
        ] {
            m.push((s(k), 0.into()));
        }
        m.push((s(".kernarg_segment_size"), 8.into()));
        m.push((s(".kernarg_segment_align"), 8.into()));
        m.push((s(".wavefront_size"), 32.into()));
        m.push((s(".max_flat_workgroup_size"), 256.into()));
        m.extend(extra);
        Value::Map(m)
    }

    fn root(kernels: Vec<Value>, extra: Vec<(Value, Value)>) -> Value {
        let mut m = vec![
            (s("amdhsa.version"), Value::Array(vec![1.into(), 2.into()])),
            (s("amdhsa.target"), s("amdgcn-amd-amdhsa--gfx1100")),
            (s("amdhsa.kernels"), Value::Array(kernels)),
        ];
        m.extend(extra);
        Value::Map(m)
    }

    /// What a parse may allocate for `n` bytes of note: a small multiple, plus a constant.
    fn budget(n: usize) -> u64 {
        4 * n as u64 + (64 << 10)
    }

    #[test]
    fn what_rig_does_not_read_is_skipped_without_allocating() {
        // 4 MiB of nils, and of small maps, under keys rig does not read.
        let nils = Value::Array(vec![Value::Nil; 4 << 20]);
        let maps = Value::Array(vec![Value::Map(vec![(1.into(), Value::Nil)]); 1 << 20]);
        let note = encode(&root(
            vec![kernel_map("k", vec![(s(".bomb"), maps)])],
            vec![
                (s("amdhsa.printf"), nils),
                (Value::from(7), s("not a string key")),
            ],
        ));
        let t = std::time::Instant::now();
        let m = parse(&note).unwrap();
        assert_eq!(m.kernels.len(), 1);
        assert_eq!(m.kernels[0].args.len(), 1);
        assert!(
            held(&m) < 1024,
            "{} bytes kept of a {}-byte note",
            held(&m),
            note.len()
        );
        assert!(t.elapsed().as_secs() < 5, "skipping took {:?}", t.elapsed());
    }

    #[test]
    fn each_bound_is_refused_naming_its_limit() {
        let err = |v: &Value| parse(&encode(v)).unwrap_err().to_string();
        let many: Vec<Value> = (0..=MAX_KERNELS)
            .map(|i| kernel_map(&format!("k{i}"), vec![]))
            .collect();
        let e = err(&root(many, vec![]));
        assert!(
            e.contains("4097 kernels") && e.contains("MAX_KERNELS (4096)"),
            "{e}"
        );

        let arg = Value::Map(vec![
            (s(".offset"), 0.into()),
            (s(".size"), 1.into()),
            (s(".value_kind"), s("by_value")),
        ]);
        let k = kernel_map("k", vec![]);
        let Value::Map(mut fields) = k else {
            unreachable!()
        };
        fields[2].1 = Value::Array(vec![arg; MAX_ARGS + 1]);
        let e = err(&root(vec![Value::Map(fields)], vec![]));
        assert!(
            e.contains("kernel 'k' lists 1025 arguments") && e.contains("MAX_ARGS (1024)"),
            "{e}"
        );

        let long = "x".repeat(MAX_STRING + 1);
        let e = err(&root(vec![kernel_map(&long, vec![])], vec![]));
        assert!(
            e.contains("4097 bytes long") && e.contains("MAX_STRING (4096)"),
            "{e}"
        );
        // A long string rig does not keep is skipped, not refused.
        assert!(
            parse(&encode(&root(
                vec![kernel_map("k", vec![(s(".x"), s(&long))])],
                vec![]
            )))
            .is_ok()
        );

        let mut deep = Value::Nil;
        for _ in 0..MAX_DEPTH + 2 {
            deep = Value::Array(vec![deep]);
        }
        let e = err(&root(vec![], vec![(s("deep"), deep)]));
        assert!(e.contains("MAX_DEPTH"), "{e}");

        // Counts are checked against the bytes left before anything is sized from them.
        for lie in [
            &[0x81, 0xae][..],
            &[0xdd, 0xff, 0xff, 0xff, 0xff],
            &[0x81, 0xa1, b'a', 0xdf, 0x7f, 0xff, 0xff, 0xff],
            &[0x81, 0xa1, b'a', 0xdb, 0xff, 0xff, 0xff, 0xff],
            &[0x81, 0xa1, b'a', 0xc6, 0xff, 0xff, 0xff, 0xff],
        ] {
            let r = parse(lie);
            assert!(matches!(r, Err(Why::BadMsgpack(_))), "{lie:?}: {r:?}");
        }
    }

    #[test]
    fn what_is_kept_is_a_small_multiple_of_the_note() {
        // The densest shape rig keeps: many kernels of many one-byte arguments.
        let arg = Value::Map(vec![
            (s(".offset"), 0.into()),
            (s(".size"), 1.into()),
            (s(".value_kind"), s("by_value")),
            (s(".name"), s("a")),
        ]);
        let kernels = (0..64)
            .map(|i| {
                let Value::Map(mut f) = kernel_map(&format!("k{i}"), vec![]) else {
                    unreachable!()
                };
                f[2].1 = Value::Array(vec![arg.clone(); MAX_ARGS]);
                Value::Map(f)
            })
            .collect();
        let note = encode(&root(kernels, vec![]));
        let m = parse(&note).unwrap();
        assert_eq!(m.kernels.len(), 64);
        let bytes = held(&m);
        assert!(
            bytes <= budget(note.len()),
            "{bytes} bytes for a {}-byte note",
            note.len()
        );
    }

    proptest::proptest! {
        /// Any bytes after a valid note's start, or any bytes: an answer, never a panic, and
        /// what is kept bounded by the note's size.
        #[test]
        fn any_note_costs_a_bounded_multiple_of_its_bytes(
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4096),
            cut in 0usize..400,
        ) {
            let good = encode(&root(vec![kernel_map("k", vec![])], vec![]));
            let mut note = good[..cut.min(good.len())].to_vec();
            note.extend(&tail);
            for n in [&note, &tail] {
                if let Ok(m) = parse(n) {
                    proptest::prop_assert!(held(&m) <= budget(n.len()));
                }
            }
        }
    }
}
