//! The firmware parser against every file of Debian's `firmware-amd-graphics` for the IP
//! versions the PCI bring-up drives (gfx1100, gfx1201, gfx942).
//!
//! The files are read from `$RIG_AMD_FIRMWARE` or `/lib/firmware/amdgpu`. Where they are
//! missing the test prints why and passes, unless `RIG_REQUIRE_FIRMWARE` is set (CI sets it,
//! `.ci/run` installs the package): then a missing file fails it.

use std::path::PathBuf;

use rig_amd::ucode::{Firmware, Header, Kind, PspFw, TaFw, UcodeError};

/// Every file of the package (20250410) for the supported IP versions.
const FILES: &[&str] = &[
    // gfx1100
    "gc_11_0_0_imu.bin",
    "gc_11_0_0_me.bin",
    "gc_11_0_0_mec.bin",
    "gc_11_0_0_mes.bin",
    "gc_11_0_0_mes1.bin",
    "gc_11_0_0_mes_2.bin",
    "gc_11_0_0_pfp.bin",
    "gc_11_0_0_rlc.bin",
    "gc_11_0_0_rlc_1.bin",
    "psp_13_0_0_sos.bin",
    "psp_13_0_0_ta.bin",
    "sdma_6_0_0.bin",
    "smu_13_0_0.bin",
    // gfx1201
    "gc_12_0_1_imu.bin",
    "gc_12_0_1_me.bin",
    "gc_12_0_1_mec.bin",
    "gc_12_0_1_mes.bin",
    "gc_12_0_1_mes1.bin",
    "gc_12_0_1_pfp.bin",
    "gc_12_0_1_rlc.bin",
    "gc_12_0_1_toc.bin",
    "gc_12_0_1_uni_mes.bin",
    "psp_14_0_3_sos.bin",
    "psp_14_0_3_ta.bin",
    "sdma_7_0_1.bin",
    "smu_14_0_3.bin",
    // gfx942
    "gc_9_4_3_mec.bin",
    "gc_9_4_3_rlc.bin",
    "gc_9_4_3_sjt_mec.bin",
    "psp_13_0_6_sos.bin",
    "psp_13_0_6_ta.bin",
    "sdma_4_4_2.bin",
    "smu_13_0_6.bin",
];

/// The name stems whose every file must be in [`FILES`].
const STEMS: &[&str] = &[
    "gc_11_0_0_",
    "psp_13_0_0_",
    "sdma_6_0_0",
    "smu_13_0_0",
    "gc_12_0_1_",
    "psp_14_0_3_",
    "sdma_7_0_1",
    "smu_14_0_3",
    "gc_9_4_3_",
    "psp_13_0_6_",
    "sdma_4_4_2",
    "smu_13_0_6",
];

fn dir() -> PathBuf {
    std::env::var_os("RIG_AMD_FIRMWARE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/lib/firmware/amdgpu"))
}

/// The files' bytes, or `None` (after saying why) where they are missing and not required.
fn files() -> Option<Vec<(&'static str, Vec<u8>)>> {
    let dir = dir();
    let mut out = Vec::new();
    for name in FILES {
        match std::fs::read(dir.join(name)) {
            Ok(bytes) => out.push((*name, bytes)),
            Err(e) => {
                let why = format!(
                    "{}: {e}; install Debian's firmware-amd-graphics (non-free-firmware, \
                     20250410 or later: bookworm-backports) or set RIG_AMD_FIRMWARE",
                    dir.join(name).display()
                );
                if std::env::var_os("RIG_REQUIRE_FIRMWARE").is_some() {
                    panic!("{why}");
                }
                eprintln!("skipped: {why}");
                return None;
            }
        }
    }
    Some(out)
}

/// The IP version a file's name gives: `gc_11_0_0_mec` is 11.0, `sdma_4_4_2` 4.4.
fn named_ip(name: &str) -> (u16, u16) {
    let mut n = name.split('_').skip(1).map(|p| p.parse::<u16>().unwrap());
    (n.next().unwrap(), n.next().unwrap())
}

#[test]
fn every_file_of_the_supported_versions_parses_with_its_parts_inside_it() {
    let Some(files) = files() else { return };
    // Every file of those versions in the directory is one this test knows.
    let dir = dir();
    for e in std::fs::read_dir(&dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if STEMS.iter().any(|s| name.starts_with(s)) {
            assert!(FILES.contains(&name.as_str()), "{name} is new: add it");
        }
    }
    for (name, bytes) in &files {
        let kind = Kind::of_file_name(name).unwrap_or_else(|| panic!("{name}: no kind"));
        let fw = Firmware::parse(kind, bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(fw.common.ip_version, named_ip(name), "{name}");
        assert_eq!(fw.image().len() as u32, fw.common.image.size, "{name}");
        // Each kind's own parts, as the package lays them out.
        match (&fw.header, name.split('_').next().unwrap()) {
            (Header::CpV1 { jump_table, .. }, "gc") => {
                // GFX9.4.3's MEC ends its image with the jump table.
                assert_eq!(jump_table.end(), fw.common.image.end(), "{name}");
            }
            (Header::CpV2 { code, data, .. }, "gc") => {
                assert_eq!(code.offset, fw.common.image.offset, "{name}");
                assert_eq!(code.end(), u64::from(data.offset), "{name}");
                assert_eq!(data.end(), bytes.len() as u64, "{name}");
            }
            (Header::Mes { code, data, .. }, "gc") => {
                assert_eq!(code.end(), u64::from(data.offset), "{name}");
                assert_eq!(data.end(), bytes.len() as u64, "{name}");
            }
            (Header::Imu { iram, dram }, "gc") => {
                assert_eq!(iram.end(), u64::from(dram.offset), "{name}");
                assert_eq!(dram.end(), fw.common.image.end(), "{name}");
            }
            (Header::Rlc { parts, .. }, "gc") => {
                // The last part the header places ends the file.
                let end = parts.iter().map(|(_, r)| r.end()).max().unwrap();
                assert_eq!(end, bytes.len() as u64, "{name}");
            }
            (Header::Toc { .. }, "gc") => {}
            (Header::Sos { parts }, "psp") => {
                let kinds: Vec<PspFw> = fw.sos_parts(false).iter().map(|p| p.kind).collect();
                for needed in [PspFw::SysDrv, PspFw::Sos, PspFw::Kdb] {
                    assert!(
                        kinds.contains(&needed),
                        "{name}: no {needed:?} in {kinds:?}"
                    );
                }
                let last = parts.iter().map(|p| p.region.end()).max().unwrap();
                assert_eq!(last, fw.common.image.end(), "{name}");
            }
            (Header::Ta { parts }, "psp") => {
                assert!(parts.iter().any(|p| p.kind == TaFw::Ras), "{name}");
            }
            (Header::SdmaV1 { jump_table, .. }, "sdma") => {
                assert!(jump_table.size > 0, "{name}");
            }
            (Header::SdmaV2 { ctx, ctl, .. }, "sdma") => {
                assert_eq!(ctx.end(), u64::from(ctl.offset), "{name}");
                assert_eq!(ctl.end(), bytes.len() as u64, "{name}");
            }
            (Header::SdmaV3 { code, .. }, "sdma") => {
                assert_eq!(*code, fw.common.image, "{name}");
            }
            (Header::Smc { pptables, .. }, "smu") => {
                assert!(!pptables.is_empty(), "{name}");
                let last = pptables.iter().map(|(_, r)| r.end()).max().unwrap();
                assert_eq!(last, bytes.len() as u64, "{name}");
            }
            (h, _) => panic!("{name}: header {h:?} for its name"),
        }
    }
}

#[test]
fn the_mi300_secure_os_carries_an_auxiliary_set_in_place_of_the_first() {
    let Some(files) = files() else { return };
    let (_, bytes) = files
        .iter()
        .find(|(n, _)| *n == "psp_13_0_6_sos.bin")
        .unwrap();
    let fw = Firmware::parse(Kind::Sos, bytes).unwrap();
    assert_eq!(fw.common.header_version, (2, 1));
    let first = fw.sos_parts(false);
    let aux = fw.sos_parts(true);
    assert_eq!(first.len(), aux.len());
    assert!(first.iter().all(|p| !p.aux) && aux.iter().all(|p| p.aux));
    // The same component types, other images.
    for (a, b) in first.iter().zip(&aux) {
        assert_eq!(a.kind, b.kind);
        assert_ne!(a.region, b.region);
    }
    // Files without an auxiliary set give the same components either way.
    let (_, bytes) = files
        .iter()
        .find(|(n, _)| *n == "psp_13_0_0_sos.bin")
        .unwrap();
    let fw = Firmware::parse(Kind::Sos, bytes).unwrap();
    assert_eq!(fw.sos_parts(false), fw.sos_parts(true));
}

#[test]
fn a_damaged_real_file_is_refused_by_the_field_it_breaks() {
    let Some(files) = files() else { return };
    let get = |n: &str| files.iter().find(|(f, _)| *f == n).unwrap().1.clone();

    let mut sdma = get("sdma_6_0_0.bin");
    // ctl_ucode_size_bytes (byte 52) one past the file.
    let ctl = u32::from_le_bytes(sdma[52..56].try_into().unwrap());
    sdma[52..56].copy_from_slice(&(ctl + 1).to_le_bytes());
    match Firmware::parse(Kind::Sdma, &sdma) {
        Err(UcodeError::Outside { field, within, .. }) => {
            assert_eq!(
                (field, within),
                ("ctl_ucode_offset/ctl_ucode_size_bytes", "file")
            );
        }
        other => panic!("{other:?}"),
    }

    let mut sos = get("psp_13_0_0_sos.bin");
    // The second descriptor's size_bytes (36 + 16 + 12) past the image.
    sos[64..68].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        Firmware::parse(Kind::Sos, &sos),
        Err(UcodeError::Outside {
            field: "psp_fw_bin.offset_bytes/size_bytes",
            within: "image",
            ..
        })
    ));

    let mut mec = get("gc_11_0_0_mec.bin");
    mec.truncate(mec.len() - 1);
    assert!(matches!(
        Firmware::parse(Kind::Cp, &mec),
        Err(UcodeError::Size { .. })
    ));

    // A file read as the wrong kind is refused by its version.
    let smu = get("smu_13_0_0.bin");
    assert!(matches!(
        Firmware::parse(Kind::Cp, &smu),
        Err(UcodeError::Version {
            kind: Kind::Cp,
            major: 2,
            minor: 1
        })
    ));
}

#[test]
fn any_word_of_a_real_header_set_to_any_extreme_never_panics() {
    let Some(files) = files() else { return };
    for (name, bytes) in &files {
        let kind = Kind::of_file_name(name).unwrap();
        let header = (bytes.len().min(512)) / 4;
        for word in 0..header {
            for v in [0, 1, 0x7fff_ffff, 0x8000_0000, u32::MAX] {
                let mut b = bytes.clone();
                b[4 * word..4 * word + 4].copy_from_slice(&u32::to_le_bytes(v));
                if let Ok(fw) = Firmware::parse(kind, &b) {
                    // Whatever parses hands out only bytes inside the file.
                    let _ = fw.image();
                }
            }
        }
    }
}
