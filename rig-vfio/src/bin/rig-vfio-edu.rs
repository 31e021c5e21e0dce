//! Drives QEMU's `edu` test device through rig-vfio, inside a guest (`tests/guest_edu.rs`
//! boots it): every step prints `EDU ok <step>: <detail>` or `EDU FAIL <step>: <error>` on
//! the console, and the exit status is the number of failures.
//!
//! The register map is QEMU's `docs/specs/edu.rst`: identification at 0x00 (0x010000ed for
//! version 1.0), liveness at 0x04 (reads back inverted), factorial at 0x08 with its status at
//! 0x20 (bit 0 computing, bit 0x80 raise an interrupt when done), interrupt status/raise/ack
//! at 0x24/0x60/0x64, and DMA source/destination/count/command at 0x80/0x88/0x90/0x98 with
//! a 4 KiB buffer at device address 0x40000. QEMU 7.2's range check refuses a transfer of
//! the whole 4 KiB, so the DMAs here are 2 KiB.

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rig_vfio::{Bdf, DmaBuffer, IrqKind, Options, PciFunction, ResetKind, Sysfs, VfioError};

const ID: u64 = 0x00;
const LIVENESS: u64 = 0x04;
const FACTORIAL: u64 = 0x08;
const STATUS: u64 = 0x20;
const IRQ_STATUS: u64 = 0x24;
const IRQ_RAISE: u64 = 0x60;
const IRQ_ACK: u64 = 0x64;
const DMA_SRC: u64 = 0x80;
const DMA_DST: u64 = 0x88;
const DMA_COUNT: u64 = 0x90;
const DMA_CMD: u64 = 0x98;

const STATUS_COMPUTING: u32 = 0x01;
const STATUS_IRQ_ON_FACTORIAL: u32 = 0x80;
const FACTORIAL_IRQ: u32 = 0x01;
const DMA_START: u64 = 0x01;
const DMA_TO_RAM: u64 = 0x02;
const DMA_IRQ: u64 = 0x04;
const DMA_IRQ_VALUE: u32 = 0x100;
/// The device's DMA buffer, in its own address space.
const EDU_BUFFER: u64 = 0x40000;
const CHUNK: u64 = 2048;

/// IOVAs: the edu device masks DMA addresses to 28 bits, so all stay under 256 MiB.
const IOVA_MAPPED: u64 = 0x10_0000;
const IOVA_UNMAPPED: u64 = 0x20_0000;
const IOVA_NEVER: u64 = 0x30_0000;

type Res<T> = Result<T, Box<dyn Error>>;

fn chain(e: &dyn Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s += &format!(": {c}");
        cur = c.source();
    }
    s
}

struct Report {
    failures: i32,
}

impl Report {
    fn step(&mut self, name: &str, result: Res<String>) {
        match result {
            Ok(detail) => println!("EDU ok {name}: {detail}"),
            Err(e) => {
                self.failures += 1;
                println!("EDU FAIL {name}: {}", chain(e.as_ref()));
            }
        }
    }
}

fn find(sysfs: &Sysfs, ids: (u16, u16)) -> Res<Bdf> {
    for entry in std::fs::read_dir(sysfs.root().join("bus/pci/devices"))? {
        let name = entry?.file_name();
        let Ok(bdf) = name.to_string_lossy().parse::<Bdf>() else {
            continue;
        };
        if sysfs.ids(bdf)? == ids {
            return Ok(bdf);
        }
    }
    Err(format!(
        "no {:04x}:{:04x} function on the guest's PCI bus",
        ids.0, ids.1
    )
    .into())
}

fn check(cond: bool, what: impl FnOnce() -> String) -> Res<()> {
    if cond { Ok(()) } else { Err(what().into()) }
}

/// Runs one DMA and waits for the command register's start bit to clear.
fn dma(f: &PciFunction, src: u64, dst: u64, len: u64, cmd: u64) -> Res<()> {
    let bar = f.bar(0)?;
    bar.write64(DMA_SRC, src)?;
    bar.write64(DMA_DST, dst)?;
    bar.write64(DMA_COUNT, len)?;
    bar.write64(DMA_CMD, cmd | DMA_START)?;
    let start = Instant::now();
    while bar.read64(DMA_CMD)? & DMA_START != 0 {
        if start.elapsed() > Duration::from_secs(10) {
            return Err("the DMA did not finish in 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn expect_refused(r: rig_vfio::Result<u32>, what: &str) -> Res<String> {
    match r {
        Err(e @ VfioError::OutOfBounds { .. }) => Ok(format!("{what} refused: {e}")),
        Err(e) => Err(format!("{what}: wrong refusal: {}", chain(&e)).into()),
        Ok(v) => Err(format!("{what} was allowed (read {v:#x})").into()),
    }
}

fn main() {
    let mut r = Report { failures: 0 };
    let options = Options::default();
    let sysfs = options.sysfs.clone();
    let bdf = match find(&sysfs, (0x1234, 0x11e8)) {
        Ok(b) => b,
        Err(e) => {
            r.step("find", Err(e));
            std::process::exit(r.failures);
        }
    };
    r.step("find", Ok(format!("edu at {bdf}")));
    r.step(
        "routes",
        sysfs
            .routes(bdf, std::path::Path::new("/dev"))
            .map(|ro| {
                format!(
                    "container {}, iommufd {}, cdev {}",
                    ro.container,
                    ro.iommufd,
                    ro.cdev.as_deref().unwrap_or("none")
                )
            })
            .map_err(Into::into),
    );
    r.step(
        "reset-methods",
        sysfs
            .reset_methods(bdf)
            .map(|m| m.join(" "))
            .map_err(Into::into),
    );

    let mut f = match PciFunction::take(bdf, &options) {
        Ok(f) => f,
        Err(e) => {
            r.step("take", Err(e.into()));
            std::process::exit(r.failures);
        }
    };
    r.step(
        "take",
        Ok(format!(
            "group {}, driver before: {}, now: {}",
            f.group(),
            f.previous_driver().unwrap_or("none"),
            sysfs.driver(bdf).ok().flatten().unwrap_or_default()
        )),
    );

    r.step(
        "busy",
        match PciFunction::take(bdf, &options) {
            Err(e @ VfioError::GroupBusy { .. }) => Ok(format!("a second taker is refused: {e}")),
            Err(e) => Err(format!("wrong refusal: {}", chain(&e)).into()),
            Ok(_) => Err("a second taker got the function".into()),
        },
    );

    r.step(
        "config",
        (|| {
            let ids = f.config_u32(0)?;
            check(ids == 0x11e8_1234, || format!("vendor/device {ids:#x}"))?;
            let size = f.config_size();
            expect_refused(
                f.config_u32(size - 2),
                "a 4-byte read 2 bytes before the end",
            )?;
            expect_refused(f.config_u32(size), "a read at the end")?;
            let mut big = vec![0; 8];
            let past = f.config_read(size - 4, &mut big);
            check(matches!(past, Err(VfioError::OutOfBounds { .. })), || {
                format!("an 8-byte read 4 bytes before the end: {past:?}")
            })?;
            Ok(format!(
                "ids {ids:#010x}, {size} bytes, accesses past the end refused"
            ))
        })(),
    );

    r.step(
        "bus-master",
        (|| {
            let cmd = f.enable_bus_master()?;
            check(cmd & 0x4 != 0, || format!("command register {cmd:#x}"))?;
            Ok(format!("command register {cmd:#06x}"))
        })(),
    );

    r.step(
        "bar0",
        (|| {
            let bar = f.bar(0)?;
            let id = bar.read32(ID)?;
            check(id == 0x0100_00ed, || format!("identification {id:#x}"))?;
            let via_fd = f.bar_unmapped(0)?.read32(ID)?;
            check(via_fd == id, || {
                format!("through the device file {via_fd:#x}")
            })?;
            expect_refused(bar.read32(bar.size()), "a read at the BAR's end")?;
            expect_refused(bar.read32(bar.size() - 2), "a read across the BAR's end")?;
            let bar1 = f.bar(1);
            check(
                matches!(bar1, Err(VfioError::RegionUnusable { .. })),
                || format!("BAR1 {bar1:?}"),
            )?;
            Ok(format!(
                "identification {id:#010x} ({}), {} KiB, same through the device file, \
             past-the-end and BAR1 refused",
                if bar.is_mapped() {
                    "mmap"
                } else {
                    "read/write"
                },
                bar.size() / 1024
            ))
        })(),
    );

    r.step(
        "liveness",
        (|| {
            let bar = f.bar(0)?;
            let mut seen = Vec::new();
            for v in [0x1234_5678u32, 0, 0xffff_ffff, 0xa5a5_5a5a] {
                bar.write32(LIVENESS, v)?;
                let got = bar.read32(LIVENESS)?;
                check(got == !v, || format!("wrote {v:#x}, read {got:#x}"))?;
                seen.push(format!("{v:#x}->{got:#x}"));
            }
            Ok(seen.join(" "))
        })(),
    );

    r.step(
        "msi-factorial",
        (|| {
            let n = f.irq_count(IrqKind::Msi);
            f.enable_interrupts(IrqKind::Msi, 1)?;
            let bar = f.bar(0)?;
            bar.write32(STATUS, STATUS_IRQ_ON_FACTORIAL)?;
            bar.write32(FACTORIAL, 10)?;
            let fired = f.wait_interrupt(0, Duration::from_secs(10))?;
            let status = bar.read32(IRQ_STATUS)?;
            bar.write32(IRQ_ACK, status)?;
            check(bar.read32(STATUS)? & STATUS_COMPUTING == 0, || {
                "still computing".into()
            })?;
            let fact = bar.read32(FACTORIAL)?;
            check(fact == 3_628_800, || format!("10! read {fact}"))?;
            check(status & FACTORIAL_IRQ != 0, || {
                format!("interrupt status {status:#x}")
            })?;
            bar.write32(STATUS, 0)?;
            // A raised interrupt arrives too, with the value raised.
            bar.write32(IRQ_RAISE, 0x40)?;
            f.wait_interrupt(0, Duration::from_secs(10))?;
            let raised = bar.read32(IRQ_STATUS)?;
            bar.write32(IRQ_ACK, raised)?;
            check(raised & 0x40 != 0, || format!("raised status {raised:#x}"))?;
            Ok(format!(
                "{n} MSI vector(s); 10! = {fact}, interrupt status {status:#x}, fired {fired}; \
             raise 0x40 arrived"
            ))
        })(),
    );

    r.step(
        "dma",
        (|| {
            let buf = Arc::new(DmaBuffer::new(4096)?);
            let pattern: Vec<u8> = (0..CHUNK as usize).map(|i| (i * 7 + 3) as u8).collect();
            buf.write(0, &pattern);
            f.map_dma(IOVA_MAPPED, buf.clone())?;
            let bar = f.bar(0)?;
            dma(&f, IOVA_MAPPED, EDU_BUFFER, CHUNK, DMA_IRQ)?;
            f.wait_interrupt(0, Duration::from_secs(10))?;
            let st = bar.read32(IRQ_STATUS)?;
            bar.write32(IRQ_ACK, st)?;
            check(st & DMA_IRQ_VALUE != 0, || {
                format!("DMA interrupt status {st:#x}")
            })?;
            dma(&f, EDU_BUFFER, IOVA_MAPPED + CHUNK, CHUNK, DMA_TO_RAM)?;
            let mut back = vec![0; CHUNK as usize];
            buf.read(CHUNK as usize, &mut back);
            check(back == pattern, || {
                let bad = back
                    .iter()
                    .zip(&pattern)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                format!(
                    "byte {bad} came back {:#x}, sent {:#x}",
                    back[bad], pattern[bad]
                )
            })?;
            Ok(format!(
                "{CHUNK} bytes RAM->edu from IOVA {IOVA_MAPPED:#x} (interrupt {st:#x}) and back \
             to IOVA {:#x}: equal",
                IOVA_MAPPED + CHUNK
            ))
        })(),
    );

    r.step(
        "dma-refused",
        (|| {
            let victim = Arc::new(DmaBuffer::new(4096)?);
            victim.write(0, &[0xaa; 4096]);
            f.map_dma(IOVA_UNMAPPED, victim.clone())?;
            let overlap = f.map_dma(IOVA_UNMAPPED, Arc::new(DmaBuffer::new(4096)?));
            check(matches!(overlap, Err(VfioError::DmaMap { .. })), || {
                format!("an overlapping map: {overlap:?}")
            })?;
            let kept = f.unmap_dma(IOVA_UNMAPPED)?;
            check(Arc::ptr_eq(&kept, &victim), || {
                "unmap returned another buffer".into()
            })?;
            dma(&f, EDU_BUFFER, IOVA_UNMAPPED, CHUNK, DMA_TO_RAM)?;
            dma(&f, EDU_BUFFER, IOVA_NEVER, CHUNK, DMA_TO_RAM)?;
            let mut after = vec![0; 4096];
            victim.read(0, &mut after);
            check(after.iter().all(|&b| b == 0xaa), || {
                "the unmapped page was written".into()
            })?;
            let again = f.unmap_dma(IOVA_UNMAPPED);
            check(matches!(again, Err(VfioError::NotMapped(_))), || {
                format!("a second unmap: {again:?}")
            })?;
            Ok(format!(
                "DMA to unmapped IOVA {IOVA_UNMAPPED:#x} and never-mapped {IOVA_NEVER:#x} wrote \
             nothing; overlap and double unmap refused"
            ))
        })(),
    );

    r.step(
        "reset",
        (|| {
            let kind = f.reset()?;
            let bar = f.bar(0)?;
            let id = bar.read32(ID)?;
            check(id == 0x0100_00ed, || {
                format!("identification after reset {id:#x}")
            })?;
            bar.write32(LIVENESS, 7)?;
            check(bar.read32(LIVENESS)? == !7, || {
                "liveness after reset".into()
            })?;
            check(kind != ResetKind::Unlisted, || {
                "the kernel listed no method".into()
            })?;
            Ok(format!("{kind:?} reset; the device answers after it"))
        })(),
    );

    r.step(
        "release",
        (|| {
            f.release()?;
            let driver = sysfs.driver(bdf)?;
            check(driver.is_none(), || {
                format!("after release bound to {driver:?}")
            })?;
            let over = std::fs::read_to_string(sysfs.device(bdf)?.join("driver_override"))?;
            check(over.trim() == "(null)", || {
                format!("driver_override {over:?}")
            })?;
            Ok("given back: unbound as before, driver_override cleared".into())
        })(),
    );

    r.step(
        "retake",
        (|| {
            let f = PciFunction::take(bdf, &options)?;
            let id = f.bar(0)?.read32(ID)?;
            check(id == 0x0100_00ed, || format!("identification {id:#x}"))?;
            f.release()?;
            Ok(format!("taken again, identification {id:#010x}, released"))
        })(),
    );

    virtio(&mut r, &options);
    std::process::exit(r.failures);
}

/// A transitional virtio-rng function, bound to the kernel's virtio-pci driver: taken from
/// that driver and given back to it, its MSI-X vectors wired to eventfds, and its I/O-port
/// BAR (which VFIO does not let a process map) read through the device file.
fn virtio(r: &mut Report, options: &Options) {
    let sysfs = &options.sysfs;
    let bdf = match find(sysfs, (0x1af4, 0x1005)) {
        Ok(b) => b,
        Err(e) => return r.step("virtio-take", Err(e)),
    };
    let mut f = match PciFunction::take(bdf, options) {
        Ok(f) => f,
        Err(e) => return r.step("virtio-take", Err(e.into())),
    };
    r.step(
        "virtio-take",
        (|| {
            let before = f.previous_driver().unwrap_or("none").to_owned();
            check(before == "virtio-pci", || {
                format!("driver before the take: {before}")
            })?;
            let now = sysfs.driver(bdf)?;
            check(now.as_deref() == Some("vfio-pci"), || {
                format!("driver now {now:?}")
            })?;
            Ok(format!("{bdf} taken from {before}, group {}", f.group()))
        })(),
    );
    r.step(
        "virtio-msix",
        (|| {
            let n = f.irq_count(IrqKind::Msix) as usize;
            check(n >= 1, || "no MSI-X vectors".into())?;
            f.enable_interrupts(IrqKind::Msix, n)?;
            let cap = f.find_capability(0x11)?.ok_or("no MSI-X capability")?;
            let control = f.config_u16(cap + 2)?;
            check(control & 0x8000 != 0, || {
                format!("MSI-X control {control:#x}: not enabled")
            })?;
            for v in 0..n {
                f.trigger_interrupt(v)?;
                f.wait_interrupt(v, Duration::from_secs(5))?;
            }
            f.disable_interrupts()?;
            let control = f.config_u16(cap + 2)?;
            check(control & 0x8000 == 0, || {
                format!("MSI-X control {control:#x} after disable")
            })?;
            Ok(format!(
                "{n} vectors enabled (capability at {cap:#x}, enable bit set), each fired to its \
             eventfd; disabled"
            ))
        })(),
    );
    r.step(
        "virtio-io-bar",
        (|| {
            let bar = f.bar(0)?;
            check(!bar.is_mapped(), || "an I/O-port BAR was mapped".into())?;
            let features = bar.read32(0)?;
            check(features != 0, || "device features read 0".into())?;
            Ok(format!(
                "BAR0 ({} bytes of I/O ports) through the device file: features {features:#010x}",
                bar.size()
            ))
        })(),
    );
    r.step(
        "virtio-release",
        (|| {
            f.release()?;
            let now = sysfs.driver(bdf)?;
            check(now.as_deref() == Some("virtio-pci"), || {
                format!("driver after release {now:?}")
            })?;
            Ok("given back to virtio-pci".into())
        })(),
    );
}
