//! `rigctl image FILE`: what a code object holds, for kernel authors. Parsed here with
//! `rig_amd::code_object`; no daemon is involved.

use std::fmt::Write;
use std::path::Path;

use rig_amd::code_object::{ArgKind, CodeObject};
use serde::Serialize;

use crate::table::{bytes, render};

/// A code object as `rigctl image` shows it.
#[derive(Debug, Serialize)]
pub struct ImageReport {
    /// The file.
    pub file: String,
    /// The target id, such as `amdgcn-amd-amdhsa--gfx1100`.
    pub target: String,
    /// The processor it runs on.
    pub processor: String,
    /// The code object version.
    pub version: u8,
    /// Bytes of GPU memory the image takes.
    pub image_bytes: u64,
    /// Its kernels.
    pub kernels: Vec<KernelReport>,
}

/// One kernel.
#[derive(Debug, Serialize)]
pub struct KernelReport {
    /// Its name.
    pub name: String,
    /// Bytes of explicit arguments a launch passes.
    pub params: u32,
    /// Bytes of its kernarg segment, hidden arguments included.
    pub kernarg_bytes: u32,
    /// Alignment of the kernarg segment.
    pub kernarg_align: u32,
    /// Static LDS per group.
    pub group_segment: u32,
    /// Scratch per work-item.
    pub private_segment: u32,
    /// Whether its stack is sized at run time.
    pub dynamic_stack: bool,
    /// Most work-items per group.
    pub max_threads: u32,
    /// Wave size.
    pub wave_size: u32,
    /// SGPRs and VGPRs.
    pub sgprs: u32,
    /// VGPRs.
    pub vgprs: u32,
    /// Its arguments, explicit and hidden.
    pub args: Vec<ArgReport>,
    /// Runtime services it reads, which rigd refuses.
    pub runtime_services: Vec<String>,
}

/// One argument.
#[derive(Debug, Serialize)]
pub struct ArgReport {
    /// Its name, if kept.
    pub name: Option<String>,
    /// Offset in the kernarg segment.
    pub offset: u32,
    /// Bytes.
    pub size: u32,
    /// Its `.value_kind`.
    pub kind: String,
    /// Whether the launch passes it.
    pub explicit: bool,
}

/// Reads and parses `file`.
pub fn inspect(file: &Path) -> Result<ImageReport, String> {
    let data = std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let co = CodeObject::parse(&data).map_err(|e| format!("{}: {e}", file.display()))?;
    let kernels = co
        .kernels()
        .iter()
        .map(|k| {
            let (sgprs, vgprs) = k.registers();
            KernelReport {
                name: k.name().to_owned(),
                params: k.explicit_size(),
                kernarg_bytes: k.kernarg_size(),
                kernarg_align: k.kernarg_align(),
                group_segment: k.group_segment_size(),
                private_segment: k.private_segment_size(),
                dynamic_stack: k.uses_dynamic_stack(),
                max_threads: k.max_threads(),
                wave_size: if k.wave64() { 64 } else { 32 },
                sgprs,
                vgprs,
                args: k
                    .args()
                    .iter()
                    .map(|a| ArgReport {
                        name: a.name.clone(),
                        offset: a.offset,
                        size: a.size,
                        kind: a.kind.value_kind(),
                        explicit: a.kind.is_explicit(),
                    })
                    .filter(|a| a.kind != ArgKind::HiddenNone.value_kind())
                    .collect(),
                runtime_services: k.runtime_services().map(str::to_owned).collect(),
            }
        })
        .collect();
    Ok(ImageReport {
        file: file.display().to_string(),
        target: co.target_id().to_owned(),
        processor: co.processor().name(),
        version: co.version(),
        image_bytes: co.image_size(),
        kernels,
    })
}

/// The report as text.
pub fn render_report(r: &ImageReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", r.file);
    let _ = writeln!(
        out,
        "  target {}  (code object v{}, image {})",
        r.target,
        r.version,
        bytes(r.image_bytes)
    );
    for k in &r.kernels {
        let _ = writeln!(out, "\nkernel {}", k.name);
        let _ = writeln!(
            out,
            "  params {} B  kernarg {} B (align {})  lds {} B  scratch {} B/item{}  max threads {}  wave{}  sgprs {}  vgprs {}",
            k.params,
            k.kernarg_bytes,
            k.kernarg_align,
            k.group_segment,
            k.private_segment,
            if k.dynamic_stack {
                " (dynamic stack)"
            } else {
                ""
            },
            k.max_threads,
            k.wave_size,
            k.sgprs,
            k.vgprs
        );
        if !k.runtime_services.is_empty() {
            let _ = writeln!(
                out,
                "  refused by rigd: reads runtime services {}",
                k.runtime_services.join(", ")
            );
        }
        let rows: Vec<Vec<String>> = k
            .args
            .iter()
            .map(|a| {
                vec![
                    a.offset.to_string(),
                    a.size.to_string(),
                    a.name.clone().unwrap_or_else(|| "-".into()),
                    a.kind.clone(),
                    if a.explicit {
                        "explicit".into()
                    } else {
                        "hidden".into()
                    },
                ]
            })
            .collect();
        for line in render(&["OFFSET", "SIZE", "NAME", "KIND", "PASSED"], &rows).lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}
