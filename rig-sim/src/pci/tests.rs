//! The model's first block driven as the bring-up will drive it: registers by name from
//! rig-amd's tables at the bases the discovery table in VRAM gives, the PSP through its
//! mailbox in amdgpu's order.

use rig_amd::discovery::{Blocks, Discovery, TMR_OFFSET, TMR_SIZE, hw_id};
use rig_amd::mmio::Table;
use rig_amd::psp::{BUFFER_BYTES, BootCommand, READY, RING_BYTES, RING_TYPE_KM};
use rig_amd::ucode::{Firmware, Kind};

use super::psp::{Refusal, State};
use super::*;

const VRAM: u64 = 512 << 20;
/// Where the bring-up's 1 MiB PSP buffer lies in VRAM.
const BUFFER: u64 = 64 << 20;

/// A SOS file (header v2.0) of the components `kinds` (fw_type values), each of `len` bytes
/// of a pattern of its own.
fn sos_file(kinds: &[(u32, usize)]) -> Vec<u8> {
    let image: usize = kinds.iter().map(|k| k.1).sum();
    let len = 256 + image;
    let mut b = vec![0u8; len];
    let put = |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    put(&mut b, 0, len as u32);
    put(&mut b, 4, 36);
    put(&mut b, 8, 2); // version 2.0
    put(&mut b, 20, image as u32);
    put(&mut b, 24, 256);
    put(&mut b, 32, kinds.len() as u32);
    let mut off = 0;
    for (i, &(kind, n)) in kinds.iter().enumerate() {
        let d = 36 + 16 * i;
        put(&mut b, d, kind);
        put(&mut b, d + 4, 0x100 + kind);
        put(&mut b, d + 8, off as u32);
        put(&mut b, d + 12, n as u32);
        for j in 0..n {
            b[256 + off + j] = (j as u32 * 7 + kind * 13 + 1) as u8 | 1;
        }
        off += n;
    }
    b
}

/// KDB, SYS_DRV, SOC_DRV, SOS.
fn file() -> Vec<u8> {
    sos_file(&[(3, 300), (2, 5000), (7, 700), (1, 9000)])
}

/// The bring-up's view: a register by name, at its block's base from the table in VRAM.
struct Driver {
    model: PciModel,
    discovery: Discovery,
    blocks: Blocks,
}

impl Driver {
    fn new(processor: &str, sos: &[u8]) -> Driver {
        let mut model = PciModel::new(processor, VRAM, sos, false).unwrap();
        // VRAM's size from NBIO, whose base the bring-up knows before it reads the table
        // (the test takes it from the model; docs/pci.md, stage 2).
        let nbio = model
            .blocks()
            .regs
            .nbio
            .reg("RCC_DEV0_EPF0_RCC_CONFIG_MEMSIZE")
            .unwrap();
        let segs = model
            .discovery()
            .ip(hw_id::NBIF, 0)
            .unwrap()
            .segment_bases(false);
        let mib = model.mmio_read(nbio.dword(&segs).unwrap()).unwrap();
        assert_eq!(u64::from(mib) << 20, VRAM);
        let mut bin = vec![0u8; TMR_SIZE];
        model
            .vram_read((u64::from(mib) << 20) - TMR_OFFSET, &mut bin)
            .unwrap();
        let discovery = Discovery::parse(&bin).unwrap();
        let blocks = Blocks::of(&discovery).unwrap();
        Driver {
            model,
            discovery,
            blocks,
        }
    }

    fn dword(&self, table: &Table, hw: u16, name: &str) -> u32 {
        let segs = self
            .discovery
            .ip(hw, 0)
            .unwrap()
            .segment_bases(self.discovery.base_addr_64);
        table.reg(name).unwrap().dword(&segs).unwrap()
    }

    fn mailbox(&self, n: u32) -> u32 {
        let prefix = match self.blocks.psp.1 {
            rig_amd::discovery::Psp::V13_0 => "MP0_SMN_C2PMSG_",
            rig_amd::discovery::Psp::V14_0 => "MPASP_SMN_C2PMSG_",
        };
        self.dword(self.blocks.regs.mp0, hw_id::MP0, &format!("{prefix}{n}"))
    }

    fn read(&mut self, n: u32) -> u32 {
        self.model.mmio_read(self.mailbox(n)).unwrap()
    }

    fn write(&mut self, n: u32, v: u32) {
        let d = self.mailbox(n);
        self.model.mmio_write(d, v).unwrap();
    }

    /// psp_v13_0_bootloader_load_component: wait for ready, clear the buffer, copy, address,
    /// command; true if the bootloader answered.
    fn load(&mut self, command: BootCommand, bytes: &[u8]) -> bool {
        assert_eq!(
            self.read(35) & READY,
            READY,
            "bootloader not ready for {command:?}"
        );
        self.model
            .vram_write(BUFFER, &vec![0; BUFFER_BYTES as usize])
            .unwrap();
        self.model.vram_write(BUFFER, bytes).unwrap();
        self.write(36, (BUFFER >> 20) as u32);
        self.write(35, command.value());
        self.read(35) & READY == READY
    }

    /// The components of `sos` in amdgpu's order.
    fn boot(&mut self, sos: &[u8]) {
        let fw = Firmware::parse(Kind::Sos, sos).unwrap();
        for command in rig_amd::psp::BOOT_ORDER {
            let Some(part) = fw
                .sos_parts(false)
                .into_iter()
                .find(|p| p.kind == command.component())
            else {
                continue;
            };
            let bytes = fw.slice(part.region).to_vec();
            let before = self.read(81);
            assert!(
                self.load(command, &bytes),
                "{command:?}: {:?}",
                self.model.psp().refusals()
            );
            if command == BootCommand::SosDrv {
                assert_ne!(self.read(81), before, "SOS shows no sign of life");
            }
        }
    }
}

#[test]
fn the_discovery_table_lies_64_kib_below_the_top_of_vram_and_chooses_the_blocks() {
    for p in ["gfx1100", "gfx1201", "gfx942"] {
        let d = Driver::new(p, &file());
        assert_eq!(&d.discovery, d.model.discovery(), "{p}");
        assert_eq!(d.blocks.gc, d.model.blocks().gc, "{p}");
    }
    assert!(matches!(
        PciModel::new("gfx90a", VRAM, &file(), false),
        Err(ModelError::Processor(_))
    ));
}

#[test]
fn bar0_holds_the_tables_registers_and_no_others() {
    let mut d = Driver::new("gfx1100", &file());
    let grbm = d.dword(d.blocks.regs.gc, hw_id::GC, "GRBM_GFX_CNTL");
    d.model.mmio_write(grbm, 0x15).unwrap();
    assert_eq!(d.model.mmio_read(grbm).unwrap(), 0x15);
    // gc_11_0_0_offset.h: GRBM_GFX_CNTL is 0x0900 in segment 1 (0xa000 in the model's table).
    assert_eq!(grbm, 0xa000 + 0x900);
    // The memory size register ignores writes.
    let memsize = d.dword(
        d.blocks.regs.nbio,
        hw_id::NBIF,
        "RCC_DEV0_EPF0_RCC_CONFIG_MEMSIZE",
    );
    d.model.mmio_write(memsize, 1).unwrap();
    assert_eq!(d.model.mmio_read(memsize).unwrap(), (VRAM >> 20) as u32);
    assert!(matches!(
        d.model.mmio_read(grbm + 1),
        Err(ModelError::NoRegister { .. })
    ));
    assert!(matches!(
        d.model.vram_write(VRAM - 4, &[0; 8]),
        Err(ModelError::OutsideVram { .. })
    ));
}

#[test]
fn the_psp_boots_on_the_documented_sequence_and_then_takes_its_ring() {
    for p in ["gfx1100", "gfx1201", "gfx942"] {
        let sos = file();
        let mut d = Driver::new(p, &sos);
        assert_eq!(d.read(81), 0, "{p}: SOS runs before its boot");
        d.boot(&sos);
        assert_eq!(d.model.psp().state(), State::SosRunning);
        assert_eq!(
            d.model.psp().loaded(),
            [
                BootCommand::KeyDatabase,
                BootCommand::SysDrv,
                BootCommand::SocDrv,
                BootCommand::SosDrv
            ]
        );
        // psp_v13_0_ring_create: ready for the ring, address, size, command, response.
        assert_eq!(d.read(64) & READY, READY);
        d.write(69, 0x0010_0000);
        d.write(70, 0);
        d.write(71, RING_BYTES);
        d.write(64, RING_TYPE_KM << 16);
        assert_eq!(d.read(64) & 0x8000_ffff, READY, "{p}");
        assert_eq!(d.model.psp().state(), State::RingCreated);
        assert!(d.model.psp().refusals().is_empty());
    }
}

#[test]
fn the_psp_refuses_a_wrong_order_and_bad_firmware_and_answers_nothing_more() {
    let sos = file();
    let fw = Firmware::parse(Kind::Sos, &sos).unwrap();
    let part = |k| {
        let p = fw
            .sos_parts(false)
            .into_iter()
            .find(|p| p.kind == k)
            .unwrap();
        fw.slice(p.region).to_vec()
    };
    use rig_amd::ucode::PspFw;

    // SOS first: KDB and SYS_DRV come before it.
    let mut d = Driver::new("gfx1100", &sos);
    assert!(!d.load(BootCommand::SosDrv, &part(PspFw::Sos)));
    assert_eq!(
        d.model.psp().refusals(),
        [Refusal::Skipped {
            command: BootCommand::SosDrv,
            missing: BootCommand::KeyDatabase
        }]
    );
    assert_eq!(d.model.psp().state(), State::Stuck);
    assert_eq!(d.read(81), 0);

    // A changed byte: the signature check fails.
    let mut d = Driver::new("gfx1100", &sos);
    let mut kdb = part(PspFw::Kdb);
    kdb[100] ^= 0x80;
    assert!(!d.load(BootCommand::KeyDatabase, &kdb));
    assert_eq!(
        d.model.psp().refusals(),
        [Refusal::BadComponent {
            command: BootCommand::KeyDatabase,
            at: 100
        }]
    );

    // A short copy and a long one: a wrong size.
    for (cut, at) in [(-1i64, 299usize), (1, 300)] {
        let mut d = Driver::new("gfx1100", &sos);
        let mut kdb = part(PspFw::Kdb);
        if cut < 0 {
            kdb.pop();
        } else {
            kdb.push(0xff);
        }
        assert!(!d.load(BootCommand::KeyDatabase, &kdb));
        assert_eq!(
            d.model.psp().refusals(),
            [Refusal::BadComponent {
                command: BootCommand::KeyDatabase,
                at
            }]
        );
    }

    // A GC image where the secure OS belongs, after a correct start.
    let mut d = Driver::new("gfx1100", &sos);
    assert!(d.load(BootCommand::KeyDatabase, &part(PspFw::Kdb)));
    assert!(d.load(BootCommand::SysDrv, &part(PspFw::SysDrv)));
    assert!(d.load(BootCommand::SocDrv, &part(PspFw::SocDrv)));
    let mec = vec![0x5a; 9000];
    assert!(!d.load(BootCommand::SosDrv, &mec));
    assert!(matches!(
        d.model.psp().refusals(),
        [Refusal::BadComponent {
            command: BootCommand::SosDrv,
            at: 0
        }]
    ));
    // Stuck: even the right SOS is not taken now, and a ring is refused.
    d.write(36, (BUFFER >> 20) as u32);
    d.write(35, BootCommand::SosDrv.value());
    d.write(71, RING_BYTES);
    d.write(64, RING_TYPE_KM << 16);
    assert_eq!(d.read(64) & READY, 0);
    assert!(matches!(
        &d.model.psp().refusals()[1..],
        [Refusal::Busy { .. }, Refusal::BadRing { .. }]
    ));

    // A component twice, one the file lacks, and a command that is none.
    let mut d = Driver::new("gfx1100", &sos);
    assert!(d.load(BootCommand::KeyDatabase, &part(PspFw::Kdb)));
    assert!(!d.load(BootCommand::KeyDatabase, &part(PspFw::Kdb)));
    assert_eq!(
        d.model.psp().refusals(),
        [Refusal::OutOfOrder {
            command: BootCommand::KeyDatabase
        }]
    );
    let mut d = Driver::new("gfx1100", &sos);
    assert!(d.load(BootCommand::KeyDatabase, &part(PspFw::Kdb)));
    assert!(!d.load(BootCommand::SplTable, &[1, 2, 3]));
    assert_eq!(
        d.model.psp().refusals(),
        [Refusal::NotInFile {
            command: BootCommand::SplTable
        }]
    );
    let mut d = Driver::new("gfx1100", &sos);
    d.write(35, 0x3_0000);
    assert_eq!(
        d.model.psp().refusals(),
        [Refusal::UnknownCommand { value: 0x3_0000 }]
    );
}

#[test]
fn the_psp_boots_debians_secure_os_files() {
    let dir = std::env::var_os("RIG_AMD_FIRMWARE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/lib/firmware/amdgpu".into());
    for (p, name) in [
        ("gfx1100", "psp_13_0_0_sos.bin"),
        ("gfx1201", "psp_14_0_3_sos.bin"),
        ("gfx942", "psp_13_0_6_sos.bin"),
    ] {
        let sos = match std::fs::read(dir.join(name)) {
            Ok(b) => b,
            Err(e) if std::env::var_os("RIG_REQUIRE_FIRMWARE").is_none() => {
                eprintln!(
                    "skipped: {}: {e} (docs/pci.md says how to get it)",
                    dir.join(name).display()
                );
                return;
            }
            Err(e) => panic!("{}: {e}", dir.join(name).display()),
        };
        let mut d = Driver::new(p, &sos);
        d.boot(&sos);
        assert_eq!(d.model.psp().state(), State::SosRunning, "{p}");
        assert!(d.model.psp().loaded().contains(&BootCommand::SysDrv), "{p}");
    }
}

/// psp_cmd_submit_buf by hand: the command buffer at `CMD`, a frame at the write pointer,
/// C2PMSG_67; the fence and the response's status.
fn submit(d: &mut Driver, cmd_id: u32, fields: &[u32]) -> (u32, u32) {
    use rig_amd::psp::{CMD_AT, CMD_BYTES, CMD_ID_AT, FRAME_BYTES, RESP_AT};
    const RING: u64 = 1 << 20;
    const CMD: u64 = RING + 0x1000;
    const FENCE: u64 = RING + 0x2000;
    let mut buf = vec![0u8; CMD_BYTES];
    buf[CMD_ID_AT..CMD_ID_AT + 4].copy_from_slice(&cmd_id.to_le_bytes());
    for (i, f) in fields.iter().enumerate() {
        buf[CMD_AT + 4 * i..CMD_AT + 4 * i + 4].copy_from_slice(&f.to_le_bytes());
    }
    d.model.vram_write(CMD, &buf).unwrap();
    let wptr = d.read(67);
    let fence = wptr + 1;
    let mut frame = [0u8; FRAME_BYTES];
    for (i, v) in [CMD as u32, 0, CMD_BYTES as u32, FENCE as u32, 0, fence]
        .into_iter()
        .enumerate()
    {
        frame[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    d.model
        .vram_write(RING + u64::from(wptr) * 4, &frame)
        .unwrap();
    d.write(67, wptr + (FRAME_BYTES / 4) as u32);
    let mut w = [0u8; 4];
    d.model.vram_read(FENCE, &mut w).unwrap();
    let got = u32::from_le_bytes(w);
    d.model.vram_read(CMD + RESP_AT as u64, &mut w).unwrap();
    assert_eq!(got, fence, "the PSP did not answer command {cmd_id:#x}");
    (got, u32::from_le_bytes(w))
}

#[test]
fn the_secure_os_answers_ring_commands_and_refuses_them_out_of_order() {
    use rig_amd::psp::{GfxCmd, TMR_BYTES, status};
    let sos = file();
    let mut d = Driver::new("gfx1100", &sos);
    d.boot(&sos);
    d.write(69, 1 << 20);
    d.write(70, 0);
    d.write(71, RING_BYTES);
    d.write(64, RING_TYPE_KM << 16);
    assert_eq!(d.model.psp().state(), State::RingCreated);
    let load = GfxCmd::LoadIpFw.value();
    let tmr = GfxCmd::SetupTmr.value();
    // Firmware before the TMR.
    let (_, s) = submit(&mut d, load, &[16 << 20, 0, 4096, 18]);
    assert_eq!(s, status::NOT_SUPPORTED);
    // A TMR off its alignment, then a good one, then a second.
    let (_, s) = submit(&mut d, tmr, &[(8 << 20) + 4096, 0, TMR_BYTES as u32]);
    assert_eq!(s, status::NOT_SUPPORTED);
    let (_, s) = submit(&mut d, tmr, &[8 << 20, 0, TMR_BYTES as u32]);
    assert_eq!(s, status::SUCCESS);
    assert_eq!(d.model.psp().tmr(), Some((8 << 20, TMR_BYTES)));
    let (_, s) = submit(&mut d, tmr, &[8 << 20, 0, TMR_BYTES as u32]);
    assert_eq!(s, status::NOT_SUPPORTED);
    // An image of a type it was given no file for; the RLC's autoload before RLC_G; an id
    // it does not know.
    let (_, s) = submit(&mut d, load, &[16 << 20, 0, 4096, 18]);
    assert_eq!(s, status::NOT_SUPPORTED);
    let (_, s) = submit(&mut d, GfxCmd::AutoloadRlc.value(), &[]);
    assert_eq!(s, status::NOT_SUPPORTED);
    let (_, s) = submit(&mut d, 0x7f, &[]);
    assert_eq!(s, status::UNKNOWN_COMMAND);
    use super::psp::CommandRefusal as C;
    let why: Vec<C> = d
        .model
        .psp()
        .refusals()
        .iter()
        .filter_map(|r| match r {
            Refusal::Command { refusal, .. } => Some(refusal.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        why,
        [
            C::BeforeTmr,
            C::TmrPlacement {
                addr: (8 << 20) + 4096,
                size: TMR_BYTES as u32
            },
            C::TmrTwice,
            C::FwType(18),
            C::AutoloadEarly,
            C::UnknownCommand(0x7f),
        ]
    );
    assert!(d.model.psp().ip_loaded().is_empty());
}
