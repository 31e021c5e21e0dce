//! The `NT_AMDGPU_METADATA` note: a msgpack map that describes each kernel.
//!
//! Keys and value kinds from LLVM AMDGPUUsage, "Code Object V3 Metadata" and its v4/v5
//! amendments (`amdhsa.version`, `amdhsa.target`, `amdhsa.kernels`). This module turns the
//! map into plain structs and classifies each argument; it checks types and presence of the
//! keys rig needs, and leaves the cross-checks with the ELF (symbols, descriptors) to the
//! caller.

use rmpv::Value;

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
const MAX_DEPTH: usize = 16;

fn bad(msg: String) -> Why {
    Why::BadMetadata(msg)
}

fn get<'a>(map: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    map.iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

/// Field reader for one map, naming `what` (such as `kernel 'add'`) in its errors.
struct Fields<'a> {
    map: &'a [(Value, Value)],
    what: &'a str,
}

impl<'a> Fields<'a> {
    fn opt_u32(&self, key: &str) -> Result<Option<u32>, Why> {
        match get(self.map, key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    bad(format!(
                        "{}: {key} is not a 32-bit unsigned integer",
                        self.what
                    ))
                }),
        }
    }

    fn u32(&self, key: &str) -> Result<u32, Why> {
        self.opt_u32(key)?
            .ok_or_else(|| bad(format!("{}: {key} is missing", self.what)))
    }

    fn opt_str(&self, key: &str) -> Result<Option<&'a str>, Why> {
        match get(self.map, key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| bad(format!("{}: {key} is not a string", self.what))),
        }
    }

    fn str(&self, key: &str) -> Result<&'a str, Why> {
        self.opt_str(key)?
            .ok_or_else(|| bad(format!("{}: {key} is missing", self.what)))
    }
}

/// Parses the note's descriptor bytes.
pub(crate) fn parse(mut desc: &[u8]) -> Result<Metadata, Why> {
    let root = rmpv::decode::read_value_with_max_depth(&mut desc, MAX_DEPTH)
        .map_err(|e| Why::BadMsgpack(e.to_string()))?;
    let map = root
        .as_map()
        .ok_or_else(|| bad("the root is not a map".into()))?;
    let top = Fields {
        map,
        what: "metadata",
    };
    let version = match get(map, "amdhsa.version").and_then(Value::as_array) {
        Some(v) if v.len() == 2 => {
            let part = |i: usize| v[i].as_u64().and_then(|n| u32::try_from(n).ok());
            match (part(0), part(1)) {
                (Some(a), Some(b)) => [a, b],
                _ => return Err(bad("amdhsa.version is not two integers".into())),
            }
        }
        _ => return Err(bad("amdhsa.version is missing or not two integers".into())),
    };
    let target = top.str("amdhsa.target")?.to_string();
    let kernels = get(map, "amdhsa.kernels")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("amdhsa.kernels is missing or not an array".into()))?;
    let kernels = kernels
        .iter()
        .enumerate()
        .map(|(i, k)| kernel(i, k))
        .collect::<Result<_, _>>()?;
    Ok(Metadata {
        version,
        target,
        kernels,
    })
}

fn kernel(index: usize, value: &Value) -> Result<KernelMeta, Why> {
    let map = value
        .as_map()
        .ok_or_else(|| bad(format!("amdhsa.kernels[{index}] is not a map")))?;
    let unnamed = format!("amdhsa.kernels[{index}]");
    let name = Fields {
        map,
        what: &unnamed,
    }
    .str(".name")?
    .to_string();
    let what = format!("kernel '{name}'");
    let f = Fields { map, what: &what };
    let args = match get(map, ".args") {
        None => Vec::new(),
        Some(v) => v
            .as_array()
            .ok_or_else(|| bad(format!("{what}: .args is not an array")))?
            .iter()
            .enumerate()
            .map(|(i, a)| arg(&what, i, a))
            .collect::<Result<_, _>>()?,
    };
    let uses_dynamic_stack = match get(map, ".uses_dynamic_stack") {
        None => false,
        Some(v) => v
            .as_bool()
            .ok_or_else(|| bad(format!("{what}: .uses_dynamic_stack is not a boolean")))?,
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
        uses_dynamic_stack,
        name,
    })
}

fn arg(kernel: &str, index: usize, value: &Value) -> Result<Arg, Why> {
    let what = format!("{kernel}: .args[{index}]");
    let map = value
        .as_map()
        .ok_or_else(|| bad(format!("{what} is not a map")))?;
    let f = Fields { map, what: &what };
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
}
