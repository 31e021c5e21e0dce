//! The PSP of the register-level model: its bootloader, the start of its secure OS and the
//! secure OS's kernel-mode ring, as seen through the MP0 C2PMSG mailbox and VRAM
//! ([`rig_amd::psp`] states the protocol).
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
//!
//! The ring: C2PMSG_69/70 give its address, 71 its size, and `RING_TYPE_KM << 16` in 64
//! creates it. Each write of C2PMSG_67 (the write pointer, in dwords) makes the secure OS
//! take every frame from its read pointer to there: it reads the command buffer the frame
//! names, runs the command, writes the response's status (and `fw_addr`) into the buffer and
//! then the frame's fence value to its fence address. It takes `SETUP_TMR` once, for a
//! region of at least [`TMR_BYTES`] aligned to [`TMR_ALIGN`] inside VRAM; `LOAD_IP_FW` only
//! after the TMR, for an image byte for byte one the model was told to accept
//! ([`Psp::accept`], whose file is parsed with [`rig_amd::ucode`] and cut with
//! [`rig_amd::psp::ip_images`]) under its own type, placing it in the TMR (4 KiB aligned) and
//! answering where; `AUTOLOAD_RLC` only once `RLC_G` is in. Anything else is answered with a
//! failing status ([`status::NOT_SUPPORTED`], or [`status::UNKNOWN_COMMAND`] for an id it
//! does not know) and changes nothing. A frame whose buffer lies outside VRAM is not
//! answered at all. Addresses are MC addresses of VRAM with the frame buffer at MC 0 (the
//! model has no GMC yet, docs/pci.md); the real PSP's checks and placement are not public.

use rig_amd::psp::{
    BOOT_ORDER, BootCommand, CMD_AT, CMD_BYTES, CMD_ID_AT, FRAME_BYTES, GfxCmd, GfxFw, READY,
    RESP_AT, RING_TYPE_KM, TMR_ALIGN, TMR_BYTES, ip_images, status,
};
use rig_amd::ucode::{Firmware, Kind, UcodeError};

use super::ModelError;

/// The memory the PSP reads and writes (VRAM, by MC address).
pub trait Memory {
    /// `len` bytes at `addr`, or `None` if they are not all inside.
    fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>>;
    /// Writes `data` at `addr`; false (and nothing written) if not all inside.
    fn write(&mut self, addr: u64, data: &[u8]) -> bool;
}

/// Why the secure OS refused a ring command (it answered with a failing status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandRefusal {
    /// A `cmd_id` it does not know.
    UnknownCommand(u32),
    /// A second `SETUP_TMR`.
    TmrTwice,
    /// A TMR not aligned, too small or outside VRAM.
    TmrPlacement {
        /// Its MC address.
        addr: u64,
        /// Its size.
        size: u32,
    },
    /// `LOAD_IP_FW` before the TMR.
    BeforeTmr,
    /// A `fw_type` it takes no image of.
    FwType(u32),
    /// The bytes are not the image of that type: they differ from byte `at` on (or the
    /// size differs, `at` then being the shorter length).
    BadImage {
        /// The type.
        fw: GfxFw,
        /// The first byte that differs.
        at: usize,
    },
    /// The image is not inside VRAM.
    ImageOutside {
        /// Its MC address.
        addr: u64,
    },
    /// The TMR has no room left.
    TmrFull {
        /// The type.
        fw: GfxFw,
    },
    /// `AUTOLOAD_RLC` before `RLC_G`.
    AutoloadEarly,
}

/// An image the secure OS took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loaded {
    /// Its type.
    pub fw: GfxFw,
    /// Its bytes.
    pub size: u32,
    /// Where it was placed (MC address in the TMR).
    pub at: u64,
}

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
    /// creation with a nonzero size that is a multiple of a frame's, inside VRAM.
    BadRing {
        /// The value written to C2PMSG_64.
        value: u32,
    },
    /// A frame whose command buffer or fence lies outside VRAM: never answered.
    FrameOutside {
        /// The frame's dword in the ring.
        at: u32,
    },
    /// A ring command the secure OS answered with a failing status.
    Command {
        /// Its `cmd_id`.
        cmd_id: u32,
        /// Why.
        refusal: CommandRefusal,
        /// The status it answered.
        status: u32,
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

/// The kernel-mode ring and what came through it.
#[derive(Debug, Default)]
struct Ring {
    addr: u64,
    bytes: u32,
    /// The read pointer, in dwords.
    rptr: u32,
    /// The TMR's MC address and size, once set up.
    tmr: Option<(u64, u64)>,
    /// Bytes of the TMR in use.
    tmr_used: u64,
    loaded: Vec<Loaded>,
    autoload: bool,
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
    /// The images it takes in `LOAD_IP_FW`, by type.
    images: Vec<(GfxFw, Vec<u8>)>,
    ring: Ring,
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
            images: Vec::new(),
            ring: Ring::default(),
        })
    }

    /// Makes it take the images of the firmware file `name` (its last path component): the
    /// file is parsed with rig-amd's reader and cut as amdgpu cuts it.
    pub fn accept(&mut self, name: &str, bytes: &[u8]) -> Result<(), ModelError> {
        let kind = Kind::of_file_name(name).ok_or_else(|| ModelError::FirmwareName(name.into()))?;
        let fw = Firmware::parse(kind, bytes)?;
        for (t, image) in ip_images(name, &fw)? {
            self.images.retain(|(u, _)| *u != t);
            self.images.push((t, image.to_vec()));
        }
        Ok(())
    }

    /// The images its secure OS took, in order (a type loaded again replaces its entry).
    pub fn ip_loaded(&self) -> &[Loaded] {
        &self.ring.loaded
    }

    /// The TMR it was given: MC address and size.
    pub fn tmr(&self) -> Option<(u64, u64)> {
        self.ring.tmr
    }

    /// Whether the RLC's autoload was started.
    pub fn autoload_started(&self) -> bool {
        self.ring.autoload
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

    /// A write of `value` to C2PMSG_`n`, with `vram` the memory it reads and writes.
    pub fn write(&mut self, n: usize, value: u32, vram: &mut dyn Memory) {
        match n {
            35 => self.command(value, vram),
            64 => self.ring(value, vram),
            67 => {
                self.c2pmsg[67] = value;
                if self.state == State::RingCreated {
                    self.consume(value, vram);
                }
            }
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

    fn command(&mut self, value: u32, vram: &dyn Memory) {
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

    fn load(&mut self, value: u32, vram: &dyn Memory) -> Result<(), Refusal> {
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
        let found = vram
            .read(addr, len)
            .ok_or(Refusal::BufferOutside { addr })?;
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

    fn ring(&mut self, value: u32, vram: &dyn Memory) {
        let addr = u64::from(self.c2pmsg[70]) << 32 | u64::from(self.c2pmsg[69]);
        let bytes = self.c2pmsg[71];
        if self.state != State::SosRunning
            || value != RING_TYPE_KM << 16
            || bytes == 0
            || !(bytes as usize).is_multiple_of(FRAME_BYTES)
            || vram.read(addr, bytes as usize).is_none()
        {
            // Never answered: bit 31 stays clear.
            self.c2pmsg[64] = value & !READY;
            return self.refuse(Refusal::BadRing { value });
        }
        self.c2pmsg[64] = READY;
        self.state = State::RingCreated;
        self.ring = Ring {
            addr,
            bytes,
            ..Ring::default()
        };
    }

    /// Takes the frames from the read pointer to `wptr` (dwords, reduced modulo the ring).
    fn consume(&mut self, wptr: u32, vram: &mut dyn Memory) {
        let ring_dw = self.ring.bytes / 4;
        let frame_dw = (FRAME_BYTES / 4) as u32;
        let wptr = wptr % ring_dw;
        while self.ring.rptr != wptr {
            let at = self.ring.rptr;
            self.ring.rptr = (at + frame_dw) % ring_dw;
            let Some(frame) = vram.read(self.ring.addr + u64::from(at) * 4, FRAME_BYTES) else {
                return self.refuse(Refusal::FrameOutside { at });
            };
            let word =
                |i: usize| u32::from_le_bytes([frame[i], frame[i + 1], frame[i + 2], frame[i + 3]]);
            let cmd_addr = u64::from(word(4)) << 32 | u64::from(word(0));
            let fence_addr = u64::from(word(16)) << 32 | u64::from(word(12));
            let fence_value = word(20);
            let (Some(cmd), Some(_)) = (vram.read(cmd_addr, CMD_BYTES), vram.read(fence_addr, 4))
            else {
                self.refuse(Refusal::FrameOutside { at });
                continue;
            };
            let field = |i: usize| {
                let i = CMD_AT + i;
                u32::from_le_bytes([cmd[i], cmd[i + 1], cmd[i + 2], cmd[i + 3]])
            };
            let cmd_id = u32::from_le_bytes([
                cmd[CMD_ID_AT],
                cmd[CMD_ID_AT + 1],
                cmd[CMD_ID_AT + 2],
                cmd[CMD_ID_AT + 3],
            ]);
            let (status, fw_addr) = match self.run(cmd_id, &field, vram) {
                Ok(fw_addr) => (status::SUCCESS, fw_addr),
                Err(refusal) => {
                    let status = match refusal {
                        CommandRefusal::UnknownCommand(_) => status::UNKNOWN_COMMAND,
                        _ => status::NOT_SUPPORTED,
                    };
                    self.refuse(Refusal::Command {
                        cmd_id,
                        refusal,
                        status,
                    });
                    (status, 0)
                }
            };
            let mut resp = [0u8; 16];
            resp[0..4].copy_from_slice(&status.to_le_bytes());
            resp[8..12].copy_from_slice(&(fw_addr as u32).to_le_bytes());
            resp[12..16].copy_from_slice(&((fw_addr >> 32) as u32).to_le_bytes());
            // The response before the fence: a driver that sees the fence reads the status.
            vram.write(cmd_addr + RESP_AT as u64, &resp);
            vram.write(fence_addr, &fence_value.to_le_bytes());
        }
    }

    /// Runs ring command `cmd_id` with fields `field(offset)`; the `fw_addr` it answers.
    fn run(
        &mut self,
        cmd_id: u32,
        field: &dyn Fn(usize) -> u32,
        vram: &dyn Memory,
    ) -> Result<u64, CommandRefusal> {
        let addr = |lo: usize| u64::from(field(lo + 4)) << 32 | u64::from(field(lo));
        match GfxCmd::of(cmd_id) {
            Some(GfxCmd::SetupTmr) => {
                if self.ring.tmr.is_some() {
                    return Err(CommandRefusal::TmrTwice);
                }
                let (at, size) = (addr(0), field(8));
                if !at.is_multiple_of(TMR_ALIGN)
                    || u64::from(size) < TMR_BYTES
                    || vram.read(at + u64::from(size) - 1, 1).is_none()
                {
                    return Err(CommandRefusal::TmrPlacement { addr: at, size });
                }
                self.ring.tmr = Some((at, u64::from(size)));
                Ok(0)
            }
            Some(GfxCmd::LoadIpFw) => {
                let (tmr, tmr_size) = self.ring.tmr.ok_or(CommandRefusal::BeforeTmr)?;
                let (at, size, t) = (addr(0), field(8), field(12));
                let fw = GfxFw::of(t).ok_or(CommandRefusal::FwType(t))?;
                let (_, image) = self
                    .images
                    .iter()
                    .find(|(u, _)| *u == fw)
                    .ok_or(CommandRefusal::FwType(t))?;
                let found = vram
                    .read(at, size as usize)
                    .ok_or(CommandRefusal::ImageOutside { addr: at })?;
                if let Some(at) = found
                    .iter()
                    .zip(image)
                    .position(|(a, b)| a != b)
                    .or((found.len() != image.len()).then(|| found.len().min(image.len())))
                {
                    return Err(CommandRefusal::BadImage { fw, at });
                }
                self.ring.loaded.retain(|l| l.fw != fw);
                let place = self.ring.tmr_used;
                let used = place + u64::from(size).next_multiple_of(4096);
                if used > tmr_size {
                    return Err(CommandRefusal::TmrFull { fw });
                }
                self.ring.tmr_used = used;
                self.ring.loaded.push(Loaded {
                    fw,
                    size,
                    at: tmr + place,
                });
                Ok(tmr + place)
            }
            Some(GfxCmd::AutoloadRlc) => {
                if !self.ring.loaded.iter().any(|l| l.fw == GfxFw::RlcG) {
                    return Err(CommandRefusal::AutoloadEarly);
                }
                self.ring.autoload = true;
                Ok(0)
            }
            Some(GfxCmd::LoadToc) | None => Err(CommandRefusal::UnknownCommand(cmd_id)),
        }
    }
}
