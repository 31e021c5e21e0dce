//! The IP discovery table: the binary that names, in VRAM, each IP block of an AMD GPU with its
//! version and the base addresses of its register segments.
//!
//! The firmware leaves the table 64 KiB below the top of VRAM ([`TMR_OFFSET`]; VRAM's size is
//! `RCC_CONFIG_MEMSIZE`, in MiB), and amdgpu reads [`TMR_SIZE`] bytes of it. Its layout is
//! Linux's `discovery.h` (all little-endian and packed):
//!
//! - `binary_header`: a signature ([`BINARY_SIGNATURE`]), a version, a 16-bit byte sum of the
//!   binary after the sum's own field, the binary's size, and a list of six tables
//!   (`table_info`: offset, byte sum, size), of which rig reads three: IP discovery, GC and
//!   harvest. An offset of 0 means the table is absent.
//! - `ip_discovery_header` ([`IP_TABLE_SIGNATURE`], version 1 to 4, size, up to 16 dies, each
//!   with a `die_info` offset to a `die_header`), with bit 0 of its last word saying (version 4)
//!   that base addresses are 64-bit.
//! - per die, `num_ips` entries of `ip` (v1/v2) or `ip_v3`/`ip_v4`: a hardware id, an instance,
//!   major/minor/revision, a byte that is the harvest nibble (v1/v2) or sub-revision and variant
//!   (v3/v4), and `num_base_address` base addresses (dword addresses of the register segments).
//! - `gc_info` ([`GC_TABLE_ID`]) and the harvest table ([`HARVEST_SIGNATURE`]).
//!
//! [`Discovery::parse`] checks what amdgpu checks (signatures and byte sums) and, unlike
//! amdgpu, every offset and count against the binary's bounds; an error names the field.
//! [`Discovery::to_bytes`] builds the binary (the register-level model places it in VRAM), and
//! [`Blocks::of`] chooses, from the versions the table names, the blocks the bring-up drives
//! and the register tables ([`crate::mmio`]) and firmware names that go with them.

use thiserror::Error;

use crate::gpu::{Generation, IpVersion};
use crate::mmio::{self, Table};

/// `BINARY_SIGNATURE`.
pub const BINARY_SIGNATURE: u32 = 0x2821_1407;
/// `DISCOVERY_TABLE_SIGNATURE` ("IPDS").
pub const IP_TABLE_SIGNATURE: u32 = 0x5344_5049;
/// `GC_TABLE_ID`.
pub const GC_TABLE_ID: u32 = 0x4347;
/// `HARVEST_TABLE_SIGNATURE` ("HARV").
pub const HARVEST_SIGNATURE: u32 = 0x5652_4148;
/// `DISCOVERY_TMR_OFFSET`: the table starts this far below the top of VRAM.
pub const TMR_OFFSET: u64 = 64 << 10;
/// `DISCOVERY_TMR_SIZE`: the bytes amdgpu reads.
pub const TMR_SIZE: usize = 10 << 10;
/// The most dies an `ip_discovery_header` lists.
pub const MAX_DIES: usize = 16;
/// Entries of the harvest table.
pub const HARVEST_ENTRIES: usize = 32;

const BINARY_HEADER: usize = 12 + 6 * 8;
const IP_HEADER: usize = 16 + MAX_DIES * 4 + 2;
const GC_HEADER: usize = 12;
const HARVEST_TABLE: usize = 8 + HARVEST_ENTRIES * 4;
// table_list indices (`enum table`).
const TABLE_IP: usize = 0;
const TABLE_GC: usize = 1;
const TABLE_HARVEST: usize = 2;

/// Hardware ids (`soc15_hw_ip.h`) of the blocks rig reads.
pub mod hw_id {
    /// MP1, the SMU.
    pub const MP1: u16 = 1;
    /// SMUIO.
    pub const SMUIO: u16 = 4;
    /// GC, graphics and compute.
    pub const GC: u16 = 11;
    /// UVD/VCN.
    pub const VCN: u16 = 12;
    /// The multimedia hub.
    pub const MMHUB: u16 = 34;
    /// ATHUB.
    pub const ATHUB: u16 = 35;
    /// OSSSYS (the interrupt handler).
    pub const OSSSYS: u16 = 40;
    /// The host data path.
    pub const HDP: u16 = 41;
    /// SDMA engine 0.
    pub const SDMA0: u16 = 42;
    /// SDMA engine 1.
    pub const SDMA1: u16 = 43;
    /// The data fabric.
    pub const DF: u16 = 46;
    /// SDMA engine 2.
    pub const SDMA2: u16 = 68;
    /// SDMA engine 3.
    pub const SDMA3: u16 = 69;
    /// NBIF, the northbridge interface (amdgpu's NBIO).
    pub const NBIF: u16 = 108;
    /// UMC, the memory controllers.
    pub const UMC: u16 = 150;
    /// MP0, the PSP.
    pub const MP0: u16 = 255;
}

/// Why a discovery binary was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DiscoveryError {
    /// A field or structure lies past what holds it.
    #[error("discovery {field} at byte {at} needs {need} bytes, past the end at {end}")]
    Outside {
        /// The field or structure.
        field: &'static str,
        /// Where it starts.
        at: usize,
        /// Its bytes.
        need: usize,
        /// The end of what must hold it (the binary's `binary_size`, or the buffer).
        end: usize,
    },
    /// A signature or table id is not the one its structure has.
    #[error("discovery {field} is {found:#x}, not {expected:#x}")]
    Signature {
        /// The field.
        field: &'static str,
        /// What it holds.
        found: u32,
        /// What it must hold.
        expected: u32,
    },
    /// A byte sum does not match its data.
    #[error("discovery {field} is {stored:#06x} but the bytes sum to {computed:#06x}")]
    Checksum {
        /// The sum's field.
        field: &'static str,
        /// The stored sum.
        stored: u16,
        /// The sum of the bytes it covers.
        computed: u16,
    },
    /// A version, count or size this format does not allow (or, building, does not fit).
    #[error("discovery {field} is {value}, outside {allowed}")]
    Value {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// What is allowed.
        allowed: &'static str,
    },
    /// The table names no instance 0 of a block the bring-up needs.
    #[error("the discovery table names no {block} (hardware id {hw_id}) on die 0")]
    Missing {
        /// The block's name.
        block: &'static str,
        /// Its hardware id.
        hw_id: u16,
    },
    /// The table names a version of a block that rig does not drive.
    #[error("{block} {version} is not a version rig drives")]
    Unsupported {
        /// The block's name.
        block: &'static str,
        /// The version the table names.
        version: IpVersion,
    },
}

/// One IP block instance of a die.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ip {
    /// `hw_id` ([`hw_id`]).
    pub hw_id: u16,
    /// `number_instance` / `instance_number`.
    pub instance: u8,
    /// `major`, `minor`, `revision`.
    pub version: IpVersion,
    /// The byte after `revision`: the harvest nibble in bits 3:0 (table v1/v2), or the
    /// sub-revision in bits 3:0 and the variant in bits 7:4 (v3/v4).
    pub flags: u8,
    /// The base addresses, in dwords, as stored (64-bit ones widened only by the format).
    pub bases: Vec<u64>,
}

impl Ip {
    /// The segment bases as amdgpu keeps them: 32-bit ones as stored, 64-bit ones cut to
    /// their low 30 bits (a dword address in a 4 GiB space; amdgpu drops the ASIC-specific
    /// high bits).
    pub fn segment_bases(&self, base_addr_64: bool) -> Vec<u32> {
        self.bases
            .iter()
            .map(|&b| {
                if base_addr_64 {
                    (b & 0x3fff_ffff) as u32
                } else {
                    b as u32
                }
            })
            .collect()
    }
}

/// One die's blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Die {
    /// `die_id`.
    pub id: u16,
    /// Its blocks, in table order.
    pub ips: Vec<Ip>,
}

/// The GC table: `gpu_info_header` and the words of its `gc_info_v*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcInfo {
    /// `version_major`, `version_minor` (1.x for GFX10+, 2.x for GFX9).
    pub version: (u16, u16),
    /// The table's words after its header, in `gc_info_v*` order (`gc_num_se` first).
    pub words: Vec<u32>,
}

impl GcInfo {
    /// `gc_num_se`.
    pub fn num_se(&self) -> Option<u32> {
        self.words.first().copied()
    }

    /// `gc_wave_size` (word 11 of every version).
    pub fn wave_size(&self) -> Option<u32> {
        self.words.get(11).copied()
    }

    /// `gc_lds_size` (word 14 of every version).
    pub fn lds_size(&self) -> Option<u32> {
        self.words.get(14).copied()
    }
}

/// A parsed (or to-be-built) IP discovery binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// `binary_header.version_major`, `version_minor`.
    pub version: (u16, u16),
    /// `ip_discovery_header.version` (1 to 4): decides what an entry's flags byte means.
    pub table_version: u16,
    /// `ip_discovery_header.id`.
    pub table_id: u32,
    /// Base addresses are 64-bit (`base_addr_64_bit`; table version 4 only).
    pub base_addr_64: bool,
    /// The dies, in `die_info` order.
    pub dies: Vec<Die>,
    /// The GC table, if the binary has one.
    pub gc: Option<GcInfo>,
    /// The harvest table's entries before the first of `hw_id` 0, as (hw_id, instance), if
    /// the binary has one.
    pub harvest: Option<Vec<(u16, u8)>>,
}

/// The 16-bit byte sum amdgpu checks (`amdgpu_discovery_calculate_checksum`).
pub fn checksum(bytes: &[u8]) -> u16 {
    bytes
        .iter()
        .fold(0u16, |s, &b| s.wrapping_add(u16::from(b)))
}

struct Bin<'a> {
    bytes: &'a [u8],
}

impl Bin<'_> {
    fn at(&self, field: &'static str, at: usize, need: usize) -> Result<&[u8], DiscoveryError> {
        let end = self.bytes.len();
        at.checked_add(need)
            .and_then(|e| self.bytes.get(at..e))
            .ok_or(DiscoveryError::Outside {
                field,
                at,
                need,
                end,
            })
    }

    fn u8(&self, field: &'static str, at: usize) -> Result<u8, DiscoveryError> {
        Ok(self.at(field, at, 1)?[0])
    }

    fn u16(&self, field: &'static str, at: usize) -> Result<u16, DiscoveryError> {
        let b = self.at(field, at, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&self, field: &'static str, at: usize) -> Result<u32, DiscoveryError> {
        let b = self.at(field, at, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&self, field: &'static str, at: usize) -> Result<u64, DiscoveryError> {
        let b = self.at(field, at, 8)?;
        Ok(u64::from_le_bytes([
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
        ]))
    }

    fn summed(
        &self,
        field: &'static str,
        at: usize,
        size: usize,
        stored: u16,
    ) -> Result<(), DiscoveryError> {
        let computed = checksum(self.at(field, at, size)?);
        if computed != stored {
            return Err(DiscoveryError::Checksum {
                field,
                stored,
                computed,
            });
        }
        Ok(())
    }
}

fn signature(field: &'static str, found: u32, expected: u32) -> Result<(), DiscoveryError> {
    if found != expected {
        return Err(DiscoveryError::Signature {
            field,
            found,
            expected,
        });
    }
    Ok(())
}

impl Discovery {
    /// Parses a discovery binary (the bytes from its start; more may follow).
    pub fn parse(bytes: &[u8]) -> Result<Self, DiscoveryError> {
        let all = Bin { bytes };
        signature(
            "binary_signature",
            all.u32("binary_signature", 0)?,
            BINARY_SIGNATURE,
        )?;
        let size = usize::from(all.u16("binary_size", 10)?);
        all.at("binary_size", 0, size)?;
        if size < BINARY_HEADER {
            return Err(DiscoveryError::Value {
                field: "binary_size",
                value: size as u64,
                allowed: "the binary header's 60 bytes or more",
            });
        }
        // From here every read is bounded by binary_size, not by the buffer.
        let b = Bin {
            bytes: &bytes[..size],
        };
        // The sum covers the binary after the sum's own field (bytes 10..binary_size).
        b.summed(
            "binary_checksum",
            10,
            size - 10,
            b.u16("binary_checksum", 8)?,
        )?;
        let version = (b.u16("version_major", 4)?, b.u16("version_minor", 6)?);
        let info = |i: usize| -> Result<(usize, u16), DiscoveryError> {
            let at = 12 + 8 * i;
            Ok((
                usize::from(b.u16("table_info.offset", at)?),
                b.u16("table_info.checksum", at + 2)?,
            ))
        };

        let (ip_at, ip_sum) = info(TABLE_IP)?;
        if ip_at == 0 {
            return Err(DiscoveryError::Value {
                field: "table_list[IP_DISCOVERY].offset",
                value: 0,
                allowed: "a table's offset (the IP discovery table is required)",
            });
        }
        signature(
            "ip_discovery_header.signature",
            b.u32("ip_discovery_header.signature", ip_at)?,
            IP_TABLE_SIGNATURE,
        )?;
        let table_version = b.u16("ip_discovery_header.version", ip_at + 4)?;
        if !(1..=4).contains(&table_version) {
            return Err(DiscoveryError::Value {
                field: "ip_discovery_header.version",
                value: table_version.into(),
                allowed: "1 to 4",
            });
        }
        let ip_size = usize::from(b.u16("ip_discovery_header.size", ip_at + 6)?);
        b.at("ip_discovery_header", ip_at, IP_HEADER.max(ip_size))?;
        b.summed("table_list[IP_DISCOVERY].checksum", ip_at, ip_size, ip_sum)?;
        let table_id = b.u32("ip_discovery_header.id", ip_at + 8)?;
        let num_dies = usize::from(b.u16("ip_discovery_header.num_dies", ip_at + 12)?);
        if num_dies > MAX_DIES {
            return Err(DiscoveryError::Value {
                field: "ip_discovery_header.num_dies",
                value: num_dies as u64,
                allowed: "0 to 16",
            });
        }
        let base_addr_64 = b.u8("base_addr_64_bit", ip_at + IP_HEADER - 2)? & 1 == 1;
        let width = if base_addr_64 { 8 } else { 4 };
        let mut dies = Vec::with_capacity(num_dies);
        for d in 0..num_dies {
            let die_at = usize::from(b.u16("die_info.die_offset", ip_at + 16 + 4 * d + 2)?);
            let id = b.u16("die_header.die_id", die_at)?;
            let num_ips = b.u16("die_header.num_ips", die_at + 2)?;
            let mut at = die_at + 4;
            let mut ips = Vec::with_capacity(usize::from(num_ips).min(size / 8));
            for _ in 0..num_ips {
                let n = usize::from(b.u8("ip.num_base_address", at + 3)?);
                b.at("ip.base_address", at + 8, n * width)?;
                let bases = (0..n)
                    .map(|k| {
                        let a = at + 8 + k * width;
                        if base_addr_64 {
                            b.u64("ip.base_address_64", a)
                        } else {
                            b.u32("ip.base_address", a).map(u64::from)
                        }
                    })
                    .collect::<Result<_, _>>()?;
                ips.push(Ip {
                    hw_id: b.u16("ip.hw_id", at)?,
                    instance: b.u8("ip.instance_number", at + 2)?,
                    version: IpVersion::new(
                        b.u8("ip.major", at + 4)?,
                        b.u8("ip.minor", at + 5)?,
                        b.u8("ip.revision", at + 6)?,
                    ),
                    flags: b.u8("ip.flags", at + 7)?,
                    bases,
                });
                at += 8 + n * width;
            }
            dies.push(Die { id, ips });
        }

        let (gc_at, gc_sum) = info(TABLE_GC)?;
        let gc = if gc_at == 0 {
            None
        } else {
            signature(
                "gpu_info_header.table_id",
                b.u32("gpu_info_header.table_id", gc_at)?,
                GC_TABLE_ID,
            )?;
            let gc_size = b.u32("gpu_info_header.size", gc_at + 8)? as usize;
            if gc_size < GC_HEADER {
                return Err(DiscoveryError::Value {
                    field: "gpu_info_header.size",
                    value: gc_size as u64,
                    allowed: "its 12-byte header or more",
                });
            }
            b.summed("table_list[GC].checksum", gc_at, gc_size, gc_sum)?;
            let words = (0..(gc_size - GC_HEADER) / 4)
                .map(|i| b.u32("gc_info", gc_at + GC_HEADER + 4 * i))
                .collect::<Result<_, _>>()?;
            Some(GcInfo {
                version: (
                    b.u16("gpu_info_header.version_major", gc_at + 4)?,
                    b.u16("gpu_info_header.version_minor", gc_at + 6)?,
                ),
                words,
            })
        };

        let (hv_at, hv_sum) = info(TABLE_HARVEST)?;
        let harvest = if hv_at == 0 {
            None
        } else {
            signature(
                "harvest_info_header.signature",
                b.u32("harvest_info_header.signature", hv_at)?,
                HARVEST_SIGNATURE,
            )?;
            b.summed(
                "table_list[HARVEST_INFO].checksum",
                hv_at,
                HARVEST_TABLE,
                hv_sum,
            )?;
            let mut list = Vec::new();
            for i in 0..HARVEST_ENTRIES {
                let e = hv_at + 8 + 4 * i;
                let hw = b.u16("harvest_info.hw_id", e)?;
                if hw == 0 {
                    break;
                }
                list.push((hw, b.u8("harvest_info.number_instance", e + 2)?));
            }
            Some(list)
        };

        Ok(Discovery {
            version,
            table_version,
            table_id,
            base_addr_64,
            dies,
            gc,
            harvest,
        })
    }

    /// The binary of this table, with its sums: binary header, IP discovery table (its header,
    /// then each die's header and entries), GC table, harvest table.
    pub fn to_bytes(&self) -> Result<Vec<u8>, DiscoveryError> {
        let value = |field, value: usize, allowed| DiscoveryError::Value {
            field,
            value: value as u64,
            allowed,
        };
        if self.dies.len() > MAX_DIES {
            return Err(value("dies", self.dies.len(), "0 to 16"));
        }
        if self.base_addr_64 && self.table_version < 4 {
            return Err(value(
                "table_version",
                self.table_version.into(),
                "4 when base addresses are 64-bit",
            ));
        }
        let width = if self.base_addr_64 { 8 } else { 4 };
        let mut out = vec![0u8; BINARY_HEADER];
        let u16_at = |out: &mut Vec<u8>, at: usize, v: u16| {
            out[at..at + 2].copy_from_slice(&v.to_le_bytes());
        };
        let u32_at = |out: &mut Vec<u8>, at: usize, v: u32| {
            out[at..at + 4].copy_from_slice(&v.to_le_bytes());
        };
        let small = |field, v: usize| u16::try_from(v).map_err(|_| value(field, v, "0 to 65535"));

        // IP discovery table.
        let ip_at = out.len();
        out.resize(ip_at + IP_HEADER, 0);
        for (d, die) in self.dies.iter().enumerate() {
            let die_at = small("die offset", out.len())?;
            u16_at(&mut out, ip_at + 16 + 4 * d, die.id);
            u16_at(&mut out, ip_at + 16 + 4 * d + 2, die_at);
            out.extend_from_slice(&die.id.to_le_bytes());
            out.extend_from_slice(&small("num_ips", die.ips.len())?.to_le_bytes());
            for ip in &die.ips {
                let n = u8::try_from(ip.bases.len())
                    .map_err(|_| value("num_base_address", ip.bases.len(), "0 to 255"))?;
                out.extend_from_slice(&ip.hw_id.to_le_bytes());
                out.extend_from_slice(&[
                    ip.instance,
                    n,
                    ip.version.major,
                    ip.version.minor,
                    ip.version.stepping,
                    ip.flags,
                ]);
                for &base in &ip.bases {
                    if width == 8 {
                        out.extend_from_slice(&base.to_le_bytes());
                    } else {
                        let b = u32::try_from(base)
                            .map_err(|_| value("base_address", base as usize, "32 bits"))?;
                        out.extend_from_slice(&b.to_le_bytes());
                    }
                }
            }
        }
        let ip_size = out.len() - ip_at;
        u32_at(&mut out, ip_at, IP_TABLE_SIGNATURE);
        u16_at(&mut out, ip_at + 4, self.table_version);
        u16_at(
            &mut out,
            ip_at + 6,
            small("ip_discovery_header.size", ip_size)?,
        );
        u32_at(&mut out, ip_at + 8, self.table_id);
        u16_at(&mut out, ip_at + 12, small("num_dies", self.dies.len())?);
        out[ip_at + IP_HEADER - 2] = u8::from(self.base_addr_64);
        let mut tables = vec![(ip_at, ip_size)];

        // GC table.
        if let Some(gc) = &self.gc {
            let at = out.len();
            let size = GC_HEADER + 4 * gc.words.len();
            out.extend_from_slice(&GC_TABLE_ID.to_le_bytes());
            out.extend_from_slice(&gc.version.0.to_le_bytes());
            out.extend_from_slice(&gc.version.1.to_le_bytes());
            out.extend_from_slice(&(size as u32).to_le_bytes());
            for w in &gc.words {
                out.extend_from_slice(&w.to_le_bytes());
            }
            tables.push((at, size));
        } else {
            tables.push((0, 0));
        }

        // Harvest table.
        if let Some(list) = &self.harvest {
            if list.len() > HARVEST_ENTRIES || list.iter().any(|&(hw, _)| hw == 0) {
                return Err(value(
                    "harvest",
                    list.len(),
                    "at most 32 entries, none of hardware id 0",
                ));
            }
            let at = out.len();
            out.resize(at + HARVEST_TABLE, 0);
            u32_at(&mut out, at, HARVEST_SIGNATURE);
            for (i, &(hw, inst)) in list.iter().enumerate() {
                u16_at(&mut out, at + 8 + 4 * i, hw);
                out[at + 8 + 4 * i + 2] = inst;
            }
            tables.push((at, HARVEST_TABLE));
        } else {
            tables.push((0, 0));
        }

        if out.len() > TMR_SIZE {
            return Err(value(
                "binary",
                out.len(),
                "at most the 10 KiB amdgpu reads",
            ));
        }
        for (i, &(at, size)) in tables.iter().enumerate() {
            let sum = if at == 0 {
                0
            } else {
                checksum(&out[at..at + size])
            };
            let e = 12 + 8 * i;
            u16_at(&mut out, e, at as u16);
            u16_at(&mut out, e + 2, sum);
            u16_at(&mut out, e + 4, size as u16);
        }
        u32_at(&mut out, 0, BINARY_SIGNATURE);
        u16_at(&mut out, 4, self.version.0);
        u16_at(&mut out, 6, self.version.1);
        let size = out.len() as u16;
        u16_at(&mut out, 10, size);
        let sum = checksum(&out[10..]);
        u16_at(&mut out, 8, sum);
        Ok(out)
    }

    /// Instance `instance` of the block `hw_id` on the first die.
    pub fn ip(&self, hw_id: u16, instance: u8) -> Option<&Ip> {
        self.dies
            .first()?
            .ips
            .iter()
            .find(|ip| ip.hw_id == hw_id && ip.instance == instance)
    }
}

/// The PSP block amdgpu uses for an MP0 version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Psp {
    /// `psp_v13_0.c` (MP0 13.0.0, 13.0.6), registers `MP0_SMN_C2PMSG_*`.
    V13_0,
    /// `psp_v14_0.c` (MP0 14.0.3), registers `MPASP_SMN_C2PMSG_*`.
    V14_0,
}

/// The interrupt handler block amdgpu uses for an OSSSYS version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ih {
    /// `vega20_ih.c` (OSSSYS 4.4.2).
    Vega20,
    /// `ih_v6_0.c` (OSSSYS 6.0.0).
    V6_0,
    /// `ih_v7_0.c` (OSSSYS 7.0.0).
    V7_0,
}

/// What the bring-up drives on a GPU, chosen from the versions its discovery table names
/// (die 0, instance 0 of each block), as amdgpu's `amdgpu_discovery_set_*_ip_blocks` and the
/// blocks' own version switches choose.
#[derive(Debug, Clone, Copy)]
pub struct Blocks {
    /// The GC version.
    pub gc: IpVersion,
    /// Its generation.
    pub generation: Generation,
    /// The MP0 (PSP) version and its block.
    pub psp: (IpVersion, Psp),
    /// The MP1 (SMU) version.
    pub smu: IpVersion,
    /// The SDMA engine 0 version.
    pub sdma: IpVersion,
    /// The OSSSYS version and its interrupt handler.
    pub ih: (IpVersion, Ih),
    /// The MMHUB version.
    pub mmhub: IpVersion,
    /// The HDP version.
    pub hdp: IpVersion,
    /// The NBIO version.
    pub nbio: IpVersion,
    /// The register tables of those blocks.
    pub regs: BlockRegs,
}

/// The register table ([`crate::mmio`]) of each block the bring-up touches.
#[derive(Debug, Clone, Copy)]
pub struct BlockRegs {
    /// GC (GRBM, CP, HQD, the GC hub).
    pub gc: &'static Table,
    /// MP0's C2P mailbox.
    pub mp0: &'static Table,
    /// MP1's message mailbox.
    pub mp1: &'static Table,
    /// OSSSYS's IH ring.
    pub osssys: &'static Table,
    /// MMHUB's VM contexts.
    pub mmhub: &'static Table,
    /// HDP.
    pub hdp: &'static Table,
    /// NBIO's HDP flush and memory size.
    pub nbio: &'static Table,
}

fn v(major: u8, minor: u8, stepping: u8) -> IpVersion {
    IpVersion::new(major, minor, stepping)
}

fn mmio(name: &str) -> &'static Table {
    // PANIC: every name below is a table the generator writes (checked by a test).
    mmio::table(name).unwrap_or_else(|| panic!("no register table {name}"))
}

impl Blocks {
    /// The blocks of the GPU whose table is `d`.
    pub fn of(d: &Discovery) -> Result<Blocks, DiscoveryError> {
        let version = |block: &'static str, hw_id: u16| {
            d.ip(hw_id, 0)
                .map(|ip| ip.version)
                .ok_or(DiscoveryError::Missing { block, hw_id })
        };
        let unsupported = |block, version| DiscoveryError::Unsupported { block, version };
        let gc = version("GC", hw_id::GC)?;
        let (generation, gc_regs) = match (gc.major, gc.minor, gc.stepping) {
            (9, 4, 3) => (Generation::Gfx9, "gc_9_4_3"),
            (11, 0, 0) => (Generation::Gfx11, "gc_11_0_0"),
            // GC 12.0.1 uses gc_12_0_0's header (gfx_v12_0.c).
            (12, 0, 1) => (Generation::Gfx12, "gc_12_0_0"),
            _ => return Err(unsupported("GC", gc)),
        };
        let mp0 = version("MP0", hw_id::MP0)?;
        // psp_v13_0.c reads mp_13_0_2's registers for every MP0 13.x it drives.
        let (psp, mp0_regs) = match (mp0.major, mp0.minor, mp0.stepping) {
            (13, 0, 0 | 6) => (Psp::V13_0, "mp_13_0_2"),
            (14, 0, 3) => (Psp::V14_0, "mp_14_0_2"),
            _ => return Err(unsupported("MP0", mp0)),
        };
        let smu = version("MP1", hw_id::MP1)?;
        let mp1_regs = match (smu.major, smu.minor, smu.stepping) {
            (13, 0, 0) => "mp_13_0_0",
            (13, 0, 6) => "mp_13_0_6",
            (14, 0, 3) => "mp_14_0_2_smu",
            _ => return Err(unsupported("MP1", smu)),
        };
        let sdma = version("SDMA0", hw_id::SDMA0)?;
        if ![v(4, 4, 2), v(6, 0, 0), v(7, 0, 1)].contains(&sdma) {
            return Err(unsupported("SDMA0", sdma));
        }
        let oss = version("OSSSYS", hw_id::OSSSYS)?;
        // vega20_ih.c includes osssys_4_2_0's header for OSSSYS 4.4.2.
        let (ih, oss_regs) = match (oss.major, oss.minor, oss.stepping) {
            (4, 4, 2) => (Ih::Vega20, "osssys_4_2_0"),
            (6, 0, 0) => (Ih::V6_0, "osssys_6_0_0"),
            (7, 0, 0) => (Ih::V7_0, "osssys_7_0_0"),
            _ => return Err(unsupported("OSSSYS", oss)),
        };
        let mmhub = version("MMHUB", hw_id::MMHUB)?;
        let mmhub_regs = match (mmhub.major, mmhub.minor, mmhub.stepping) {
            (1, 8, 0) => "mmhub_1_8_0",
            (3, 0, 0) => "mmhub_3_0_0",
            (4, 1, 0) => "mmhub_4_1_0",
            _ => return Err(unsupported("MMHUB", mmhub)),
        };
        let hdp = version("HDP", hw_id::HDP)?;
        // hdp_v4_0.c serves HDP 4.4.2 with hdp_4_0's header.
        let hdp_regs = match (hdp.major, hdp.minor, hdp.stepping) {
            (4, 4, 2) => "hdp_4_0",
            (6, 0, 0) => "hdp_6_0_0",
            (7, 0, 0) => "hdp_7_0_0",
            _ => return Err(unsupported("HDP", hdp)),
        };
        let nbio = version("NBIO", hw_id::NBIF)?;
        let nbio_regs = match (nbio.major, nbio.minor, nbio.stepping) {
            (4, 3, 0) => "nbio_4_3_0",
            (6, 3, 1) => "nbif_6_3_1",
            (7, 9, 0) => "nbio_7_9_0",
            _ => return Err(unsupported("NBIO", nbio)),
        };
        Ok(Blocks {
            gc,
            generation,
            psp: (mp0, psp),
            smu,
            sdma,
            ih: (oss, ih),
            mmhub,
            hdp,
            nbio,
            regs: BlockRegs {
                gc: mmio(gc_regs),
                mp0: mmio(mp0_regs),
                mp1: mmio(mp1_regs),
                osssys: mmio(oss_regs),
                mmhub: mmio(mmhub_regs),
                hdp: mmio(hdp_regs),
                nbio: mmio(nbio_regs),
            },
        })
    }

    /// The stems of the firmware files the GPU needs, as amdgpu names them from the
    /// versions: `gc_11_0_0` (then `_me.bin`, `_mec.bin`, ...), `psp_13_0_0`, `sdma_6_0_0`,
    /// `smu_13_0_0`.
    pub fn firmware(&self) -> [String; 4] {
        let stem = |p: &str, v: IpVersion| format!("{p}_{}_{}_{}", v.major, v.minor, v.stepping);
        [
            stem("gc", self.gc),
            stem("psp", self.psp.0),
            stem("sdma", self.sdma),
            stem("smu", self.smu),
        ]
    }
}

/// The block versions (die 0, instance 0) of the GPUs the bring-up drives, by processor: the
/// versions whose firmware Debian ships under these names and whose blocks amdgpu's
/// discovery code lists for them. The register-level model's tables are made from these;
/// a first run on each real GPU must confirm them against its own table.
pub fn chip_versions(processor: &str) -> Option<&'static [(u16, IpVersion)]> {
    use hw_id::*;
    const fn iv(major: u8, minor: u8, stepping: u8) -> IpVersion {
        IpVersion::new(major, minor, stepping)
    }
    const GFX1100: &[(u16, IpVersion)] = &[
        (GC, iv(11, 0, 0)),
        (MP0, iv(13, 0, 0)),
        (MP1, iv(13, 0, 0)),
        (SDMA0, iv(6, 0, 0)),
        (SDMA1, iv(6, 0, 0)),
        (OSSSYS, iv(6, 0, 0)),
        (MMHUB, iv(3, 0, 0)),
        (HDP, iv(6, 0, 0)),
        (NBIF, iv(4, 3, 0)),
    ];
    const GFX1201: &[(u16, IpVersion)] = &[
        (GC, iv(12, 0, 1)),
        (MP0, iv(14, 0, 3)),
        (MP1, iv(14, 0, 3)),
        (SDMA0, iv(7, 0, 1)),
        (SDMA1, iv(7, 0, 1)),
        (OSSSYS, iv(7, 0, 0)),
        (MMHUB, iv(4, 1, 0)),
        (HDP, iv(7, 0, 0)),
        (NBIF, iv(6, 3, 1)),
    ];
    const GFX942: &[(u16, IpVersion)] = &[
        (GC, iv(9, 4, 3)),
        (MP0, iv(13, 0, 6)),
        (MP1, iv(13, 0, 6)),
        (SDMA0, iv(4, 4, 2)),
        (SDMA1, iv(4, 4, 2)),
        (OSSSYS, iv(4, 4, 2)),
        (MMHUB, iv(1, 8, 0)),
        (HDP, iv(4, 4, 2)),
        (NBIF, iv(7, 9, 0)),
    ];
    match processor {
        "gfx1100" => Some(GFX1100),
        "gfx1201" => Some(GFX1201),
        "gfx942" => Some(GFX942),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A table for `processor` as the model builds one: each block of [`chip_versions`] with
    /// two segment bases (arbitrary here), a GC table and a harvest table.
    fn table(processor: &str, table_version: u16, base_addr_64: bool) -> Discovery {
        let ips = chip_versions(processor)
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, &(hw_id, version))| Ip {
                hw_id,
                instance: 0,
                version,
                flags: 0,
                bases: vec![0x1000 * (i as u64 + 1), 0x0240_0000 + i as u64],
            })
            .collect();
        Discovery {
            version: (1, 0),
            table_version,
            table_id: 0,
            base_addr_64,
            dies: vec![Die { id: 0, ips }],
            gc: Some(GcInfo {
                version: (1, 0),
                words: (0..19).collect(),
            }),
            harvest: Some(vec![(hw_id::VCN, 1)]),
        }
    }

    #[test]
    fn a_built_table_parses_back_to_itself() {
        for p in ["gfx1100", "gfx1201", "gfx942"] {
            for (version, wide) in [(1, false), (3, false), (4, false), (4, true)] {
                let t = table(p, version, wide);
                let bytes = t.to_bytes().unwrap();
                assert!(bytes.len() <= TMR_SIZE);
                assert_eq!(Discovery::parse(&bytes).unwrap(), t, "{p} v{version}");
                // What follows the binary in VRAM is not read.
                let mut padded = bytes.clone();
                padded.resize(TMR_SIZE, 0xa5);
                assert_eq!(Discovery::parse(&padded).unwrap(), t);
            }
        }
        // Absent tables stay absent.
        let mut t = table("gfx1100", 4, false);
        t.gc = None;
        t.harvest = None;
        assert_eq!(Discovery::parse(&t.to_bytes().unwrap()).unwrap(), t);
    }

    #[test]
    fn sixty_four_bit_bases_are_cut_as_amdgpu_cuts_them() {
        let mut t = table("gfx942", 4, true);
        t.dies[0].ips[0].bases = vec![0xffff_0000_c000_1260];
        let back = Discovery::parse(&t.to_bytes().unwrap()).unwrap();
        assert_eq!(back.dies[0].ips[0].segment_bases(true), vec![0x0000_1260]);
    }

    #[test]
    fn each_supported_gpu_chooses_its_blocks_tables_and_firmware() {
        let cases = [
            (
                "gfx1100",
                Generation::Gfx11,
                Psp::V13_0,
                Ih::V6_0,
                ["gc_11_0_0", "mp_13_0_2", "mp_13_0_0", "osssys_6_0_0"],
                ["mmhub_3_0_0", "hdp_6_0_0", "nbio_4_3_0"],
                ["gc_11_0_0", "psp_13_0_0", "sdma_6_0_0", "smu_13_0_0"],
            ),
            (
                "gfx1201",
                Generation::Gfx12,
                Psp::V14_0,
                Ih::V7_0,
                ["gc_12_0_0", "mp_14_0_2", "mp_14_0_2_smu", "osssys_7_0_0"],
                ["mmhub_4_1_0", "hdp_7_0_0", "nbif_6_3_1"],
                ["gc_12_0_1", "psp_14_0_3", "sdma_7_0_1", "smu_14_0_3"],
            ),
            (
                "gfx942",
                Generation::Gfx9,
                Psp::V13_0,
                Ih::Vega20,
                ["gc_9_4_3", "mp_13_0_2", "mp_13_0_6", "osssys_4_2_0"],
                ["mmhub_1_8_0", "hdp_4_0", "nbio_7_9_0"],
                ["gc_9_4_3", "psp_13_0_6", "sdma_4_4_2", "smu_13_0_6"],
            ),
        ];
        for (p, generation, psp, ih, [gc, mp0, mp1, oss], [mm, hdp, nbio], firmware) in cases {
            let b = Blocks::of(&table(p, 4, false)).unwrap();
            assert_eq!(b.generation, generation, "{p}");
            assert_eq!(
                crate::gpu::Gpu::by_gc(b.gc).map(|g| g.name()),
                Some(p.to_string()),
                "{p}: the GC version is the processor's"
            );
            assert_eq!((b.psp.1, b.ih.1), (psp, ih), "{p}");
            let r = b.regs;
            assert_eq!(
                [r.gc.name, r.mp0.name, r.mp1.name, r.osssys.name],
                [gc, mp0, mp1, oss],
                "{p}"
            );
            assert_eq!(
                [r.mmhub.name, r.hdp.name, r.nbio.name],
                [mm, hdp, nbio],
                "{p}"
            );
            assert_eq!(b.firmware(), firmware.map(String::from), "{p}");
            // The PSP's mailbox registers the boot uses are in its table.
            let mailbox = match psp {
                Psp::V13_0 => "MP0_SMN_C2PMSG_",
                Psp::V14_0 => "MPASP_SMN_C2PMSG_",
            };
            for n in [35, 36, 64, 69, 70, 71, 81] {
                assert!(r.mp0.reg(&format!("{mailbox}{n}")).is_some(), "{p}: {n}");
            }
        }
    }

    #[test]
    fn a_table_without_a_block_or_with_another_version_is_refused_by_name() {
        let mut t = table("gfx1100", 4, false);
        t.dies[0].ips.retain(|ip| ip.hw_id != hw_id::MP0);
        assert_eq!(
            Blocks::of(&t).unwrap_err(),
            DiscoveryError::Missing {
                block: "MP0",
                hw_id: hw_id::MP0
            }
        );
        let mut t = table("gfx1100", 4, false);
        t.dies[0].ips[0].version = IpVersion::new(11, 0, 1);
        assert_eq!(
            Blocks::of(&t).unwrap_err(),
            DiscoveryError::Unsupported {
                block: "GC",
                version: IpVersion::new(11, 0, 1)
            }
        );
    }

    fn put16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_le_bytes());
    }

    /// Re-sums the binary after a change, so that a test reaches the check past the sum.
    /// Sums it cannot place (the damage hit their fields) are left as they are.
    fn resum(b: &mut [u8]) {
        let word = |b: &[u8], at: usize| {
            b.get(at..at + 2)
                .map(|w| usize::from(u16::from_le_bytes([w[0], w[1]])))
        };
        let ip_at = word(b, 12).unwrap_or(0);
        if let Some(ip_size) = word(b, ip_at + 6)
            && let Some(t) = b.get(ip_at..ip_at + ip_size)
        {
            let s = checksum(t);
            put16(b, 14, s);
        }
        if let Some(t) = word(b, 10).and_then(|size| b.get(10..size)) {
            let s = checksum(t);
            put16(b, 8, s);
        }
    }

    #[test]
    fn a_malformed_table_is_a_typed_error_naming_its_field() {
        let good = table("gfx1201", 4, false).to_bytes().unwrap();
        let ip_at = usize::from(u16::from_le_bytes([good[12], good[13]]));

        let mut b = good.clone();
        b[0] ^= 1;
        assert!(matches!(
            Discovery::parse(&b),
            Err(DiscoveryError::Signature {
                field: "binary_signature",
                ..
            })
        ));

        let mut b = good.clone();
        let last = b.len() - 1;
        b[last] ^= 0x40;
        assert!(matches!(
            Discovery::parse(&b),
            Err(DiscoveryError::Checksum {
                field: "binary_checksum",
                ..
            })
        ));

        // A change inside the IP table that the binary's sum still covers.
        let mut b = good.clone();
        b[ip_at + IP_HEADER + 8] ^= 1;
        let s = checksum(&b[10..]);
        put16(&mut b, 8, s);
        assert!(matches!(
            Discovery::parse(&b),
            Err(DiscoveryError::Checksum {
                field: "table_list[IP_DISCOVERY].checksum",
                ..
            })
        ));

        assert!(matches!(
            Discovery::parse(&good[..good.len() - 1]),
            Err(DiscoveryError::Outside {
                field: "binary_size",
                ..
            })
        ));

        let mut b = good.clone();
        put16(&mut b, ip_at + 12, 17);
        resum(&mut b);
        assert!(matches!(
            Discovery::parse(&b),
            Err(DiscoveryError::Value {
                field: "ip_discovery_header.num_dies",
                value: 17,
                ..
            })
        ));

        // A die whose entries run past the binary.
        let mut b = good.clone();
        let die_at = usize::from(u16::from_le_bytes([b[ip_at + 18], b[ip_at + 19]]));
        put16(&mut b, die_at + 2, 400);
        resum(&mut b);
        assert!(matches!(
            Discovery::parse(&b),
            Err(DiscoveryError::Outside { .. })
        ));

        let mut b = good.clone();
        put16(&mut b, ip_at + 4, 5);
        resum(&mut b);
        assert!(matches!(
            Discovery::parse(&b),
            Err(DiscoveryError::Value {
                field: "ip_discovery_header.version",
                value: 5,
                ..
            })
        ));
    }

    #[test]
    fn a_table_that_cannot_be_built_says_why() {
        let mut t = table("gfx942", 3, true);
        assert!(matches!(
            t.to_bytes(),
            Err(DiscoveryError::Value {
                field: "table_version",
                ..
            })
        ));
        t.base_addr_64 = false;
        t.dies[0].ips[0].bases = vec![1 << 32];
        assert!(matches!(
            t.to_bytes(),
            Err(DiscoveryError::Value {
                field: "base_address",
                ..
            })
        ));
        t.dies = vec![Die { id: 0, ips: vec![] }; 17];
        assert!(matches!(
            t.to_bytes(),
            Err(DiscoveryError::Value { field: "dies", .. })
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = Discovery::parse(&bytes);
        }

        #[test]
        fn a_damaged_valid_table_never_panics(
            at in 0usize..400,
            value in any::<u8>(),
            sums in any::<bool>(),
        ) {
            let mut b = table("gfx942", 4, true).to_bytes().unwrap();
            let at = at % b.len();
            b[at] = value;
            if sums && at >= 12 {
                resum(&mut b);
            }
            if let Ok(d) = Discovery::parse(&b) {
                let _ = Blocks::of(&d);
            }
        }
    }
}
