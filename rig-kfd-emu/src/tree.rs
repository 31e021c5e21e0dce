//! The sysfs topology tree the emulation presents: a CPU node, then one node per emulated
//! GPU, laid out as amdgpu lays out `/sys/class/kfd/kfd/topology`.

use std::fmt::Write as _;
use std::path::Path;

use rig_amd::gpu::{Generation, Gpu};
use rig_kfd::topology::{Cache, MemBank, Node, Properties};

/// What the tree says of one emulated GPU.
#[derive(Debug, Clone)]
pub struct NodeFacts {
    /// The table entry.
    pub gpu: &'static Gpu,
    /// KFD's id of it.
    pub gpu_id: u32,
    /// The render node's minor.
    pub render_minor: u32,
    /// Its PCI bus number.
    pub bus: u32,
    /// VRAM bytes.
    pub vram_bytes: u64,
    /// VRAM bytes the host reaches through the BAR: `vram_bytes` with a large (resizable)
    /// BAR, 256 MiB on a GPU without one.
    pub bar_bytes: u64,
}

impl NodeFacts {
    /// SIMDs per compute unit: 4 on GFX9, 2 from GFX10 on.
    pub fn simd_per_cu(&self) -> u32 {
        if self.gpu.generation == Generation::Gfx9 {
            4
        } else {
            2
        }
    }

    /// Shader arrays per engine, as rig-amd states them ([`rig_amd::hal::Hal::arrays_per_engine`]).
    pub fn arrays_per_engine(&self) -> u32 {
        self.gpu.hal().arrays_per_engine
    }

    /// `gfx_target_version`.
    pub fn gfx_target_version(&self) -> u32 {
        let p = self.gpu.processor;
        u32::from(p.major) * 10000 + u32::from(p.minor) * 100 + u32::from(p.stepping)
    }

    /// Whether the BAR spans all the VRAM (`kfd_dev_is_large_bar`: no private VRAM).
    pub fn large_bar(&self) -> bool {
        self.bar_bytes >= self.vram_bytes
    }

    /// The compute firmware version the emulation reports.
    pub fn mec_firmware(&self) -> u32 {
        match self.gpu.generation {
            Generation::Gfx9 => 177,
            Generation::Gfx11 => 2140,
            Generation::Gfx12 => 2390,
        }
    }

    /// (L2 bytes per die, MALL bytes) the emulation reports.
    fn caches(&self) -> (u64, u64) {
        match self.gpu.generation {
            Generation::Gfx9 => (4 << 20, 256 << 20),
            Generation::Gfx11 => (6 << 20, 96 << 20),
            Generation::Gfx12 => (8 << 20, 64 << 20),
        }
    }
}

fn write(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)
}

/// The topology node of `g` as the tree shows it, numbered `index`.
pub fn node(g: &NodeFacts, index: u32) -> Node {
    let arrays = g.gpu.shader_engines * g.arrays_per_engine();
    let props: Vec<(&str, u32)> = vec![
        ("cpu_cores_count", 0),
        ("simd_count", g.gpu.compute_units * g.simd_per_cu()),
        ("mem_banks_count", 1),
        ("caches_count", 1 + g.gpu.dies),
        ("max_waves_per_simd", g.gpu.waves_per_cu / g.simd_per_cu()),
        ("lds_size_in_kb", g.gpu.lds_bytes / 1024),
        ("wave_front_size", g.gpu.wave_size),
        ("array_count", arrays),
        ("simd_arrays_per_engine", g.arrays_per_engine()),
        ("cu_per_simd_array", g.gpu.compute_units / arrays),
        ("simd_per_cu", g.simd_per_cu()),
        ("gfx_target_version", g.gfx_target_version()),
        ("vendor_id", u32::from(rig_amd::gpu::AMD_VENDOR)),
        ("location_id", g.bus << 8),
        ("domain", 0),
        ("drm_render_minor", g.render_minor),
        ("num_sdma_engines", 2),
        ("num_sdma_queues_per_engine", 6),
        ("num_cp_queues", 8),
        ("max_engine_clk_fcompute", 2100),
        ("fw_version", g.mec_firmware()),
        ("sdma_fw_version", 20),
        ("num_xcc", g.gpu.dies),
    ];
    let (l2, mall) = g.caches();
    let mut caches: Vec<Cache> = (0..g.gpu.dies)
        .map(|_| Cache {
            level: 2,
            bytes: l2,
            line_bytes: 128,
            kind: 5,
        })
        .collect();
    caches.push(Cache {
        level: 3,
        bytes: mall,
        line_bytes: 64,
        kind: 5,
    });
    Node {
        index,
        gpu_id: g.gpu_id,
        name: g.gpu.name(),
        properties: Properties(
            props
                .into_iter()
                .map(|(k, v)| (k.to_owned(), i64::from(v)))
                .collect(),
        ),
        // As kfd_crat.c lists it: one public bank where the BAR spans the VRAM, else all of
        // the VRAM as one private bank.
        mem_banks: vec![MemBank {
            heap_type: if g.large_bar() {
                rig_kfd::topology::HEAP_FRAME_BUFFER_PUBLIC
            } else {
                rig_kfd::topology::HEAP_FRAME_BUFFER_PRIVATE
            },
            size_in_bytes: g.vram_bytes,
            width: 256,
            mem_clk_max: 1250,
        }],
        caches,
    }
}

/// The properties of a CPU node, in the order Linux's KFD writes them.
const CPU_PROPERTIES: &[&str] = &[
    "cpu_cores_count",
    "simd_count",
    "mem_banks_count",
    "caches_count",
    "io_links_count",
    "p2p_links_count",
    "cpu_core_id_base",
    "simd_id_base",
    "max_waves_per_simd",
    "lds_size_in_kb",
    "gds_size_in_kb",
    "num_gws",
    "wave_front_size",
    "array_count",
    "simd_arrays_per_engine",
    "cu_per_simd_array",
    "simd_per_cu",
    "max_slots_scratch_cu",
    "gfx_target_version",
    "vendor_id",
    "device_id",
    "location_id",
    "domain",
    "drm_render_minor",
    "hive_id",
    "num_sdma_engines",
    "num_sdma_xgmi_engines",
    "num_sdma_queues_per_engine",
    "num_cp_queues",
    "max_engine_clk_ccompute",
];

/// Writes the tree for `gpus` under `root` (a `nodes/` directory inside it).
pub fn write_tree(root: &Path, gpus: &[NodeFacts]) -> std::io::Result<()> {
    let nodes = root.join("nodes");
    if nodes.exists() {
        std::fs::remove_dir_all(&nodes)?;
    }
    let cpu = nodes.join("0");
    write(&cpu.join("gpu_id"), "0\n")?;
    write(&cpu.join("name"), "rig-kfd-emu host\n")?;
    // Every property Linux's KFD writes for a CPU node, in its order (seen in a guest with
    // amdgpu loaded and no GPU: rig-kfd-emu/tests/guest_kfd.rs); all zero but the counts.
    let cpu_props: String = CPU_PROPERTIES
        .iter()
        .map(|k| {
            let v = match *k {
                "cpu_cores_count" => 2,
                "mem_banks_count" => 1,
                _ => 0,
            };
            format!("{k} {v}\n")
        })
        .collect();
    write(&cpu.join("properties"), &cpu_props)?;
    write(
        &cpu.join("mem_banks/0/properties"),
        "heap_type 0\nsize_in_bytes 17179869184\nflags 0\nwidth 64\nmem_clk_max 3200\n",
    )?;
    for (i, g) in gpus.iter().enumerate() {
        let n = node(g, i as u32 + 1);
        let dir = nodes.join(n.index.to_string());
        write(&dir.join("gpu_id"), &format!("{}\n", n.gpu_id))?;
        write(&dir.join("name"), &format!("{}\n", n.name))?;
        let mut p = String::new();
        for (k, v) in &n.properties.0 {
            let _ = writeln!(p, "{k} {v}");
        }
        write(&dir.join("properties"), &p)?;
        for (b, bank) in n.mem_banks.iter().enumerate() {
            write(
                &dir.join(format!("mem_banks/{b}/properties")),
                &format!(
                    "heap_type {}\nsize_in_bytes {}\nflags 0\nwidth {}\nmem_clk_max {}\n",
                    bank.heap_type, bank.size_in_bytes, bank.width, bank.mem_clk_max
                ),
            )?;
        }
        for (c, cache) in n.caches.iter().enumerate() {
            write(
                &dir.join(format!("caches/{c}/properties")),
                &format!(
                    "level {}\nsize {}\ncache_line_size {}\ntype {}\n",
                    cache.level,
                    cache.bytes >> 10,
                    cache.line_bytes,
                    cache.kind
                ),
            )?;
        }
    }
    Ok(())
}
