//! The PSP of the register-level model: its bootloader and the start of its secure OS, as
//! seen through the MP0 C2PMSG mailbox ([`rig_amd::psp`] states the protocol).
//!
//! The model holds the SOS file it was made with as the firmware it would authenticate: a
//! component is accepted only if the bytes at the buffer the driver names are that
//! component, byte for byte, which stands in for the real PSP's signature check (AMD's keys
//! and header format are not public), so a changed byte (a bad signature field), a short or
//! long copy (a wrong size) or another file's image (a GC image before SOS) is refused. The
//! components must come in amdgpu's order ([`rig_amd::psp::BOOT_ORDER`]), each that the file
//! has, none twice. A refused command is never answered: bit 31 of C2PMSG_35 stays clear, so
//! the driver's wait times out, and the bootloader takes nothing more until reset. What the
//! real bootloader does on a refusal is not public; docs/pci.md lists this as checked only
//! against the model.

use rig_amd::psp::{BOOT_ORDER, BootCommand, READY, RING_TYPE_KM};
use rig_amd::ucode::{Firmware, Kind, UcodeError};

/// Why the model's PSP refused a mailbox write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A command came while the bootloader was not ready (bit 31 of C2PMSG_35 clear).
    Busy {
        /// The value written.
        value: u32,
    },
    /// C2PMSG_35 was written with no bootloader command.
    UnknownCommand {
        /// The value written.
        value: u32,
    },
    /// The command came before a component the file has that comes earlier in the order.
    Skipped {
        /// The command.
        command: BootCommand,
        /// The component not loaded yet.
        missing: BootCommand,
    },
    /// The command was loaded already, or a later one was.
    OutOfOrder {
        /// The command.
        command: BootCommand,
    },
    /// The SOS file has no component for the command.
    NotInFile {
        /// The command.
        command: BootCommand,
    },
    /// The buffer does not hold the component: it differs from byte `at` on.
    BadComponent {
        /// The command.
        command: BootCommand,
        /// The first byte that differs.
        at: usize,
    },
    /// The buffer lies outside VRAM.
    BufferOutside {
        /// Its address.
        addr: u64,
    },
    /// A bootloader command after the secure OS started.
    AfterSos {
        /// The value written.
        value: u32,
    },
    /// A ring command before the secure OS runs, or one that is not a kernel-mode ring's
    /// creation with a nonzero size.
    BadRing {
        /// The value written to C2PMSG_64.
        value: u32,
    },
}

/// Where the model's PSP is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Its bootloader takes components; `loaded` of [`BOOT_ORDER`] are in.
    Bootloader,
    /// A refused command left the bootloader stuck until reset.
    Stuck,
    /// The secure OS runs and waits for its ring.
    SosRunning,
    /// The kernel-mode ring exists.
    RingCreated,
}

/// The model's PSP.
#[derive(Debug)]
pub struct Psp {
    /// The components of the SOS file the model accepts, by command.
    genuine: Vec<(BootCommand, Vec<u8>, u32)>,
    c2pmsg: [u32; 128],
    state: State,
    loaded: Vec<BootCommand>,
    refusals: Vec<Refusal>,
}

impl Psp {
    /// A PSP that accepts the components of `sos_file` (with `aux`, its auxiliary set).
    pub fn new(sos_file: &[u8], aux: bool) -> Result<Self, UcodeError> {
        let fw = Firmware::parse(Kind::Sos, sos_file)?;
        let genuine = BOOT_ORDER
            .into_iter()
            .filter_map(|c| {
                let part = fw
                    .sos_parts(aux)
                    .into_iter()
                    .find(|p| p.kind == c.component() && p.region.size > 0)?;
                Some((c, fw.slice(part.region).to_vec(), part.version))
            })
            .collect();
        let mut c2pmsg = [0; 128];
        c2pmsg[35] = READY;
        Ok(Psp {
            genuine,
            c2pmsg,
            state: State::Bootloader,
            loaded: Vec::new(),
            refusals: Vec::new(),
        })
    }

    /// Where it is.
    pub fn state(&self) -> State {
        self.state
    }

    /// The commands it accepted, in order.
    pub fn loaded(&self) -> &[BootCommand] {
        &self.loaded
    }

    /// What it refused, in order.
    pub fn refusals(&self) -> &[Refusal] {
        &self.refusals
    }

    /// C2PMSG_`n`.
    pub fn read(&self, n: usize) -> u32 {
        self.c2pmsg.get(n).copied().unwrap_or(0)
    }

    /// A write of `value` to C2PMSG_`n`; `vram` reads `len` bytes at an address (`None` if
    /// outside VRAM).
    pub fn write(&mut self, n: usize, value: u32, vram: &dyn Fn(u64, usize) -> Option<Vec<u8>>) {
        match n {
            35 => self.command(value, vram),
            64 => self.ring(value),
            _ => {
                if let Some(r) = self.c2pmsg.get_mut(n) {
                    *r = value;
                }
            }
        }
    }

    fn refuse(&mut self, r: Refusal) {
        tracing::debug!(refusal = ?r, "model PSP refused a mailbox write");
        self.refusals.push(r);
    }

    fn command(&mut self, value: u32, vram: &dyn Fn(u64, usize) -> Option<Vec<u8>>) {
        match self.state {
            State::Bootloader => {}
            State::Stuck => return self.refuse(Refusal::Busy { value }),
            State::SosRunning | State::RingCreated => {
                return self.refuse(Refusal::AfterSos { value });
            }
        }
        // From here the bootloader is busy: bit 31 clear until it answers.
        self.c2pmsg[35] = value & !READY;
        if let Err(r) = self.load(value, vram) {
            self.state = State::Stuck;
            return self.refuse(r);
        }
        self.c2pmsg[35] = READY;
    }

    fn load(
        &mut self,
        value: u32,
        vram: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
    ) -> Result<(), Refusal> {
        let command = BootCommand::of(value).ok_or(Refusal::UnknownCommand { value })?;
        let rank = |c: BootCommand| BOOT_ORDER.iter().position(|&o| o == c);
        if self
            .loaded
            .last()
            .is_some_and(|&last| rank(last) >= rank(command))
        {
            return Err(Refusal::OutOfOrder { command });
        }
        if let Some(&(missing, ..)) = self
            .genuine
            .iter()
            .find(|(c, ..)| rank(*c) < rank(command) && !self.loaded.contains(c))
        {
            return Err(Refusal::Skipped { command, missing });
        }
        let &(_, ref image, version) = self
            .genuine
            .iter()
            .find(|(c, ..)| *c == command)
            .ok_or(Refusal::NotInFile { command })?;
        let addr = u64::from(self.c2pmsg[36]) << 20;
        // The component and what follows it in the 1 MiB buffer: a longer copy differs there
        // (amdgpu clears the buffer before each copy).
        let len = (image.len() + 4096).min(rig_amd::psp::BUFFER_BYTES as usize);
        let found = vram(addr, len).ok_or(Refusal::BufferOutside { addr })?;
        let expected = image.iter().copied().chain(std::iter::repeat(0));
        if let Some(at) = found.iter().zip(expected).position(|(a, b)| *a != b) {
            return Err(Refusal::BadComponent { command, at });
        }
        self.loaded.push(command);
        if command == BootCommand::SosDrv {
            // Sign of life and version (psp_v13_0_is_sos_alive, init_sos_version).
            self.c2pmsg[81] = version.max(1);
            self.c2pmsg[58] = version;
            self.c2pmsg[64] = READY;
            self.state = State::SosRunning;
        }
        Ok(())
    }

    fn ring(&mut self, value: u32) {
        if self.state != State::SosRunning || value != RING_TYPE_KM << 16 || self.c2pmsg[71] == 0 {
            // Never answered: bit 31 stays clear.
            self.c2pmsg[64] = value & !READY;
            return self.refuse(Refusal::BadRing { value });
        }
        self.c2pmsg[64] = READY;
        self.state = State::RingCreated;
    }
}
