//! Typed kernel arguments: a kernel's parameters as its code object's metadata states them,
//! and [`Args`], which fills them by name or position so that a program writes no offsets.
//!
//! This module owns [`Param`] (one explicit argument: name, kind, offset, size, address
//! space, from rig_amd's parse of the metadata, [`rig_amd::code_object::Arg`]), [`Args`]
//! (the parameter bytes and refs of a launch, checked against the kernel's parameters as
//! they are set) and [`ArgError`]. The bytes and refs it makes are those of the raw form
//! ([`Launch::params`], [`Launch::refs`]); [`Args::launch`] makes the launch of them.
//! Nothing here is on the submit path.

use std::fmt;
use std::sync::Arc;

use rig_amd::code_object::{Arg, ArgKind};

use crate::buffer::Buffer;
use crate::image::Kernel;
use crate::submission::{Launch, Ref};
use crate::types::Access;

/// The alignment [`Args::local`] gives each `local` pointer's share of dynamic LDS: the
/// largest alignment of OpenCL C's scalar and 4-vector types (`double4`, `long2`...).
/// [`Args::local_aligned`] takes another.
pub const LOCAL_ALIGN: u32 = 32;

/// What a kernel parameter takes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// A global (or constant) pointer: a buffer's address (`global_buffer`).
    Buffer,
    /// Bytes passed by value: a scalar, a vector or a struct (`by_value`).
    Value,
    /// A `local` pointer: the offset of the launch's dynamic LDS the kernel uses
    /// (`dynamic_shared_pointer`).
    Local,
    /// Another kind (an image, a sampler, a pipe, a queue): its bytes as the program passes
    /// them ([`Args::bytes`]).
    Other(String),
}

impl fmt::Display for ParamKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Buffer => f.write_str("a global pointer (a buffer)"),
            Self::Value => f.write_str("a value"),
            Self::Local => f.write_str("a local pointer (dynamic LDS)"),
            Self::Other(k) => write!(f, "a {k} (raw bytes)"),
        }
    }
}

/// One explicit parameter of a kernel, as its code object's metadata states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// The source's name for it, where the compiler kept one.
    pub name: Option<String>,
    /// What it takes.
    pub kind: ParamKind,
    /// Byte offset among the launch's parameters.
    pub offset: u32,
    /// Bytes.
    pub size: u32,
    /// The address space of a pointer (`global`, `constant`, `local`, `generic`).
    pub address_space: Option<String>,
}

impl Param {
    /// The explicit arguments among `args`, in order.
    pub(crate) fn of(args: &[Arg]) -> Vec<Param> {
        args.iter()
            .filter(|a| a.kind.is_explicit())
            .map(|a| Param {
                name: a.name.clone(),
                kind: match &a.kind {
                    ArgKind::GlobalBuffer => ParamKind::Buffer,
                    ArgKind::ByValue => ParamKind::Value,
                    ArgKind::DynamicSharedPointer => ParamKind::Local,
                    other => ParamKind::Other(other.value_kind()),
                },
                offset: a.offset,
                size: a.size,
                address_space: a.address_space.clone(),
            })
            .collect()
    }

    fn label(&self, index: usize) -> String {
        match &self.name {
            Some(n) => format!("{n:?} (parameter {index})"),
            None => format!("parameter {index}"),
        }
    }
}

/// A kernel's register use per wave, as its metadata states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Registers {
    /// Scalar registers.
    pub sgprs: u32,
    /// Vector registers.
    pub vgprs: u32,
}

/// Why a kernel's arguments could not be set as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgError {
    /// The kernel has no parameter of that name.
    #[error("kernel {kernel} has no parameter named {name:?}; its parameters: {known}")]
    NoName {
        /// The kernel.
        kernel: String,
        /// The name asked.
        name: String,
        /// Its parameters' names, comma separated.
        known: String,
    },
    /// The kernel has fewer parameters than the position asked.
    #[error("kernel {kernel} has {count} parameters; there is no parameter {index}")]
    NoIndex {
        /// The kernel.
        kernel: String,
        /// The position asked (from 0).
        index: usize,
        /// Its explicit parameters.
        count: usize,
    },
    /// The parameter takes another kind of argument.
    #[error("kernel {kernel}'s {param} takes {takes}, not {given}")]
    Kind {
        /// The kernel.
        kernel: String,
        /// The parameter.
        param: String,
        /// What it takes.
        takes: ParamKind,
        /// What was given.
        given: &'static str,
    },
    /// A value of another size than the parameter's.
    #[error("kernel {kernel}'s {param} takes {size} bytes; {given} were given")]
    Size {
        /// The kernel.
        kernel: String,
        /// The parameter.
        param: String,
        /// Its bytes.
        size: u32,
        /// The bytes given.
        given: usize,
    },
    /// A buffer offset past the buffer's end.
    #[error("kernel {kernel}'s {param}: offset {offset} is past the buffer's {len} bytes")]
    Offset {
        /// The kernel.
        kernel: String,
        /// The parameter.
        param: String,
        /// The offset asked.
        offset: u64,
        /// The buffer's bytes.
        len: u64,
    },
    /// Dynamic LDS past what a group's offsets can name, or an alignment that is not a power
    /// of two.
    #[error(
        "kernel {kernel}'s {param}: {bytes} bytes of dynamic LDS aligned to {align} do not fit a group's 4 GiB of offsets"
    )]
    Local {
        /// The kernel.
        kernel: String,
        /// The parameter.
        param: String,
        /// The bytes asked.
        bytes: u32,
        /// The alignment asked.
        align: u32,
    },
    /// A parameter was never set.
    #[error("kernel {kernel}'s {param} ({takes}) is not set")]
    Unset {
        /// The kernel.
        kernel: String,
        /// The parameter.
        param: String,
        /// What it takes.
        takes: ParamKind,
    },
    /// The client could not read the kernel's parameters from its code object, so it cannot
    /// check them: launch it with raw bytes ([`Launch::params`]).
    #[error(
        "the client has no metadata of kernel {kernel}'s {params} bytes of parameters; launch it with raw bytes"
    )]
    NoMetadata {
        /// The kernel.
        kernel: String,
        /// Bytes of its parameters.
        params: u32,
    },
}

/// A parameter by name or by position (from 0), for [`Args`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At<'a> {
    /// The parameter of this name.
    Name(&'a str),
    /// The parameter at this position among the explicit ones.
    Index(usize),
}

impl<'a> From<&'a str> for At<'a> {
    fn from(n: &'a str) -> At<'a> {
        At::Name(n)
    }
}

impl From<usize> for At<'_> {
    fn from(i: usize) -> Self {
        At::Index(i)
    }
}

/// A value [`Args::value`] passes by value: its little-endian bytes.
pub trait ArgValue {
    /// Appends its bytes, as the kernel reads them, to `out`.
    fn put(&self, out: &mut Vec<u8>);
}

macro_rules! scalar_values {
    ($($t:ty),*) => {$(
        impl ArgValue for $t {
            fn put(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
scalar_values!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

impl<T: ArgValue, const N: usize> ArgValue for [T; N] {
    fn put(&self, out: &mut Vec<u8>) {
        for v in self {
            v.put(out);
        }
    }
}

/// The arguments of a launch of one kernel, set by name or position and checked against
/// its parameters as they are set ([`crate::Kernel::args`]). [`Args::launch`] makes the
/// launch of them.
#[derive(Debug, Clone)]
pub struct Args {
    kernel: Kernel,
    params: Vec<u8>,
    refs: Vec<Ref>,
    set: Vec<bool>,
    /// Where the next `local` pointer's share of dynamic LDS may start: an offset in the
    /// group's LDS, past its static LDS.
    lds_end: u32,
}

impl Args {
    pub(crate) fn new(kernel: &Kernel) -> Args {
        // The metadata's explicit arguments end where rigd's parse of the same bytes says the
        // parameters do; the larger of the two keeps every offset inside the bytes anyway.
        let end = kernel
            .arguments()
            .iter()
            .map(|p| p.offset as usize + p.size as usize)
            .max()
            .unwrap_or(0);
        Args {
            kernel: kernel.clone(),
            params: vec![0; end.max(kernel.params() as usize)],
            refs: Vec::new(),
            set: vec![false; kernel.arguments().len()],
            lds_end: kernel.static_lds(),
        }
    }

    /// The parameter `at` names, with its index.
    fn find(&self, at: At<'_>) -> Result<(usize, &Param), ArgError> {
        self.has_metadata()?;
        let params = self.kernel.arguments();
        match at {
            At::Index(i) => params.get(i).map(|p| (i, p)).ok_or(ArgError::NoIndex {
                kernel: self.kernel.name().to_owned(),
                index: i,
                count: params.len(),
            }),
            At::Name(n) => params
                .iter()
                .enumerate()
                .find(|(_, p)| p.name.as_deref() == Some(n))
                .ok_or_else(|| ArgError::NoName {
                    kernel: self.kernel.name().to_owned(),
                    name: n.to_owned(),
                    known: names(params),
                }),
        }
    }

    /// Fails where the client has no metadata of a kernel that takes parameters.
    fn has_metadata(&self) -> Result<(), ArgError> {
        if self.kernel.0.facts.is_none() && self.kernel.params() > 0 {
            return Err(ArgError::NoMetadata {
                kernel: self.kernel.name().to_owned(),
                params: self.kernel.params(),
            });
        }
        Ok(())
    }

    /// The parameter `at` names, which must take `kind`.
    fn expect(
        &self,
        at: At<'_>,
        kind: &ParamKind,
        given: &'static str,
    ) -> Result<(usize, Param), ArgError> {
        let (i, p) = self.find(at)?;
        if &p.kind != kind {
            return Err(ArgError::Kind {
                kernel: self.kernel.name().to_owned(),
                param: p.label(i),
                takes: p.kind.clone(),
                given,
            });
        }
        Ok((i, p.clone()))
    }

    fn put(&mut self, i: usize, p: &Param, bytes: &[u8]) -> Result<(), ArgError> {
        if bytes.len() != p.size as usize {
            return Err(ArgError::Size {
                kernel: self.kernel.name().to_owned(),
                param: p.label(i),
                size: p.size,
                given: bytes.len(),
            });
        }
        let at = p.offset as usize;
        self.params[at..at + bytes.len()].copy_from_slice(bytes);
        self.set[i] = true;
        Ok(())
    }

    /// Sets the global pointer `at` to buffer `b`'s start; the launch may write `b`.
    pub fn buffer<'a>(&mut self, at: impl Into<At<'a>>, b: &Buffer) -> Result<&mut Args, ArgError> {
        self.buffer_at(at, b, 0, Access::Write)
    }

    /// Sets the global pointer `at` to buffer `b`'s start; the launch only reads `b`, so a
    /// host read of `b` need not wait for it.
    pub fn read<'a>(&mut self, at: impl Into<At<'a>>, b: &Buffer) -> Result<&mut Args, ArgError> {
        self.buffer_at(at, b, 0, Access::Read)
    }

    /// Sets the global pointer `at` to byte `offset` of buffer `b` (at most its length),
    /// used as `access` says.
    pub fn buffer_at<'a>(
        &mut self,
        at: impl Into<At<'a>>,
        b: &Buffer,
        offset: u64,
        access: Access,
    ) -> Result<&mut Args, ArgError> {
        let (i, p) = self.expect(at.into(), &ParamKind::Buffer, "a buffer")?;
        if offset > b.len() {
            return Err(ArgError::Offset {
                kernel: self.kernel.name().to_owned(),
                param: p.label(i),
                offset,
                len: b.len(),
            });
        }
        // The ref adds the buffer's address to the 8 bytes that hold the offset.
        self.put(i, &p, &offset.to_le_bytes())?;
        let at = p.offset as usize;
        self.refs.retain(|r| r.at != at);
        self.refs.push(Ref {
            buffer: b.clone(),
            at,
            access,
        });
        Ok(self)
    }

    /// Sets the by-value parameter `at` to `v`, which must have its size.
    pub fn value<'a, V: ArgValue>(
        &mut self,
        at: impl Into<At<'a>>,
        v: V,
    ) -> Result<&mut Args, ArgError> {
        let (i, p) = self.expect(at.into(), &ParamKind::Value, "a value")?;
        let mut bytes = Vec::with_capacity(p.size as usize);
        v.put(&mut bytes);
        self.put(i, &p, &bytes)?;
        Ok(self)
    }

    /// Sets parameter `at` (a value or another kind, never a pointer) to `bytes`, which
    /// must have its size: a struct passed by value, say, laid out as the kernel's.
    pub fn bytes<'a>(
        &mut self,
        at: impl Into<At<'a>>,
        bytes: &[u8],
    ) -> Result<&mut Args, ArgError> {
        let (i, p) = self.find(at.into())?;
        if matches!(p.kind, ParamKind::Buffer | ParamKind::Local) {
            return Err(ArgError::Kind {
                kernel: self.kernel.name().to_owned(),
                param: p.label(i),
                takes: p.kind.clone(),
                given: "raw bytes",
            });
        }
        let p = p.clone();
        self.put(i, &p, bytes)?;
        Ok(self)
    }

    /// Gives the `local` pointer `at` `bytes` bytes of the launch's dynamic LDS, after the
    /// kernel's static LDS and the earlier `local` pointers' shares, aligned to
    /// [`LOCAL_ALIGN`].
    pub fn local<'a>(&mut self, at: impl Into<At<'a>>, bytes: u32) -> Result<&mut Args, ArgError> {
        self.local_aligned(at, bytes, LOCAL_ALIGN)
    }

    /// [`Args::local`] with the share aligned to `align` bytes (a power of two).
    pub fn local_aligned<'a>(
        &mut self,
        at: impl Into<At<'a>>,
        bytes: u32,
        align: u32,
    ) -> Result<&mut Args, ArgError> {
        let (i, p) = self.expect(at.into(), &ParamKind::Local, "dynamic LDS")?;
        let fail = || ArgError::Local {
            kernel: self.kernel.name().to_owned(),
            param: p.label(i),
            bytes,
            align,
        };
        if !align.is_power_of_two() {
            return Err(fail());
        }
        let start = self
            .lds_end
            .checked_next_multiple_of(align)
            .ok_or_else(fail)?;
        let end = start.checked_add(bytes).ok_or_else(fail)?;
        let offset = match p.size {
            4 => start.to_le_bytes().to_vec(),
            _ => u64::from(start).to_le_bytes().to_vec(),
        };
        self.put(i, &p, &offset)?;
        self.lds_end = end;
        Ok(self)
    }

    /// The bytes of dynamic LDS the `local` pointers take: a launch's `shared`.
    pub fn shared(&self) -> u32 {
        self.lds_end - self.kernel.static_lds()
    }

    /// The parameter bytes, as [`Launch::params`] takes them.
    pub fn params(&self) -> &[u8] {
        &self.params
    }

    /// The refs, as [`Launch::refs`] takes them.
    pub fn refs(&self) -> &[Ref] {
        &self.refs
    }

    /// The kernel they are for.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// Fails with the first parameter not set.
    pub fn check(&self) -> Result<(), ArgError> {
        self.has_metadata()?;
        let params = self.kernel.arguments();
        match self.set.iter().position(|s| !s) {
            Some(i) => Err(ArgError::Unset {
                kernel: self.kernel.name().to_owned(),
                param: params[i].label(i),
                takes: params[i].kind.clone(),
            }),
            None => Ok(()),
        }
    }
}

fn names(params: &[Param]) -> String {
    let named: Vec<_> = params.iter().filter_map(|p| p.name.as_deref()).collect();
    if named.is_empty() {
        "none named".into()
    } else {
        named.join(", ")
    }
}

impl Args {
    /// The launch of the kernel with these arguments: `groups` groups of `threads`
    /// work-items along each axis, with the dynamic LDS its `local` pointers take
    /// ([`Args::shared`]). A parameter not set (or a kernel without metadata) makes the
    /// submission it is added to refused ([`crate::Never::Args`]), with this error.
    pub fn launch(&self, groups: [u32; 3], threads: [u32; 3]) -> Launch {
        let mut launch = Launch::new(&self.kernel, groups, threads)
            .params(&self.params)
            .refs(&self.refs)
            .shared(self.shared());
        launch.unset = self.check().err();
        launch
    }
}

/// Parameters of kernels whose metadata the client has, by kernel name; shared by the
/// kernels resolved from one image.
pub(crate) type ParamTable = Arc<[(String, KernelFacts)]>;

/// What the client reads of one kernel's metadata.
#[derive(Debug, Clone, Default)]
pub(crate) struct KernelFacts {
    pub params: Arc<[Param]>,
    pub registers: Registers,
}

/// The table of the code object `binary`'s kernels; empty where the client cannot parse
/// what rigd loaded (rigd's parse is the one that decides).
pub(crate) fn facts_of(binary: &[u8]) -> ParamTable {
    match rig_amd::code_object::CodeObject::parse(binary) {
        Ok(co) => co
            .kernels()
            .iter()
            .map(|k| {
                let (sgprs, vgprs) = k.registers();
                (
                    k.name().to_owned(),
                    KernelFacts {
                        params: Param::of(k.args()).into(),
                        registers: Registers { sgprs, vgprs },
                    },
                )
            })
            .collect(),
        Err(_) => Arc::from([]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_without_metadata_takes_raw_bytes_only() {
        let k = crate::image::tests::kernel(1, 16, 256, 0);
        let mut a = k.args();
        assert!(matches!(
            a.value("n", 1u32),
            Err(ArgError::NoMetadata { params: 16, .. })
        ));
        assert!(matches!(a.check(), Err(ArgError::NoMetadata { .. })));
        let none = crate::image::tests::kernel(1, 0, 256, 0);
        assert_eq!(none.args().check(), Ok(()));
        assert_eq!(none.args().shared(), 0);
    }

    #[test]
    fn values_are_little_endian_bytes() {
        let mut out = Vec::new();
        0x0102_0304u32.put(&mut out);
        1.0f32.put(&mut out);
        [1u16, 2].put(&mut out);
        assert_eq!(out, [4, 3, 2, 1, 0, 0, 0x80, 0x3f, 1, 0, 2, 0]);
    }
}
