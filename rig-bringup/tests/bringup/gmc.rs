//! Stages 7 and 8 against the model: the GMC's page tables walked by the model's hubs, the
//! faults they raise into the IH ring, and the bring-up's decoding of the ring's entries;
//! each wrong order.

use rig_amd::gmc::{Access, pte};
use rig_amd::ih::{Entry, client, src};
use rig_bringup::gmc::Hub as BHub;
use rig_bringup::ih::Event;
use rig_bringup::{Bringup, BringupError};
use rig_sim::pci::ModelError;
use rig_sim::pci::gmc::{FaultKind, Hub, Phys};
use rig_sim::pci::ih::Dropped;

use crate::{Model, booted, dir};

const RW: u64 = pte::READABLE | pte::WRITEABLE;

/// A gfx1100 booted through stage 8: firmware, the GMC and the IH ring.
fn ready(dir: &std::path::Path) -> Bringup<Model> {
    let (mut b, _) = booted(dir);
    b.init_gmc().unwrap();
    b.init_ih().unwrap();
    b
}

fn fault_of(e: ModelError) -> rig_sim::pci::gmc::Fault {
    match e {
        ModelError::PageFault(f) => f,
        e => panic!("not a page fault: {e}"),
    }
}

/// The BAR0 dword of the GC hub's register `name`.
fn gc_reg(b: &Bringup<Model>, name: &str) -> u32 {
    let segs = b
        .discovery()
        .ip(rig_amd::discovery::hw_id::GC, 0)
        .unwrap()
        .segment_bases(false);
    b.blocks().regs.gc.reg(name).unwrap().dword(&segs).unwrap()
}

#[test]
fn a_vmid_translates_through_the_tables_the_bring_up_wrote() {
    let Some(dir) = dir() else { return };
    let mut b = ready(&dir);
    b.vm_create(1, 0x8001).unwrap();
    let va = 0x7f12_3456_7000;
    b.vm_map(1, va, 0x300_0000, RW).unwrap();
    let m = &mut b.bar_mut().0;
    m.gpu_write(Hub::Gc, 1, va + 0x10, b"through VMID 1")
        .unwrap();
    let mut out = [0u8; 14];
    m.vram_read(0x300_0010, &mut out).unwrap();
    assert_eq!(&out, b"through VMID 1");
    // The MM hub walks the same tables.
    assert_eq!(
        m.translate(Hub::Mm, 1, va + 0xfff, Access::Read).unwrap(),
        Phys::Vram(0x300_0fff)
    );
    // Another VMID does not see the mapping.
    let f = fault_of(m.translate(Hub::Gc, 2, va, Access::Read).unwrap_err());
    assert_eq!(f.kind, FaultKind::NoRoot);
}

#[test]
fn a_hand_built_table_is_walked_level_by_level() {
    let Some(dir) = dir() else { return };
    let mut b = ready(&dir);
    // VMID 3's tree built by hand at 128 MiB: PDB2, PDB1, PDB0, PTB; a 4 KiB page at
    // VA 0x0000_8040_2010_1000 (index 0x100 in each directory, 0x101 in the PTB) and a
    // 2 MiB page (a PDB0 entry with PDE_PTE) at VA 0x0000_8040_2040_0000.
    let (pdb2, pdb1, pdb0, ptb) = (
        128u64 << 20,
        (128 << 20) + 0x1000,
        (128 << 20) + 0x2000,
        (128 << 20) + 0x3000,
    );
    let put = |m: &mut rig_sim::pci::PciModel, at: u64, v: u64| {
        m.vram_write(at, &v.to_le_bytes()).unwrap()
    };
    let m = &mut b.bar_mut().0;
    put(m, pdb2 + 0x100 * 8, pdb1 | pte::VALID);
    put(m, pdb1 + 0x100 * 8, pdb0 | pte::VALID);
    put(m, pdb0 + 0x100 * 8, ptb | pte::VALID);
    put(m, ptb + 0x101 * 8, 0x500_0000 | pte::VALID | pte::READABLE);
    put(
        m,
        pdb0 + 0x102 * 8,
        0x600_0000 | pte::VALID | pte::PDE_PTE | pte::READABLE,
    );
    // An invalid PTE beside the valid one.
    put(m, ptb + 0x102 * 8, 0x700_0000 | pte::READABLE);
    let (lo, hi) = (
        gc_reg(&b, "GCVM_CONTEXT3_PAGE_TABLE_BASE_ADDR_LO32"),
        gc_reg(&b, "GCVM_CONTEXT3_PAGE_TABLE_BASE_ADDR_HI32"),
    );
    let m = &mut b.bar_mut().0;
    m.mmio_write(lo, u32::try_from(pdb2 | pte::VALID).unwrap())
        .unwrap();
    m.mmio_write(hi, 0).unwrap();
    assert_eq!(
        m.translate(Hub::Gc, 3, 0x0000_8040_2010_1234, Access::Read)
            .unwrap(),
        Phys::Vram(0x500_0234)
    );
    assert_eq!(
        m.translate(Hub::Gc, 3, 0x0000_8040_2045_6789, Access::Read)
            .unwrap(),
        Phys::Vram(0x605_6789)
    );
    let f = fault_of(
        m.translate(Hub::Gc, 3, 0x0000_8040_2010_2000, Access::Read)
            .unwrap_err(),
    );
    assert_eq!(f.kind, FaultKind::Invalid);
    let f = fault_of(
        m.translate(Hub::Gc, 3, 0x0000_8040_2010_1000, Access::Write)
            .unwrap_err(),
    );
    assert_eq!(f.kind, FaultKind::Permission);
    let f = fault_of(
        m.translate(Hub::Gc, 3, 0x0000_8040_4000_0000, Access::Read)
            .unwrap_err(),
    );
    assert_eq!(f.kind, FaultKind::Pde { level: 1 });
    // Each fault is an entry of the IH ring, decoded as amdgpu decodes it.
    let events = b.take_interrupts().unwrap();
    let addrs: Vec<(u64, bool)> = events
        .iter()
        .map(|e| match *e {
            Event::Fault {
                hub: BHub::Gc,
                vmid: 3,
                addr,
                write,
                ..
            } => (addr, write),
            e => panic!("{e:?}"),
        })
        .collect();
    assert_eq!(
        addrs,
        [
            (0x0000_8040_2010_2000, false),
            (0x0000_8040_2010_1000, true),
            (0x0000_8040_4000_0000, false)
        ]
    );
}

#[test]
fn an_invalid_pte_faults_into_the_ih_ring_with_the_vmids_pasid() {
    let Some(dir) = dir() else { return };
    let mut b = ready(&dir);
    b.vm_create(4, 0x1234).unwrap();
    b.vm_map(4, 0x10_0000, 0x310_0000, pte::READABLE).unwrap();
    let m = &mut b.bar_mut().0;
    let f = fault_of(m.gpu_write(Hub::Gc, 4, 0x10_0008, &[1]).unwrap_err());
    assert_eq!(f.kind, FaultKind::Permission);
    let f = fault_of(m.gpu_read(Hub::Mm, 4, 0x10_1000, &mut [0]).unwrap_err());
    assert_eq!(f.kind, FaultKind::Invalid);
    assert_eq!(m.interrupts(), 2);
    let events = b.take_interrupts().unwrap();
    match events[..] {
        [
            Event::Fault {
                hub: BHub::Gc,
                vmid: 4,
                pasid: 0x1234,
                addr: 0x10_0000,
                write: true,
                status: s0,
            },
            Event::Fault {
                hub: BHub::Mm,
                vmid: 4,
                pasid: 0x1234,
                addr: 0x10_1000,
                write: false,
                status: s1,
            },
        ] => {
            assert_ne!(s0, 0);
            assert_ne!(s1, 0);
        }
        ref e => panic!("{e:?}"),
    }
    // Taken once: the ring is empty again and the status was cleared.
    assert!(b.take_interrupts().unwrap().is_empty());
    let status = gc_reg(&b, "GCVM_L2_PROTECTION_FAULT_STATUS");
    assert_eq!(b.bar_mut().0.mmio_read(status).unwrap(), 0);
}

#[test]
fn a_changed_pte_is_seen_only_after_the_flush() {
    let Some(dir) = dir() else { return };
    let mut b = ready(&dir);
    b.vm_create(5, 5).unwrap();
    b.vm_map(5, 0x40_0000, 0x320_0000, RW).unwrap();
    let m = &mut b.bar_mut().0;
    assert_eq!(
        m.translate(Hub::Gc, 5, 0x40_0000, Access::Read).unwrap(),
        Phys::Vram(0x320_0000)
    );
    // The PTE rewritten in VRAM without an invalidation: the hub still uses its cached one.
    // The PTE found by walking the bring-up's tree by hand from VMID 5's root.
    let (root, _) = b.vm_root(5).unwrap();
    let m = &mut b.bar_mut().0;
    let walk = rig_amd::gmc::Walk {
        depth: 3,
        block_size: 0,
    };
    let mut table = root;
    for level in 0..3 {
        let mut w = [0u8; 8];
        m.vram_read(table + walk.index(level, 0x400) * 8, &mut w)
            .unwrap();
        table = u64::from_le_bytes(w) & pte::ADDR;
    }
    let ptb_entry = table + walk.index(3, 0x400) * 8;
    m.vram_write(ptb_entry, &(0x330_0000 | pte::VALID | RW).to_le_bytes())
        .unwrap();
    assert_eq!(
        m.translate(Hub::Gc, 5, 0x40_0000, Access::Read).unwrap(),
        Phys::Vram(0x320_0000)
    );
    b.flush(BHub::Gc, 5).unwrap();
    let m = &mut b.bar_mut().0;
    assert_eq!(
        m.translate(Hub::Gc, 5, 0x40_0000, Access::Read).unwrap(),
        Phys::Vram(0x330_0000)
    );
}

#[test]
fn the_gart_maps_vram_for_vmid_0() {
    let Some(dir) = dir() else { return };
    let mut b = ready(&dir);
    b.gart_map(3, 0x340_0000, RW).unwrap();
    let va = rig_bringup::gmc::GART_START + 3 * 4096;
    let m = &mut b.bar_mut().0;
    assert_eq!(
        m.translate(Hub::Gc, 0, va + 8, Access::Write).unwrap(),
        Phys::Vram(0x340_0008)
    );
    let below = rig_bringup::gmc::GART_START - 4096;
    let f = fault_of(m.translate(Hub::Gc, 0, below, Access::Read).unwrap_err());
    assert_eq!(f.kind, FaultKind::Range);
}

#[test]
fn stages_out_of_order_are_refused() {
    let Some(dir) = dir() else { return };
    let (mut b, set) = crate::setup(&dir);
    assert!(matches!(b.init_gmc(), Err(BringupError::Order(_))));
    b.boot_psp(&set).unwrap();
    b.load_firmware(&set).unwrap();
    assert!(matches!(b.init_ih(), Err(BringupError::Order(_))));
    assert!(matches!(b.vm_create(1, 1), Err(BringupError::Order(_))));
    b.init_gmc().unwrap();
    assert!(matches!(b.take_interrupts(), Err(BringupError::Order(_))));
    assert!(matches!(b.vm_map(1, 0, 0, RW), Err(BringupError::Vmid(1))));
    assert!(matches!(b.vm_create(0, 1), Err(BringupError::Vmid(0))));
    // A fault before the IH ring runs is dropped by the IH, not written.
    let m = &mut b.bar_mut().0;
    m.translate(Hub::Gc, 1, 0, Access::Read).unwrap_err();
    assert_eq!(m.interrupts_dropped().len(), 1);
    assert_eq!(m.interrupts_dropped()[0].1, Dropped::Disabled);
}

#[test]
fn releases_hangs_and_overflow_are_decoded() {
    let Some(dir) = dir() else { return };
    let mut b = ready(&dir);
    // The command processor's entries, as it will raise them once it joins the model
    // (stage 9): an end-of-pipe release and a bad opcode.
    let cp = |src_id, data| Entry {
        client_id: client::GRBM_CP,
        src_id,
        ring_id: 0x11,
        vmid: 2,
        pasid: 7,
        src_data: [data, 0, 0, 0],
        ..Entry::default()
    };
    let m = &mut b.bar_mut().0;
    m.post_interrupt(cp(src::CP_EOP, 0xabc));
    m.post_interrupt(cp(src::CP_BAD_OPCODE, 0));
    assert_eq!(
        b.take_interrupts().unwrap(),
        [
            Event::Release {
                ring_id: 0x11,
                vmid: 2,
                pasid: 7,
                context: 0xabc
            },
            Event::Hang {
                src_id: src::CP_BAD_OPCODE,
                ring_id: 0x11,
                vmid: 2,
                pasid: 7
            },
        ]
    );
    // A ring filled without being read overflows: the IH drops what does not fit, and the
    // bring-up says entries were lost and clears the overflow.
    let n = rig_bringup::ih::IH_RING_BYTES / 32;
    let m = &mut b.bar_mut().0;
    for i in 0..n {
        m.post_interrupt(cp(src::CP_EOP, u32::try_from(i).unwrap()));
    }
    assert!(
        m.interrupts_dropped()
            .iter()
            .any(|(_, d)| *d == Dropped::Overflow)
    );
    let events = b.take_interrupts().unwrap();
    assert_eq!(events.first(), Some(&Event::Overflow));
    let m = &mut b.bar_mut().0;
    m.post_interrupt(cp(src::CP_EOP, 1));
    let after = b.take_interrupts().unwrap();
    assert_eq!(
        after,
        [Event::Release {
            ring_id: 0x11,
            vmid: 2,
            pasid: 7,
            context: 1
        }]
    );
}

#[test]
fn the_setup_writes_the_registers_in_amdgpus_order() {
    let Some(dir) = dir() else { return };
    let b = ready(&dir);
    let names: Vec<&str> = b
        .trace()
        .iter()
        .filter_map(|s| match s {
            rig_bringup::Step::Write { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .skip_while(|n| !n.starts_with("GCVM_"))
        .collect();
    // gfxhub_v3_0_gart_enable: the GART aperture, the system aperture, the TLB, the L2,
    // the system domain, the VMIDs' contexts, then a flush of VMID 0.
    assert_eq!(
        names[..15],
        [
            "GCVM_CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32",
            "GCVM_CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32",
            "GCVM_CONTEXT0_PAGE_TABLE_START_ADDR_LO32",
            "GCVM_CONTEXT0_PAGE_TABLE_START_ADDR_HI32",
            "GCVM_CONTEXT0_PAGE_TABLE_END_ADDR_LO32",
            "GCVM_CONTEXT0_PAGE_TABLE_END_ADDR_HI32",
            "GCMC_VM_AGP_BASE",
            "GCMC_VM_AGP_BOT",
            "GCMC_VM_AGP_TOP",
            "GCMC_VM_SYSTEM_APERTURE_LOW_ADDR",
            "GCMC_VM_SYSTEM_APERTURE_HIGH_ADDR",
            "GCMC_VM_MX_L1_TLB_CNTL",
            "GCVM_L2_CNTL",
            "GCVM_CONTEXT0_CNTL",
            "GCVM_CONTEXT1_CNTL",
        ]
    );
    let flush = names
        .iter()
        .position(|n| *n == "GCVM_INVALIDATE_ENG17_REQ")
        .unwrap();
    assert_eq!(names[flush - 1], "GCVM_CONTEXT15_PAGE_TABLE_END_ADDR_HI32");
    assert!(names[flush + 1].starts_with("MMVM_CONTEXT0_"));
    // ih_v6_0_enable_ring, then toggle_ring.
    let ih: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| n.starts_with("IH_"))
        .collect();
    assert_eq!(
        ih,
        [
            "IH_RB_BASE",
            "IH_RB_BASE_HI",
            "IH_RB_CNTL",
            "IH_RB_WPTR_ADDR_LO",
            "IH_RB_WPTR_ADDR_HI",
            "IH_RB_WPTR",
            "IH_RB_RPTR",
            "IH_RB_CNTL",
        ]
    );
}
