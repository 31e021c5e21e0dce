//! KFD's topology: the nodes under `/sys/class/kfd/kfd/topology/nodes`, read into types.
//!
//! Each node directory holds `gpu_id` (0 for a CPU node), `name`, `properties` (lines of
//! `key value`), and `mem_banks/*/properties` and `caches/*/properties` in the same form.
//! [`read`] takes the root as a parameter so tests (and the emulated KFD) use a tree of
//! their own. [`Node::gpu`] matches a GPU node to rig-amd's table, or says why rig does not
//! drive it; the rest of the path's description (budget, cache bytes, work-group processors,
//! firmware) comes from the node's accessors.
//!
//! Every file is untrusted text: reads are bounded ([`MAX_FILE_BYTES`], [`MAX_NODES`],
//! [`MAX_ENTRIES`]) and a malformed line is an error naming the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rig_amd::gpu::{Generation, Gpu, IpVersion};

/// The topology's root on a Linux machine.
pub const SYSFS_ROOT: &str = "/sys/class/kfd/kfd/topology";

/// The most bytes of one topology file read.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;
/// The most nodes read.
pub const MAX_NODES: usize = 256;
/// The most memory banks or caches read per node (an MI300X lists hundreds of caches).
pub const MAX_ENTRIES: usize = 8192;

/// Why the topology could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// A file or directory could not be read.
    #[error("reading KFD topology {path}")]
    Read {
        /// What was read.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A file is larger than [`MAX_FILE_BYTES`].
    #[error("KFD topology file {path} exceeds {MAX_FILE_BYTES} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// More nodes or entries than the limit.
    #[error("KFD topology {path} has more than {limit} {what}")]
    TooMany {
        /// The directory.
        path: PathBuf,
        /// Nodes, memory banks or caches.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// A line that is not `key value` with a decimal value.
    #[error("KFD topology file {path}, line {line}: expected `key <decimal>`, found {text:?}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// The line's text (at most 80 characters).
        text: String,
    },
}

/// A `properties` file: its keys and decimal values, as the kernel printed them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties(pub BTreeMap<String, i64>);

impl Properties {
    /// The value of `key`, or 0 if the kernel did not print it (KFD adds keys over versions;
    /// an absent one means the feature it describes is not there).
    pub fn get(&self, key: &str) -> i64 {
        self.0.get(key).copied().unwrap_or(0)
    }

    /// The value of `key` as a u32, 0 if absent or out of range.
    pub fn u32(&self, key: &str) -> u32 {
        u32::try_from(self.get(key)).unwrap_or(0)
    }

    /// The value of `key` as a u64, 0 if absent or negative.
    pub fn u64(&self, key: &str) -> u64 {
        u64::try_from(self.get(key)).unwrap_or(0)
    }

    fn parse(path: &Path, text: &str) -> Result<Properties, TopologyError> {
        let mut map = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let bad = || TopologyError::Parse {
                path: path.to_owned(),
                line: i + 1,
                text: line.chars().take(80).collect(),
            };
            let (key, value) = line.split_once(' ').ok_or_else(bad)?;
            // `sibling_map` is a list (`1,0,0`), which the path does not use.
            if key == "sibling_map" {
                continue;
            }
            let value: i64 = value.trim().parse().map_err(|_| bad())?;
            map.insert(key.to_owned(), value);
        }
        Ok(Properties(map))
    }
}

/// `heap_type` of a memory bank: system memory.
pub const HEAP_SYSTEM: u32 = 0;
/// `heap_type`: VRAM the host reaches through the BAR. KFD lists a GPU's VRAM as one bank
/// of this type only where the BAR spans all of it (a large or resizable BAR:
/// `kfd_create_vcrat_image_gpu` when `local_mem_size_private` is 0).
pub const HEAP_FRAME_BUFFER_PUBLIC: u32 = 1;
/// `heap_type`: VRAM the host does not reach. Where the BAR is smaller than the VRAM
/// (256 MiB without resizable BAR), KFD lists all of it as one bank of this type, and
/// refuses host-visible (PUBLIC) VRAM allocations altogether
/// (`kfd_ioctl_alloc_memory_of_gpu`: "Alloc host visible vram on small bar is not allowed").
pub const HEAP_FRAME_BUFFER_PRIVATE: u32 = 2;

/// One memory bank of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemBank {
    /// `HEAP_*`.
    pub heap_type: u32,
    /// Bytes.
    pub size_in_bytes: u64,
    /// The bus width, in bits.
    pub width: u32,
    /// The memory clock's most, in MHz.
    pub mem_clk_max: u32,
}

/// One cache of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    /// 1, 2 (L2) or 3 (the MALL, Infinity Cache).
    pub level: u32,
    /// Bytes (the kernel states KiB).
    pub bytes: u64,
    /// Bytes of a cache line.
    pub line_bytes: u32,
    /// `HSA_CACHE_TYPE_*` bits (1 data, 2 instruction, 4 CPU, 8 GPU).
    pub kind: u32,
}

/// One topology node: a CPU or a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The node's number (its directory's name).
    pub index: u32,
    /// KFD's id of the GPU, which ioctls name; 0 for a CPU node.
    pub gpu_id: u32,
    /// The `name` file (`gfx1100`, or a CPU's name), trimmed.
    pub name: String,
    /// Every property.
    pub properties: Properties,
    /// Its memory banks.
    pub mem_banks: Vec<MemBank>,
    /// Its caches.
    pub caches: Vec<Cache>,
}

/// Why rig does not drive a GPU node (shown by `rigctl gpus`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotDriven {
    /// A generation rig has no packets or registers for.
    #[error(
        "{processor} is a GFX{major} GPU; rig drives gfx942, gfx950 and the GFX11 and GFX12 GPUs"
    )]
    Generation {
        /// The processor's name.
        processor: String,
        /// Its major version.
        major: u32,
    },
    /// A processor of a driven generation that rig's table lacks.
    #[error("{processor} is not in rig's GPU table (rig-amd's gpu::GPUS)")]
    Unknown {
        /// The processor's name.
        processor: String,
    },
    /// A wave size the table's entry does not run.
    #[error("{processor} reports wave size {found}, rig's table has {table}")]
    WaveSize {
        /// The processor's name.
        processor: String,
        /// What the node reports.
        found: u32,
        /// What the table says.
        table: u32,
    },
}

impl Node {
    /// Whether the node is a GPU (a CPU node has gpu_id 0 and no SIMDs).
    pub fn is_gpu(&self) -> bool {
        self.gpu_id != 0 && self.properties.get("simd_count") > 0
    }

    /// `gfx_target_version`: major × 10000 + minor × 100 + stepping.
    pub fn gfx_target_version(&self) -> u32 {
        self.properties.u32("gfx_target_version")
    }

    /// The processor version (gfx1100 is 11.0.0), from `gfx_target_version`.
    pub fn processor(&self) -> IpVersion {
        let v = self.gfx_target_version();
        let part = |x: u32| u8::try_from(x).unwrap_or(u8::MAX);
        IpVersion::new(part(v / 10000), part(v / 100 % 100), part(v % 100))
    }

    /// The processor's name, such as `gfx1100`.
    pub fn processor_name(&self) -> String {
        rig_amd::gpu::processor_name(self.processor())
    }

    /// SIMDs across the GPU.
    pub fn simd_count(&self) -> u32 {
        self.properties.u32("simd_count")
    }

    /// Local data share, in bytes.
    pub fn lds_bytes(&self) -> u32 {
        self.properties.u32("lds_size_in_kb").saturating_mul(1024)
    }

    /// The wave size.
    pub fn wave_front_size(&self) -> u32 {
        self.properties.u32("wave_front_size")
    }

    /// Compute units per shader array.
    pub fn cu_per_simd_array(&self) -> u32 {
        self.properties.u32("cu_per_simd_array")
    }

    /// Shader arrays per shader engine.
    pub fn simd_arrays_per_engine(&self) -> u32 {
        self.properties.u32("simd_arrays_per_engine")
    }

    /// Shader arrays across the GPU (all its dies).
    pub fn array_count(&self) -> u32 {
        self.properties.u32("array_count")
    }

    /// The most waves a SIMD runs.
    pub fn max_waves_per_simd(&self) -> u32 {
        self.properties.u32("max_waves_per_simd")
    }

    /// SIMDs per compute unit.
    pub fn simd_per_cu(&self) -> u32 {
        self.properties.u32("simd_per_cu")
    }

    /// Compute units across the GPU.
    pub fn compute_units(&self) -> u32 {
        self.simd_count()
            .checked_div(self.simd_per_cu())
            .unwrap_or(0)
    }

    /// The most waves a compute unit runs.
    pub fn waves_per_cu(&self) -> u32 {
        self.max_waves_per_simd().saturating_mul(self.simd_per_cu())
    }

    /// Dies (XCCs); 1 where the kernel does not say.
    pub fn dies(&self) -> u32 {
        self.properties.u32("num_xcc").max(1)
    }

    /// `location_id`: the PCI function's bus << 8 | devfn.
    pub fn location_id(&self) -> u32 {
        self.properties.u32("location_id")
    }

    /// The PCI function's bus address, such as `0000:03:00.0`.
    pub fn bus(&self) -> String {
        let loc = self.location_id();
        format!(
            "{:04x}:{:02x}:{:02x}.{}",
            self.properties.u32("domain"),
            (loc >> 8) & 0xff,
            (loc >> 3) & 0x1f,
            loc & 7
        )
    }

    /// The render node's minor (`/dev/dri/renderD<minor>`), if the node has one.
    pub fn drm_render_minor(&self) -> Option<u32> {
        u32::try_from(self.properties.get("drm_render_minor"))
            .ok()
            .filter(|&m| m > 0)
    }

    /// The compute (MEC) firmware's version.
    pub fn mec_firmware(&self) -> u32 {
        self.properties.u32("fw_version")
    }

    /// The SDMA firmware's version.
    pub fn sdma_firmware(&self) -> u32 {
        self.properties.u32("sdma_fw_version")
    }

    /// The compute engine's most clock, in MHz.
    pub fn max_engine_clock_mhz(&self) -> u32 {
        self.properties.u32("max_engine_clk_fcompute")
    }

    /// Bytes of the GPU's own memory: its frame-buffer banks.
    pub fn vram_bytes(&self) -> u64 {
        self.mem_banks
            .iter()
            .filter(|b| {
                matches!(
                    b.heap_type,
                    HEAP_FRAME_BUFFER_PUBLIC | HEAP_FRAME_BUFFER_PRIVATE
                )
            })
            .fold(0u64, |sum, b| sum.saturating_add(b.size_in_bytes))
    }

    /// Bytes of the GPU's own memory the host reaches through KFD (host-visible, PUBLIC
    /// VRAM): its public frame-buffer banks. 0 on a GPU whose BAR is smaller than its VRAM,
    /// where KFD lists the VRAM as private and gives no PUBLIC VRAM
    /// ([`HEAP_FRAME_BUFFER_PRIVATE`]).
    pub fn host_visible_vram_bytes(&self) -> u64 {
        self.mem_banks
            .iter()
            .filter(|b| b.heap_type == HEAP_FRAME_BUFFER_PUBLIC)
            .fold(0u64, |sum, b| sum.saturating_add(b.size_in_bytes))
    }

    /// Bytes of L2 and MALL together, as the kernel states its caches; `None` if it states
    /// no L2.
    pub fn cache_bytes(&self) -> Option<u64> {
        let l2 = self.caches.iter().filter(|c| c.level == 2);
        l2.clone().next()?;
        let l3 = self.caches.iter().filter(|c| c.level == 3);
        Some(
            l2.chain(l3)
                .fold(0u64, |sum, c| sum.saturating_add(c.bytes)),
        )
    }

    /// Shader engines across the GPU.
    pub fn shader_engines(&self) -> u32 {
        self.array_count()
            .checked_div(self.simd_arrays_per_engine())
            .unwrap_or(0)
    }

    /// The work-group processors that run work, per shader engine and array: KFD states
    /// counts, not which processors are fused off, so every processor of each array is set
    /// (the rule for processors a path cannot read); `hal` says how many compute units
    /// a processor has.
    pub fn wgps(&self, hal: &rig_amd::hal::Hal) -> Vec<Vec<u32>> {
        let mask = hal.wgp_mask(self.cu_per_simd_array());
        vec![vec![mask; self.simd_arrays_per_engine() as usize]; self.shader_engines() as usize]
    }

    /// The table entry rig drives this GPU as, or why it does not drive it.
    pub fn gpu(&self) -> Result<&'static Gpu, NotDriven> {
        let processor = self.processor_name();
        let major = self.gfx_target_version() / 10000;
        let Some(_) = u8::try_from(major).ok().and_then(Generation::of_major) else {
            return Err(NotDriven::Generation { processor, major });
        };
        let gpu = Gpu::by_name(&processor).ok_or(NotDriven::Unknown {
            processor: processor.clone(),
        })?;
        // gfx9 nodes report 64; GFX11/12 report 32 (their default), as the table.
        let found = self.wave_front_size();
        if found != gpu.wave_size {
            return Err(NotDriven::WaveSize {
                processor,
                found,
                table: gpu.wave_size,
            });
        }
        Ok(gpu)
    }
}

fn read_file(path: &Path) -> Result<String, TopologyError> {
    use std::io::Read;
    let read_err = |source| TopologyError::Read {
        path: path.to_owned(),
        source,
    };
    let f = std::fs::File::open(path).map_err(read_err)?;
    let mut text = String::new();
    f.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read_err)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(TopologyError::TooLarge {
            path: path.to_owned(),
        });
    }
    Ok(text)
}

fn read_properties(path: &Path) -> Result<Properties, TopologyError> {
    Properties::parse(path, &read_file(path)?)
}

/// The numbered subdirectories of `dir`, in number order; none if `dir` is absent.
fn numbered(
    dir: &Path,
    what: &'static str,
    limit: usize,
) -> Result<Vec<(u32, PathBuf)>, TopologyError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(TopologyError::Read {
                path: dir.to_owned(),
                source,
            });
        }
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|source| TopologyError::Read {
            path: dir.to_owned(),
            source,
        })?;
        let Some(n) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if out.len() == limit {
            return Err(TopologyError::TooMany {
                path: dir.to_owned(),
                what,
                limit,
            });
        }
        out.push((n, e.path()));
    }
    out.sort();
    Ok(out)
}

/// Reads every node under `root` (such as [`SYSFS_ROOT`]), in node order.
pub fn read(root: &Path) -> Result<Vec<Node>, TopologyError> {
    let mut nodes = Vec::new();
    for (index, dir) in numbered(&root.join("nodes"), "nodes", MAX_NODES)? {
        let gpu_id_path = dir.join("gpu_id");
        let gpu_id_text = read_file(&gpu_id_path)?;
        let gpu_id = gpu_id_text
            .trim()
            .parse()
            .map_err(|_| TopologyError::Parse {
                path: gpu_id_path.clone(),
                line: 1,
                text: gpu_id_text.trim().chars().take(80).collect(),
            })?;
        let name = match read_file(&dir.join("name")) {
            Ok(n) => n.trim().to_owned(),
            Err(_) => String::new(),
        };
        let properties = read_properties(&dir.join("properties"))?;
        let mut mem_banks = Vec::new();
        for (_, bank) in numbered(&dir.join("mem_banks"), "memory banks", MAX_ENTRIES)? {
            let p = read_properties(&bank.join("properties"))?;
            mem_banks.push(MemBank {
                heap_type: p.u32("heap_type"),
                size_in_bytes: p.u64("size_in_bytes"),
                width: p.u32("width"),
                mem_clk_max: p.u32("mem_clk_max"),
            });
        }
        let mut caches = Vec::new();
        for (_, cache) in numbered(&dir.join("caches"), "caches", MAX_ENTRIES)? {
            let p = read_properties(&cache.join("properties"))?;
            caches.push(Cache {
                level: p.u32("level"),
                bytes: p.u64("size").saturating_mul(1024),
                line_bytes: p.u32("cache_line_size"),
                kind: p.u32("type"),
            });
        }
        nodes.push(Node {
            index,
            gpu_id,
            name,
            properties,
            mem_banks,
            caches,
        });
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_banks(banks: &[(u32, u64)]) -> Node {
        Node {
            index: 1,
            gpu_id: 1,
            name: "gfx1100".into(),
            properties: Properties(BTreeMap::new()),
            mem_banks: banks
                .iter()
                .map(|&(heap_type, size_in_bytes)| MemBank {
                    heap_type,
                    size_in_bytes,
                    width: 256,
                    mem_clk_max: 1250,
                })
                .collect(),
            caches: Vec::new(),
        }
    }

    #[test]
    fn host_visible_vram_is_the_public_banks() {
        // A large BAR: one public bank of all the VRAM.
        let large = with_banks(&[(HEAP_FRAME_BUFFER_PUBLIC, 24 << 30)]);
        assert_eq!(large.vram_bytes(), 24 << 30);
        assert_eq!(large.host_visible_vram_bytes(), 24 << 30);
        // A small BAR: all of it private, none host-visible through KFD.
        let small = with_banks(&[(HEAP_FRAME_BUFFER_PRIVATE, 24 << 30)]);
        assert_eq!(small.vram_bytes(), 24 << 30);
        assert_eq!(small.host_visible_vram_bytes(), 0);
        assert_eq!(
            with_banks(&[(HEAP_SYSTEM, 1 << 30)]).host_visible_vram_bytes(),
            0
        );
    }
}
