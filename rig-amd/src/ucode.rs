//! AMD firmware files (`/lib/firmware/amdgpu/*.bin`): their headers, parsed from bytes with
//! every size and offset checked.
//!
//! Every file begins with `common_firmware_header` (Linux's `amdgpu_ucode.h`: the file's size,
//! the header's size and version, the IP version, the firmware version, and where the main
//! image lies), followed by a header of its kind and version that says where the other parts
//! lie. The kind is not in the file: it is the file's role (`gc_11_0_0_mec.bin` is a CP
//! header, `psp_13_0_0_sos.bin` a PSP one), which [`Kind::of_file_name`] reads from its name
//! as amdgpu does.
//!
//! [`Firmware::parse`] accepts what amdgpu accepts from the same bytes and checks more: the
//! file's size is `size_bytes` (amdgpu's one check); the header fits the file and holds its
//! version's fields; and every part (the main image, jump tables, data images, the PSP's
//! components, the SMU's power-play tables) lies inside the file, or inside the image where
//! amdgpu reads it from there, with no arithmetic that wraps. An error names the field. The
//! `crc32` field is kept and not checked: amdgpu does not check it, and it is not the CRC-32 of
//! the image in the files Debian ships.
//!
//! Offsets follow amdgpu's readers, which differ by field: most `*_offset_bytes` count from
//! the file's start; the PSP's and TA's component offsets, the IMU's and the legacy PSP
//! header's from the main image's start; jump-table offsets and sizes are in dwords inside
//! the image. Every [`Region`] here is made absolute (bytes from the file's start).
//!
//! This module owns the layouts; which files a GPU needs and in which order the PSP takes them
//! is the bring-up's.

use thiserror::Error;

/// Bytes of `common_firmware_header`.
pub const COMMON_BYTES: usize = 32;

/// The role of a firmware file, which decides the header after the common one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A command processor's firmware (ME, PFP, CE, MEC): `gfx_firmware_header_v1_0` (jump
    /// table) or `v2_0` (RS64: instruction and data images).
    Cp,
    /// The RLC's: `rlc_firmware_header_v2_0` to `v2_4`.
    Rlc,
    /// The micro engine scheduler's: `mes_firmware_header_v1_0`.
    Mes,
    /// The IMU's: `imu_firmware_header_v1_0`.
    Imu,
    /// An SDMA engine's: `sdma_firmware_header_v1_0`/`v1_1`, `v2_0` (two threads), `v3_0`.
    Sdma,
    /// The PSP's secure OS and its companions (`*_sos.bin`): `psp_firmware_header_v1_0` to
    /// `v1_3`, `v2_0`, `v2_1`.
    Sos,
    /// A table of contents for the PSP (`*_toc.bin`): `psp_firmware_header_v1_0`.
    Toc,
    /// The PSP's trusted applications (`*_ta.bin`): `ta_firmware_header_v2_0`.
    Ta,
    /// The SMU's (`smu_*.bin`): `smc_firmware_header_v1_0`, `v2_0`, `v2_1`.
    Smc,
}

impl Kind {
    /// The kind of the file named `name` (a path's last component, such as
    /// `gc_11_0_0_mec.bin`), by amdgpu's naming; `None` for a file rig does not read.
    pub fn of_file_name(name: &str) -> Option<Kind> {
        let stem = name.strip_suffix(".bin")?;
        let role = |prefix: &str| stem.strip_prefix(prefix);
        if let Some(rest) = role("gc_") {
            // gc_<ip>_<part>[_n]: the part is what follows the three version numbers.
            let part = rest.splitn(4, '_').nth(3)?;
            let part = part.trim_end_matches(|c: char| c.is_ascii_digit() || c == '_');
            return match part {
                "me" | "pfp" | "ce" | "mec" | "sjt_mec" => Some(Kind::Cp),
                "rlc" => Some(Kind::Rlc),
                "mes" | "uni_mes" => Some(Kind::Mes),
                "imu" => Some(Kind::Imu),
                "toc" => Some(Kind::Toc),
                _ => None,
            };
        }
        if let Some(rest) = role("psp_") {
            return match rest.rsplit('_').next()? {
                "sos" => Some(Kind::Sos),
                "ta" => Some(Kind::Ta),
                "toc" => Some(Kind::Toc),
                _ => None,
            };
        }
        if role("sdma_").is_some() {
            return Some(Kind::Sdma);
        }
        if role("smu_").is_some() {
            return Some(Kind::Smc);
        }
        None
    }
}

/// Why a firmware file was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UcodeError {
    /// The file is shorter than the bytes a field needs.
    #[error("firmware is {have} bytes, too short for {field} (needs {need})")]
    Short {
        /// The field that does not fit.
        field: &'static str,
        /// The bytes it needs.
        need: usize,
        /// The file's length.
        have: usize,
    },
    /// `size_bytes` is not the file's length.
    #[error("firmware's size_bytes says {said} but the file is {have} bytes (truncated or padded)")]
    Size {
        /// What `size_bytes` says.
        said: u32,
        /// The file's length.
        have: usize,
    },
    /// A part lies outside what holds it, or its offset and size wrap.
    #[error(
        "firmware's {field} puts {size} bytes at byte {offset}, outside the {within} \
         (which ends at byte {limit}): the file is damaged or not of this kind"
    )]
    Outside {
        /// The field (or pair of fields) that places the part.
        field: &'static str,
        /// Where it starts (bytes, absolute when it could be computed).
        offset: u64,
        /// Its bytes.
        size: u64,
        /// What must hold it: `file`, `image` or `header`.
        within: &'static str,
        /// That container's end.
        limit: u64,
    },
    /// The header's version is not one this kind has.
    #[error("a {kind:?} firmware has no header version {major}.{minor} that rig reads")]
    Version {
        /// The kind it was read as.
        kind: Kind,
        /// `header_version_major`.
        major: u16,
        /// `header_version_minor`.
        minor: u16,
    },
    /// `header_size_bytes` is smaller than its version's fields.
    #[error("firmware's header_size_bytes is {said}, less than the {need} bytes of its version")]
    HeaderSize {
        /// What `header_size_bytes` says.
        said: u32,
        /// The bytes its version's fields take.
        need: usize,
    },
    /// A count or index that contradicts another field.
    #[error("firmware's {field} is {value}, more than {limit}")]
    Count {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u32,
        /// The most the other fields allow.
        limit: u32,
    },
}

/// A part of a firmware file: `size` bytes from `offset`, counted from the file's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Region {
    /// Bytes from the file's start.
    pub offset: u32,
    /// Its length in bytes.
    pub size: u32,
}

impl Region {
    /// One past its last byte.
    pub fn end(self) -> u64 {
        u64::from(self.offset) + u64::from(self.size)
    }
}

/// `common_firmware_header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Common {
    /// `size_bytes`: the whole file.
    pub size_bytes: u32,
    /// `header_size_bytes`.
    pub header_size_bytes: u32,
    /// `header_version_major`, `header_version_minor`.
    pub header_version: (u16, u16),
    /// `ip_version_major`, `ip_version_minor`: the IP the firmware is for.
    pub ip_version: (u16, u16),
    /// `ucode_version`.
    pub ucode_version: u32,
    /// The main image (`ucode_array_offset_bytes`, `ucode_size_bytes`).
    pub image: Region,
    /// `crc32`, as stored (not checked).
    pub crc32: u32,
}

/// The PSP component types (`enum psp_fw_type` of amdgpu_ucode.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PspFw {
    /// `PSP_FW_TYPE_PSP_SOS` (1): the secure OS.
    Sos,
    /// `PSP_FW_TYPE_PSP_SYS_DRV` (2): the system driver, loaded before SOS.
    SysDrv,
    /// `PSP_FW_TYPE_PSP_KDB` (3): the key database.
    Kdb,
    /// `PSP_FW_TYPE_PSP_TOC` (4): the table of contents.
    Toc,
    /// `PSP_FW_TYPE_PSP_SPL` (5): the security patch level table.
    Spl,
    /// `PSP_FW_TYPE_PSP_RL` (6): the register list.
    Rl,
    /// `PSP_FW_TYPE_PSP_SOC_DRV` (7).
    SocDrv,
    /// `PSP_FW_TYPE_PSP_INTF_DRV` (8).
    IntfDrv,
    /// `PSP_FW_TYPE_PSP_DBG_DRV` (9).
    DbgDrv,
    /// `PSP_FW_TYPE_PSP_RAS_DRV` (10).
    RasDrv,
    /// `PSP_FW_TYPE_PSP_IPKEYMGR_DRV` (11).
    IpKeyMgrDrv,
    /// `PSP_FW_TYPE_PSP_SPDM_DRV` (12), in newer headers than Linux 6.12's.
    SpdmDrv,
    /// A type this table does not name (amdgpu warns and skips it).
    Other(u32),
}

impl PspFw {
    /// The type of `fw_type` value `v`.
    pub fn of(v: u32) -> PspFw {
        match v {
            1 => PspFw::Sos,
            2 => PspFw::SysDrv,
            3 => PspFw::Kdb,
            4 => PspFw::Toc,
            5 => PspFw::Spl,
            6 => PspFw::Rl,
            7 => PspFw::SocDrv,
            8 => PspFw::IntfDrv,
            9 => PspFw::DbgDrv,
            10 => PspFw::RasDrv,
            11 => PspFw::IpKeyMgrDrv,
            12 => PspFw::SpdmDrv,
            v => PspFw::Other(v),
        }
    }
}

/// The trusted-application types (`enum ta_fw_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaFw {
    /// `TA_FW_TYPE_PSP_ASD` (1).
    Asd,
    /// `TA_FW_TYPE_PSP_XGMI` (2).
    Xgmi,
    /// `TA_FW_TYPE_PSP_RAS` (3).
    Ras,
    /// `TA_FW_TYPE_PSP_HDCP` (4).
    Hdcp,
    /// `TA_FW_TYPE_PSP_DTM` (5).
    Dtm,
    /// `TA_FW_TYPE_PSP_RAP` (6).
    Rap,
    /// `TA_FW_TYPE_PSP_SECUREDISPLAY` (7).
    SecureDisplay,
    /// `TA_FW_TYPE_PSP_XGMI_AUX` (8), in newer headers than Linux 6.12's (PSP 13.0.6 ships it).
    XgmiAux,
    /// A type this table does not name.
    Other(u32),
}

impl TaFw {
    /// The type of `fw_type` value `v`.
    pub fn of(v: u32) -> TaFw {
        match v {
            1 => TaFw::Asd,
            2 => TaFw::Xgmi,
            3 => TaFw::Ras,
            4 => TaFw::Hdcp,
            5 => TaFw::Dtm,
            6 => TaFw::Rap,
            7 => TaFw::SecureDisplay,
            8 => TaFw::XgmiAux,
            v => TaFw::Other(v),
        }
    }
}

/// A component of a PSP or TA file (`psp_fw_bin_desc`, or a legacy `psp_fw_legacy_bin_desc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part<T> {
    /// Its type.
    pub kind: T,
    /// `fw_version`.
    pub version: u32,
    /// Where it lies.
    pub region: Region,
    /// In a v2.1 SOS file: at or after `psp_aux_fw_bin_index`, the components amdgpu loads
    /// instead of the first ones when the firmware on the board needs the auxiliary set.
    pub aux: bool,
}

/// An RLC part that its header places.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RlcPart {
    /// `reg_list_format_*` (v2.0).
    RegListFormat,
    /// `reg_list_*` (v2.0).
    RegList,
    /// `reg_list_format_separate_*` (v2.0).
    RegListFormatSeparate,
    /// `reg_list_separate_*` (v2.0).
    RegListSeparate,
    /// `save_restore_list_cntl_*` (v2.1).
    SaveRestoreCntl,
    /// `save_restore_list_gpm_*` (v2.1).
    SaveRestoreGpm,
    /// `save_restore_list_srm_*` (v2.1).
    SaveRestoreSrm,
    /// `rlc_iram_ucode_*` (v2.2).
    Iram,
    /// `rlc_dram_ucode_*` (v2.2).
    Dram,
    /// `rlcp_ucode_*` (v2.3).
    Rlcp,
    /// `rlcv_ucode_*` (v2.3).
    Rlcv,
    /// `global_tap_delays_ucode_*` (v2.4).
    GlobalTapDelays,
    /// `se<n>_tap_delays_ucode_*` (v2.4), n in 0..4.
    SeTapDelays(u8),
}

/// The header after the common one, by kind and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// `gfx_firmware_header_v1_0`.
    CpV1 {
        /// `ucode_feature_version`.
        feature_version: u32,
        /// The jump table (`jt_offset`, `jt_size`: dwords in the image).
        jump_table: Region,
    },
    /// `gfx_firmware_header_v2_0` (RS64 engines).
    CpV2 {
        /// `ucode_feature_version`.
        feature_version: u32,
        /// The instruction image (`ucode_offset_bytes`, `ucode_size_bytes`).
        code: Region,
        /// The data image (`data_offset_bytes`, `data_size_bytes`).
        data: Region,
        /// `ucode_start_addr_hi:lo`.
        start: u64,
    },
    /// `rlc_firmware_header_v2_0` .. `v2_4`.
    Rlc {
        /// `ucode_feature_version`.
        feature_version: u32,
        /// The jump table (`jt_offset`, `jt_size`: dwords in the image).
        jump_table: Region,
        /// The parts its version places, with their regions.
        parts: Vec<(RlcPart, Region)>,
    },
    /// `mes_firmware_header_v1_0`.
    Mes {
        /// `mes_ucode_version`.
        code_version: u32,
        /// The instruction image.
        code: Region,
        /// `mes_ucode_data_version`.
        data_version: u32,
        /// The data image.
        data: Region,
        /// `mes_uc_start_addr_hi:lo`.
        code_start: u64,
        /// `mes_data_start_addr_hi:lo`.
        data_start: u64,
    },
    /// `imu_firmware_header_v1_0`.
    Imu {
        /// The instruction RAM image.
        iram: Region,
        /// The data RAM image.
        dram: Region,
    },
    /// `sdma_firmware_header_v1_0` and `v1_1`.
    SdmaV1 {
        /// `ucode_feature_version`.
        feature_version: u32,
        /// `ucode_change_version`.
        change_version: u32,
        /// The jump table (`jt_offset`, `jt_size`: dwords in the image).
        jump_table: Region,
        /// `digest_size` (v1.1 only).
        digest_size: Option<u32>,
    },
    /// `sdma_firmware_header_v2_0`: a context thread and a control thread.
    SdmaV2 {
        /// `ucode_feature_version`.
        feature_version: u32,
        /// The context thread's image (the first `ctx_ucode_size_bytes` of the image).
        ctx: Region,
        /// Its jump table (`ctx_jt_offset`, `ctx_jt_size`: dwords in it).
        ctx_jump_table: Region,
        /// The control thread's image (`ctl_ucode_offset`, `ctl_ucode_size_bytes`).
        ctl: Region,
        /// Its jump table (`ctl_jt_offset`, `ctl_jt_size`: dwords in it).
        ctl_jump_table: Region,
    },
    /// `sdma_firmware_header_v3_0`.
    SdmaV3 {
        /// `ucode_feature_version`.
        feature_version: u32,
        /// The image (`ucode_offset_bytes`, `ucode_size_bytes`).
        code: Region,
    },
    /// `psp_firmware_header_v1_x` and `v2_x` of a SOS file.
    Sos {
        /// The components, in the file's order.
        parts: Vec<Part<PspFw>>,
    },
    /// `psp_firmware_header_v1_0` of a TOC file.
    Toc {
        /// `sos.fw_version`, which amdgpu takes as the TOC's feature version.
        feature_version: u32,
    },
    /// `ta_firmware_header_v2_0`.
    Ta {
        /// The applications, in the file's order.
        parts: Vec<Part<TaFw>>,
    },
    /// `smc_firmware_header_v1_0`, `v2_0`, `v2_1`.
    Smc {
        /// `ucode_start_addr`.
        start: u32,
        /// The soft power-play tables: `(id, region)`; v2.0 has one, of id 0.
        pptables: Vec<(u32, Region)>,
    },
}

/// A parsed firmware file, borrowing its bytes.
#[derive(Debug, Clone)]
pub struct Firmware<'a> {
    /// The role it was read as.
    pub kind: Kind,
    /// The common header.
    pub common: Common,
    /// The header of its kind.
    pub header: Header,
    bytes: &'a [u8],
}

impl<'a> Firmware<'a> {
    /// Parses `bytes` as a firmware file of `kind`.
    pub fn parse(kind: Kind, bytes: &'a [u8]) -> Result<Self, UcodeError> {
        let r = Reader { bytes };
        let common = common(&r)?;
        let header = match kind {
            Kind::Cp => cp(&r, &common)?,
            Kind::Rlc => rlc(&r, &common)?,
            Kind::Mes => mes(&r, &common)?,
            Kind::Imu => imu(&r, &common)?,
            Kind::Sdma => sdma(&r, &common)?,
            Kind::Sos => sos(&r, &common)?,
            Kind::Toc => toc(&r, &common)?,
            Kind::Ta => ta(&r, &common)?,
            Kind::Smc => smc(&r, &common)?,
        };
        Ok(Firmware {
            kind,
            common,
            header,
            bytes,
        })
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The bytes of `region` (a region this file's header gave, so it lies inside).
    pub fn slice(&self, region: Region) -> &'a [u8] {
        let start = region.offset as usize;
        // PANIC: every Region of a parsed file was checked to lie inside it.
        &self.bytes[start..start + region.size as usize]
    }

    /// The main image.
    pub fn image(&self) -> &'a [u8] {
        self.slice(self.common.image)
    }

    /// The PSP components amdgpu loads from a SOS file: those not marked auxiliary, or with
    /// `aux` each auxiliary one in place of the first of its type (amdgpu's choice when the
    /// board's firmware needs the auxiliary set). Empty for other kinds.
    pub fn sos_parts(&self, aux: bool) -> Vec<&Part<PspFw>> {
        let parts = match &self.header {
            Header::Sos { parts } => parts.as_slice(),
            _ => &[],
        };
        let replaced = |p: &Part<PspFw>| parts.iter().any(|q| q.aux && q.kind == p.kind);
        parts
            .iter()
            .filter(|p| if aux { p.aux || !replaced(p) } else { !p.aux })
            .collect()
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn len(&self) -> usize {
        self.bytes.len()
    }

    fn u16(&self, at: usize, field: &'static str) -> Result<u16, UcodeError> {
        let b = self.get(at, 2, field)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&self, at: usize, field: &'static str) -> Result<u32, UcodeError> {
        let b = self.get(at, 4, field)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn get(&self, at: usize, n: usize, field: &'static str) -> Result<&[u8], UcodeError> {
        let short = UcodeError::Short {
            field,
            need: at.saturating_add(n),
            have: self.len(),
        };
        self.bytes
            .get(at..at.checked_add(n).ok_or(short.clone())?)
            .ok_or(short)
    }
}

/// `size` bytes at `base + offset` must lie in `[lo, hi)`; returns the absolute region.
fn place(
    field: &'static str,
    base: u64,
    offset: u64,
    size: u64,
    within: &'static str,
    (lo, hi): (u64, u64),
) -> Result<Region, UcodeError> {
    let start = base + offset; // both are at most 2^32 + 2^34: no wrap in u64
    let outside = UcodeError::Outside {
        field,
        offset: start,
        size,
        within,
        limit: hi,
    };
    if start < lo || start + size > hi {
        return Err(outside);
    }
    Ok(Region {
        offset: u32::try_from(start).map_err(|_| outside.clone())?,
        size: u32::try_from(size).map_err(|_| outside)?,
    })
}

fn common(r: &Reader<'_>) -> Result<Common, UcodeError> {
    r.get(0, COMMON_BYTES, "common_firmware_header")?;
    let size_bytes = r.u32(0, "size_bytes")?;
    if size_bytes as usize != r.len() {
        return Err(UcodeError::Size {
            said: size_bytes,
            have: r.len(),
        });
    }
    let header_size_bytes = r.u32(4, "header_size_bytes")?;
    let file = (0, r.len() as u64);
    place(
        "header_size_bytes",
        0,
        0,
        u64::from(header_size_bytes),
        "file",
        file,
    )?;
    let array = r.u32(24, "ucode_array_offset_bytes")?;
    let size = r.u32(20, "ucode_size_bytes")?;
    // The image follows the header; it may not overlap it.
    let image = place(
        "ucode_array_offset_bytes/ucode_size_bytes",
        0,
        u64::from(array),
        u64::from(size),
        "file",
        (u64::from(header_size_bytes), r.len() as u64),
    )?;
    Ok(Common {
        size_bytes,
        header_size_bytes,
        header_version: (
            r.u16(8, "header_version_major")?,
            r.u16(10, "header_version_minor")?,
        ),
        ip_version: (
            r.u16(12, "ip_version_major")?,
            r.u16(14, "ip_version_minor")?,
        ),
        ucode_version: r.u32(16, "ucode_version")?,
        image,
        crc32: r.u32(28, "crc32")?,
    })
}

/// The header must be at least `need` bytes (its version's fields).
fn need(c: &Common, need: usize) -> Result<(), UcodeError> {
    if (c.header_size_bytes as usize) < need {
        return Err(UcodeError::HeaderSize {
            said: c.header_size_bytes,
            need,
        });
    }
    Ok(())
}

fn version(kind: Kind, c: &Common) -> UcodeError {
    UcodeError::Version {
        kind,
        major: c.header_version.0,
        minor: c.header_version.1,
    }
}

fn file(r: &Reader<'_>) -> (u64, u64) {
    (0, r.len() as u64)
}

fn image(c: &Common) -> (u64, u64) {
    (u64::from(c.image.offset), c.image.end())
}

/// A region by header-relative byte offset and size, inside the file.
fn in_file(
    r: &Reader<'_>,
    field: &'static str,
    offset: u32,
    size: u32,
) -> Result<Region, UcodeError> {
    place(
        field,
        0,
        u64::from(offset),
        u64::from(size),
        "file",
        file(r),
    )
}

/// A jump table of `size` dwords at dword `offset` of `within`.
fn jump_table(
    field: &'static str,
    within: Region,
    offset: u32,
    size: u32,
) -> Result<Region, UcodeError> {
    place(
        field,
        u64::from(within.offset),
        u64::from(offset) * 4,
        u64::from(size) * 4,
        "image",
        (u64::from(within.offset), within.end()),
    )
}

fn cp(r: &Reader<'_>, c: &Common) -> Result<Header, UcodeError> {
    match c.header_version {
        (1, 0) => {
            need(c, 44)?;
            Ok(Header::CpV1 {
                feature_version: r.u32(32, "ucode_feature_version")?,
                jump_table: jump_table(
                    "jt_offset/jt_size",
                    c.image,
                    r.u32(36, "jt_offset")?,
                    r.u32(40, "jt_size")?,
                )?,
            })
        }
        (2, 0) => {
            need(c, 60)?;
            Ok(Header::CpV2 {
                feature_version: r.u32(32, "ucode_feature_version")?,
                code: in_file(
                    r,
                    "ucode_offset_bytes/ucode_size_bytes",
                    r.u32(40, "ucode_offset_bytes")?,
                    r.u32(36, "ucode_size_bytes")?,
                )?,
                data: in_file(
                    r,
                    "data_offset_bytes/data_size_bytes",
                    r.u32(48, "data_offset_bytes")?,
                    r.u32(44, "data_size_bytes")?,
                )?,
                start: u64::from(r.u32(56, "ucode_start_addr_hi")?) << 32
                    | u64::from(r.u32(52, "ucode_start_addr_lo")?),
            })
        }
        _ => Err(version(Kind::Cp, c)),
    }
}

fn rlc(r: &Reader<'_>, c: &Common) -> Result<Header, UcodeError> {
    let minor = match c.header_version {
        (2, m @ 0..=4) => m,
        _ => return Err(version(Kind::Rlc, c)),
    };
    need(c, [104, 156, 172, 204, 244][usize::from(minor)])?;
    let mut parts = Vec::new();
    let mut part = |p: RlcPart, field: &'static str, size_at: usize, off_at: usize| {
        let region = in_file(r, field, r.u32(off_at, field)?, r.u32(size_at, field)?)?;
        parts.push((p, region));
        Ok::<_, UcodeError>(())
    };
    // v2.0: the four register lists (size, then offset).
    part(RlcPart::RegListFormat, "reg_list_format_array", 72, 76)?;
    part(RlcPart::RegList, "reg_list_array", 80, 84)?;
    part(
        RlcPart::RegListFormatSeparate,
        "reg_list_format_separate_array",
        88,
        92,
    )?;
    part(RlcPart::RegListSeparate, "reg_list_separate_array", 96, 100)?;
    if minor >= 1 {
        // v2.1 from byte 104: direct length, then (ucode_ver, feature_ver, size, offset) x3.
        part(RlcPart::SaveRestoreCntl, "save_restore_list_cntl", 116, 120)?;
        part(RlcPart::SaveRestoreGpm, "save_restore_list_gpm", 132, 136)?;
        part(RlcPart::SaveRestoreSrm, "save_restore_list_srm", 148, 152)?;
    }
    if minor >= 2 {
        part(RlcPart::Iram, "rlc_iram_ucode", 156, 160)?;
        part(RlcPart::Dram, "rlc_dram_ucode", 164, 168)?;
    }
    if minor >= 3 {
        part(RlcPart::Rlcp, "rlcp_ucode", 180, 184)?;
        part(RlcPart::Rlcv, "rlcv_ucode", 196, 200)?;
    }
    if minor >= 4 {
        part(
            RlcPart::GlobalTapDelays,
            "global_tap_delays_ucode",
            204,
            208,
        )?;
        for se in 0..4u8 {
            let at = 212 + 8 * usize::from(se);
            part(RlcPart::SeTapDelays(se), "se_tap_delays_ucode", at, at + 4)?;
        }
    }
    Ok(Header::Rlc {
        feature_version: r.u32(32, "ucode_feature_version")?,
        jump_table: jump_table(
            "jt_offset/jt_size",
            c.image,
            r.u32(36, "jt_offset")?,
            r.u32(40, "jt_size")?,
        )?,
        parts,
    })
}

fn mes(r: &Reader<'_>, c: &Common) -> Result<Header, UcodeError> {
    if c.header_version != (1, 0) {
        return Err(version(Kind::Mes, c));
    }
    need(c, 72)?;
    let addr = |hi: usize, lo: usize, field| -> Result<u64, UcodeError> {
        Ok(u64::from(r.u32(hi, field)?) << 32 | u64::from(r.u32(lo, field)?))
    };
    Ok(Header::Mes {
        code_version: r.u32(32, "mes_ucode_version")?,
        code: in_file(
            r,
            "mes_ucode_offset_bytes/mes_ucode_size_bytes",
            r.u32(40, "mes_ucode_offset_bytes")?,
            r.u32(36, "mes_ucode_size_bytes")?,
        )?,
        data_version: r.u32(44, "mes_ucode_data_version")?,
        data: in_file(
            r,
            "mes_ucode_data_offset_bytes/mes_ucode_data_size_bytes",
            r.u32(52, "mes_ucode_data_offset_bytes")?,
            r.u32(48, "mes_ucode_data_size_bytes")?,
        )?,
        code_start: addr(60, 56, "mes_uc_start_addr")?,
        data_start: addr(68, 64, "mes_data_start_addr")?,
    })
}

fn imu(r: &Reader<'_>, c: &Common) -> Result<Header, UcodeError> {
    if c.header_version != (1, 0) {
        return Err(version(Kind::Imu, c));
    }
    need(c, 48)?;
    let part = |field, size_at, off_at| -> Result<Region, UcodeError> {
        place(
            field,
            u64::from(c.image.offset),
            u64::from(r.u32(off_at, field)?),
            u64::from(r.u32(size_at, field)?),
            "image",
            image(c),
        )
    };
    Ok(Header::Imu {
        iram: part("imu_iram_ucode", 32, 36)?,
        dram: part("imu_dram_ucode", 40, 44)?,
    })
}

fn sdma(r: &Reader<'_>, c: &Common) -> Result<Header, UcodeError> {
    match c.header_version {
        (1, minor @ (0 | 1)) => {
            need(c, if minor == 0 { 48 } else { 52 })?;
            Ok(Header::SdmaV1 {
                feature_version: r.u32(32, "ucode_feature_version")?,
                change_version: r.u32(36, "ucode_change_version")?,
                jump_table: jump_table(
                    "jt_offset/jt_size",
                    c.image,
                    r.u32(40, "jt_offset")?,
                    r.u32(44, "jt_size")?,
                )?,
                digest_size: if minor == 1 {
                    Some(r.u32(48, "digest_size")?)
                } else {
                    None
                },
            })
        }
        (2, 0) => {
            need(c, 64)?;
            let ctx = place(
                "ctx_ucode_size_bytes",
                u64::from(c.image.offset),
                0,
                u64::from(r.u32(36, "ctx_ucode_size_bytes")?),
                "image",
                image(c),
            )?;
            let ctl = in_file(
                r,
                "ctl_ucode_offset/ctl_ucode_size_bytes",
                r.u32(48, "ctl_ucode_offset")?,
                r.u32(52, "ctl_ucode_size_bytes")?,
            )?;
            Ok(Header::SdmaV2 {
                feature_version: r.u32(32, "ucode_feature_version")?,
                ctx,
                ctx_jump_table: jump_table(
                    "ctx_jt_offset/ctx_jt_size",
                    ctx,
                    r.u32(40, "ctx_jt_offset")?,
                    r.u32(44, "ctx_jt_size")?,
                )?,
                ctl,
                ctl_jump_table: jump_table(
                    "ctl_jt_offset/ctl_jt_size",
                    ctl,
                    r.u32(56, "ctl_jt_offset")?,
                    r.u32(60, "ctl_jt_size")?,
                )?,
            })
        }
        (3, 0) => {
            need(c, 44)?;
            Ok(Header::SdmaV3 {
                feature_version: r.u32(32, "ucode_feature_version")?,
                code: in_file(
                    r,
                    "ucode_offset_bytes/ucode_size_bytes",
                    r.u32(36, "ucode_offset_bytes")?,
                    r.u32(40, "ucode_size_bytes")?,
                )?,
            })
        }
        _ => Err(version(Kind::Sdma, c)),
    }
}

/// A legacy descriptor (`fw_version`, `offset_bytes`, `size_bytes`) at `at`, placed in the
/// image from `base` (an absolute offset inside it).
fn legacy<T>(
    r: &Reader<'_>,
    c: &Common,
    kind: T,
    at: usize,
    field: &'static str,
    base: u64,
) -> Result<Part<T>, UcodeError> {
    Ok(Part {
        kind,
        version: r.u32(at, field)?,
        region: place(
            field,
            base,
            u64::from(r.u32(at + 4, field)?),
            u64::from(r.u32(at + 8, field)?),
            "image",
            image(c),
        )?,
        aux: false,
    })
}

/// The `count` descriptors of `psp_fw_bin_desc` from `at`, which must end before the image.
fn descriptors<T>(
    r: &Reader<'_>,
    c: &Common,
    at: usize,
    (field, count): (&'static str, u32),
    kind: fn(u32) -> T,
    aux_from: u32,
) -> Result<Vec<Part<T>>, UcodeError> {
    let room = (c.image.offset as usize).saturating_sub(at) / 16;
    if count as usize > room {
        return Err(UcodeError::Count {
            field,
            value: count,
            limit: u32::try_from(room).unwrap_or(u32::MAX),
        });
    }
    (0..count)
        .map(|i| {
            let d = at + 16 * i as usize;
            Ok(Part {
                kind: kind(r.u32(d, "psp_fw_bin.fw_type")?),
                version: r.u32(d + 4, "psp_fw_bin.fw_version")?,
                region: place(
                    "psp_fw_bin.offset_bytes/size_bytes",
                    u64::from(c.image.offset),
                    u64::from(r.u32(d + 8, "psp_fw_bin.offset_bytes")?),
                    u64::from(r.u32(d + 12, "psp_fw_bin.size_bytes")?),
                    "image",
                    image(c),
                )?,
                aux: i >= aux_from,
            })
        })
        .collect()
}

fn sos(r: &Reader<'_>, c: &Common) -> Result<Header, UcodeError> {
    let base = u64::from(c.image.offset);
    let parts = match c.header_version {
        (1, minor @ 0..=3) => {
            need(c, [44, 68, 68, 116][usize::from(minor)])?;
            // The system driver is the image up to SOS's offset; SOS follows (psp_init_sos_base_fw).
            let sos = legacy(r, c, PspFw::Sos, 32, "sos", base)?;
            let mut parts = vec![
                Part {
                    kind: PspFw::SysDrv,
                    version: sos.version,
                    region: place(
                        "sos.offset_bytes",
                        base,
                        0,
                        u64::from(sos.region.offset) - base,
                        "image",
                        image(c),
                    )?,
                    aux: false,
                },
                sos,
            ];
            match minor {
                1 | 3 => {
                    parts.push(legacy(r, c, PspFw::Toc, 44, "toc", base)?);
                    parts.push(legacy(r, c, PspFw::Kdb, 56, "kdb", base)?);
                }
                2 => parts.push(legacy(r, c, PspFw::Kdb, 56, "kdb", base)?),
                _ => {}
            }
            if minor == 3 {
                parts.push(legacy(r, c, PspFw::Spl, 68, "spl", base)?);
                parts.push(legacy(r, c, PspFw::Rl, 80, "rl", base)?);
                let mut sys_aux = legacy(r, c, PspFw::SysDrv, 92, "sys_drv_aux", base)?;
                let mut sos_aux = legacy(r, c, PspFw::Sos, 104, "sos_aux", base)?;
                sys_aux.aux = true;
                sos_aux.aux = true;
                parts.push(sys_aux);
                parts.push(sos_aux);
            }
            parts
        }
        (2, 0) => {
            need(c, 36)?;
            let count = r.u32(32, "psp_fw_bin_count")?;
            descriptors(r, c, 36, ("psp_fw_bin_count", count), PspFw::of, u32::MAX)?
        }
        (2, 1) => {
            need(c, 40)?;
            let count = r.u32(32, "psp_fw_bin_count")?;
            let aux = r.u32(36, "psp_aux_fw_bin_index")?;
            if aux > count {
                return Err(UcodeError::Count {
                    field: "psp_aux_fw_bin_index",
                    value: aux,
                    limit: count,
                });
            }
            descriptors(r, c, 40, ("psp_fw_bin_count", count), PspFw::of, aux)?
        }
        _ => return Err(version(Kind::Sos, c)),
    };
    Ok(Header::Sos { parts })
}

fn toc(r: &Reader<'_>, c: &Common) -> Result<Header, UcodeError> {
    if c.header_version.0 != 1 {
        return Err(version(Kind::Toc, c));
    }
    need(c, 44)?;
    Ok(Header::Toc {
        feature_version: r.u32(32, "sos.fw_version")?,
    })
}

fn ta(r: &Reader<'_>, c: &Common) -> Result<Header, UcodeError> {
    if c.header_version != (2, 0) {
        return Err(version(Kind::Ta, c));
    }
    need(c, 36)?;
    let count = r.u32(32, "ta_fw_bin_count")?;
    Ok(Header::Ta {
        parts: descriptors(r, c, 36, ("ta_fw_bin_count", count), TaFw::of, u32::MAX)?,
    })
}

fn smc(r: &Reader<'_>, c: &Common) -> Result<Header, UcodeError> {
    let pptables = match c.header_version {
        (1, 0) => {
            need(c, 36)?;
            Vec::new()
        }
        (2, 0) => {
            need(c, 44)?;
            vec![(
                0,
                in_file(
                    r,
                    "ppt_offset_bytes/ppt_size_bytes",
                    r.u32(36, "ppt_offset_bytes")?,
                    r.u32(40, "ppt_size_bytes")?,
                )?,
            )]
        }
        (2, 1) => {
            need(c, 44)?;
            let count = r.u32(36, "pptable_count")?;
            let at = r.u32(40, "pptable_entry_offset")?;
            // Each entry is (id, ppt_offset_bytes, ppt_size_bytes).
            let entries = in_file(
                r,
                "pptable_entry_offset/pptable_count",
                at,
                count.checked_mul(12).ok_or(UcodeError::Count {
                    field: "pptable_count",
                    value: count,
                    limit: u32::MAX / 12,
                })?,
            )?;
            (0..count as usize)
                .map(|i| {
                    let e = entries.offset as usize + 12 * i;
                    Ok((
                        r.u32(e, "smc_soft_pptable_entry.id")?,
                        in_file(
                            r,
                            "smc_soft_pptable_entry.ppt_offset_bytes/ppt_size_bytes",
                            r.u32(e + 4, "smc_soft_pptable_entry.ppt_offset_bytes")?,
                            r.u32(e + 8, "smc_soft_pptable_entry.ppt_size_bytes")?,
                        )?,
                    ))
                })
                .collect::<Result<_, UcodeError>>()?
        }
        _ => return Err(version(Kind::Smc, c)),
    };
    Ok(Header::Smc {
        start: r.u32(32, "ucode_start_addr")?,
        pptables,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KINDS: [Kind; 9] = [
        Kind::Cp,
        Kind::Rlc,
        Kind::Mes,
        Kind::Imu,
        Kind::Sdma,
        Kind::Sos,
        Kind::Toc,
        Kind::Ta,
        Kind::Smc,
    ];

    /// A file of `len` bytes with a common header of version `v`, a header of `header` bytes
    /// and an image from byte 256 to the end; `words` are (byte offset, value) to set after.
    fn file(len: usize, v: (u16, u16), header: u32, words: &[(usize, u32)]) -> Vec<u8> {
        let mut b = vec![0u8; len];
        let mut put = |at: usize, x: u32| b[at..at + 4].copy_from_slice(&x.to_le_bytes());
        put(0, len as u32);
        put(4, header);
        put(8, u32::from(v.0) | u32::from(v.1) << 16);
        put(20, len as u32 - 256);
        put(24, 256);
        for &(at, x) in words {
            put(at, x);
        }
        b
    }

    #[test]
    fn a_jump_table_is_in_dwords_inside_the_image() {
        // 1024-byte image: a jump table of 16 dwords at dword 240 ends it exactly.
        let ok = file(1280, (1, 0), 44, &[(36, 240), (40, 16)]);
        let fw = Firmware::parse(Kind::Cp, &ok).unwrap();
        assert_eq!(
            fw.header,
            Header::CpV1 {
                feature_version: 0,
                jump_table: Region {
                    offset: 256 + 960,
                    size: 64
                }
            }
        );
        let past = file(1280, (1, 0), 44, &[(36, 241), (40, 16)]);
        assert!(matches!(
            Firmware::parse(Kind::Cp, &past),
            Err(UcodeError::Outside {
                field: "jt_offset/jt_size",
                within: "image",
                ..
            })
        ));
        // Offsets that would wrap 32 bits are past the image, not inside it.
        let wrap = file(1280, (1, 0), 44, &[(36, u32::MAX), (40, u32::MAX)]);
        assert!(matches!(
            Firmware::parse(Kind::Cp, &wrap),
            Err(UcodeError::Outside { .. })
        ));
    }

    #[test]
    fn the_common_header_is_checked_before_the_kinds() {
        let short = vec![0u8; 31];
        assert!(matches!(
            Firmware::parse(Kind::Smc, &short),
            Err(UcodeError::Short {
                field: "common_firmware_header",
                need: 32,
                have: 31
            })
        ));
        let mut padded = file(512, (1, 0), 36, &[]);
        padded.push(0);
        assert_eq!(
            Firmware::parse(Kind::Smc, &padded).unwrap_err(),
            UcodeError::Size {
                said: 512,
                have: 513
            }
        );
        // An image that overlaps the header.
        let overlap = file(512, (1, 0), 300, &[]);
        assert!(matches!(
            Firmware::parse(Kind::Smc, &overlap),
            Err(UcodeError::Outside {
                field: "ucode_array_offset_bytes/ucode_size_bytes",
                ..
            })
        ));
        // A header too small for its version's fields.
        let small = file(512, (2, 0), 40, &[]);
        assert_eq!(
            Firmware::parse(Kind::Smc, &small).unwrap_err(),
            UcodeError::HeaderSize { said: 40, need: 44 }
        );
        let unknown = file(512, (3, 0), 44, &[]);
        assert_eq!(
            Firmware::parse(Kind::Smc, &unknown).unwrap_err(),
            UcodeError::Version {
                kind: Kind::Smc,
                major: 3,
                minor: 0
            }
        );
    }

    #[test]
    fn psp_descriptors_must_end_before_the_image_and_the_aux_index_within_them() {
        // 13 descriptors fit between byte 36 and the image at 256; 14 do not.
        let fits = file(1280, (2, 0), 36, &[(32, 13)]);
        let Header::Sos { parts } = Firmware::parse(Kind::Sos, &fits).unwrap().header else {
            panic!()
        };
        assert_eq!(parts.len(), 13);
        let over = file(1280, (2, 0), 36, &[(32, 14)]);
        assert_eq!(
            Firmware::parse(Kind::Sos, &over).unwrap_err(),
            UcodeError::Count {
                field: "psp_fw_bin_count",
                value: 14,
                limit: 13
            }
        );
        let aux = file(1280, (2, 1), 40, &[(32, 2), (36, 3)]);
        assert_eq!(
            Firmware::parse(Kind::Sos, &aux).unwrap_err(),
            UcodeError::Count {
                field: "psp_aux_fw_bin_index",
                value: 3,
                limit: 2
            }
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_of_any_kind_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            for kind in KINDS {
                let _ = Firmware::parse(kind, &bytes);
            }
        }

        #[test]
        fn arbitrary_headers_past_the_common_checks_never_panic(
            words in proptest::collection::vec(any::<u32>(), 0..64),
            major in 0u16..4,
            minor in 0u16..5,
            header in 32u32..300,
        ) {
            let at: Vec<(usize, u32)> =
                words.iter().enumerate().map(|(i, &w)| (32 + 4 * i, w)).collect();
            let b = file(1024, (major, minor), header.min(256), &at);
            for kind in KINDS {
                if let Ok(fw) = Firmware::parse(kind, &b) {
                    let _ = fw.image();
                    let _ = fw.sos_parts(true);
                }
            }
        }
    }

    #[test]
    fn file_names_give_kinds_as_amdgpu_names_them() {
        for (name, kind) in [
            ("gc_11_0_0_mec.bin", Some(Kind::Cp)),
            ("gc_9_4_3_sjt_mec.bin", Some(Kind::Cp)),
            ("gc_11_0_0_rlc_1.bin", Some(Kind::Rlc)),
            ("gc_11_0_0_mes_2.bin", Some(Kind::Mes)),
            ("gc_11_0_0_mes1.bin", Some(Kind::Mes)),
            ("gc_12_0_1_uni_mes.bin", Some(Kind::Mes)),
            ("gc_12_0_1_imu.bin", Some(Kind::Imu)),
            ("gc_12_0_1_toc.bin", Some(Kind::Toc)),
            ("psp_13_0_6_sos.bin", Some(Kind::Sos)),
            ("psp_13_0_6_ta.bin", Some(Kind::Ta)),
            ("sdma_4_4_2.bin", Some(Kind::Sdma)),
            ("smu_14_0_3.bin", Some(Kind::Smc)),
            ("vcn_4_0_0.bin", None),
            ("gc_11_0_0_mec", None),
        ] {
            assert_eq!(Kind::of_file_name(name), kind, "{name}");
        }
    }
}
