//! The bring-up against rig-sim's register-level model of gfx1100, with Debian's firmware
//! files: one module per stage ([`psp`] stages 3 to 5, [`smu`] 6, [`gmc`] 7 and 8), each
//! with the right order and each wrong one.

mod gmc;
mod psp;
mod smu;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rig_bringup::{Bar, Bringup, FirmwareSet};
use rig_sim::pci::{ModelError, PciModel};

/// The model behind the bring-up's seam, as rig-vfio's mapped BAR will be.
#[derive(Debug)]
struct Model(PciModel);

impl Bar for Model {
    type Error = ModelError;
    fn read32(&mut self, dword: u32) -> Result<u32, ModelError> {
        self.0.mmio_read(dword)
    }
    fn write32(&mut self, dword: u32, value: u32) -> Result<(), ModelError> {
        self.0.mmio_write(dword, value)
    }
    fn vram_read(&mut self, offset: u64, out: &mut [u8]) -> Result<(), ModelError> {
        self.0.vram_read(offset, out)
    }
    fn vram_write(&mut self, offset: u64, data: &[u8]) -> Result<(), ModelError> {
        self.0.vram_write(offset, data)
    }
}

const VRAM: u64 = 256 << 20;
/// Long enough for any answer the model gives; the waits that must fail take this long.
const TIMEOUT: Duration = Duration::from_millis(200);

fn dir() -> Option<PathBuf> {
    let dir = std::env::var_os("RIG_AMD_FIRMWARE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/lib/firmware/amdgpu"));
    if dir.join("psp_13_0_0_sos.bin").exists() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("RIG_REQUIRE_FIRMWARE").is_none(),
        "no gfx1100 firmware in {}",
        dir.display()
    );
    eprintln!("no gfx1100 firmware in {}: skipped", dir.display());
    None
}

/// A model of gfx1100 that accepts Debian's files, and the set of those files.
fn setup(dir: &Path) -> (Bringup<Model>, FirmwareSet) {
    let sos = std::fs::read(dir.join("psp_13_0_0_sos.bin")).unwrap();
    let mut model = PciModel::new("gfx1100", VRAM, &sos, false).unwrap();
    let probe = Bringup::discover(
        Model(PciModel::new("gfx1100", VRAM, &sos, false).unwrap()),
        TIMEOUT,
    )
    .unwrap();
    let set = FirmwareSet::read(dir, probe.blocks()).unwrap();
    for (name, bytes) in set.files() {
        if !name.ends_with("_sos.bin") {
            model.accept_firmware(name, bytes).unwrap();
        }
    }
    (Bringup::discover(Model(model), TIMEOUT).unwrap(), set)
}

/// A gfx1100 model booted through stage 5: the PSP runs and every image is in.
fn booted(dir: &Path) -> (Bringup<Model>, FirmwareSet) {
    let (mut b, set) = setup(dir);
    b.boot_psp(&set).unwrap();
    b.load_firmware(&set).unwrap();
    (b, set)
}
