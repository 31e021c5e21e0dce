//! `rigctl counters`: the SQ counters each GPU offers for measures, as rig-amd's
//! `perfcounter` states them for its processor, or why it offers none.

use rig_amd::gpu::Gpu;
use rig_amd::perfcounter::{self, Counter};
use rig_proto::messages::GpuInfo;

use crate::table::Grid;

/// One counter a GPU offers.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Offered {
    /// Its name (`SQ_WAVES`), as a measure lists it.
    pub name: String,
    /// Its `PERF_SEL` in `SQ_PERFCOUNTERn_SELECT`.
    pub select: u32,
    /// What it counts.
    pub counts: &'static str,
}

/// What one GPU offers.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GpuCounters {
    /// The GPU's index.
    pub gpu: u32,
    /// Its processor.
    pub arch: String,
    /// The counters, `SQ_WAVES` first (which every measure counts), empty where it offers none.
    pub counters: Vec<Offered>,
    /// The most a measure counts at once, `SQ_WAVES` among them.
    pub most_at_once: usize,
    /// Why it offers none, where it does not.
    pub none: Option<String>,
}

/// What each of `gpus` (or GPU `only` of them) offers.
pub fn of(gpus: &[GpuInfo], only: Option<u32>) -> Vec<GpuCounters> {
    gpus.iter()
        .filter(|g| only.is_none_or(|i| i == g.index))
        .map(|g| {
            let why = match Gpu::by_name(&g.arch) {
                None => Some(format!("rig knows no processor {}", g.arch)),
                Some(model) => perfcounter::supports(model).err().map(|e| e.to_string()),
            };
            let counters = if why.is_none() {
                Counter::ALL
                    .iter()
                    .map(|c| Offered {
                        name: c.name(),
                        select: c.select(),
                        counts: c.about(),
                    })
                    .collect()
            } else {
                Vec::new()
            };
            GpuCounters {
                gpu: g.index,
                arch: g.arch.clone(),
                counters,
                most_at_once: perfcounter::MOST_COUNTERS,
                none: why,
            }
        })
        .collect()
}

/// One row per counter per GPU; a GPU that offers none is one row saying why.
pub fn grid(list: &[GpuCounters]) -> Grid {
    let mut rows = Vec::new();
    for g in list {
        if let Some(why) = &g.none {
            rows.push(vec![
                g.gpu.to_string(),
                g.arch.clone(),
                "-".into(),
                "-".into(),
                why.clone(),
            ]);
        }
        for c in &g.counters {
            rows.push(vec![
                g.gpu.to_string(),
                g.arch.clone(),
                c.name.clone(),
                format!("{:#x}", c.select),
                c.counts.into(),
            ]);
        }
    }
    Grid {
        header: vec!["GPU", "ARCH", "COUNTER", "SELECT", "COUNTS"],
        rows,
        empty: "no GPU",
    }
}
