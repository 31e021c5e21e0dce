//! Stages 3 to 5 of docs/pci.md: the PSP's bootloader, its kernel-mode ring and the TMR, and
//! the firmware of the GC, SDMA and SMU through `GFX_CMD_ID_LOAD_IP_FW`, as amdgpu's
//! `psp_hw_start` and `psp_load_non_psp_fw` do them with `psp_v13_0.c` / `psp_v14_0.c`
//! ([`rig_amd::psp`] has the protocol's numbers).

use rig_amd::discovery::{Psp, hw_id};
use rig_amd::psp::{
    BOOT_ORDER, BUFFER_BYTES, BootCommand, CMD_AT, CMD_BYTES, CMD_ID_AT, FRAME_BYTES, GfxCmd,
    GfxFw, READY, RESP_AT, RING_BYTES, RING_TYPE_KM, TMR_BYTES, ip_images, status,
};
use rig_amd::ucode::{Firmware, Kind};

use crate::{Bar, Bringup, BringupError, FirmwareSet, Until, layout};

/// Where the PSP is, as far as the bring-up drove it.
#[derive(Debug, Default)]
pub(crate) struct PspState {
    ring: bool,
    tmr: bool,
    /// The ring's write pointer, in dwords.
    wptr: u32,
    fence: u32,
    pub(crate) loaded: Vec<(GfxFw, u64)>,
    pub(crate) autoload: bool,
}

impl<B: Bar> Bringup<B> {
    fn mailbox(&self, n: u32) -> String {
        match self.blocks.psp.1 {
            Psp::V13_0 => format!("MP0_SMN_C2PMSG_{n}"),
            Psp::V14_0 => format!("MPASP_SMN_C2PMSG_{n}"),
        }
    }

    fn mp0_read(&mut self, n: u32) -> Result<u32, BringupError> {
        let name = self.mailbox(n);
        self.read(self.blocks.regs.mp0, hw_id::MP0, &name)
    }

    fn mp0_write(&mut self, n: u32, value: u32) -> Result<(), BringupError> {
        let name = self.mailbox(n);
        self.write(self.blocks.regs.mp0, hw_id::MP0, &name, value)
    }

    fn mp0_wait(
        &mut self,
        n: u32,
        until: Until,
        during: &dyn Fn() -> String,
    ) -> Result<u32, BringupError> {
        let name = self.mailbox(n);
        self.wait(self.blocks.regs.mp0, hw_id::MP0, &name, until, during)
    }

    /// Stages 3 and 4: unless the secure OS runs already (C2PMSG_81 nonzero), loads the SOS
    /// file's components in amdgpu's order through the bootloader, then creates the
    /// kernel-mode ring and sets up the TMR (`GFX_CMD_ID_SETUP_TMR`).
    pub fn boot_psp(&mut self, set: &FirmwareSet) -> Result<(), BringupError> {
        let (_, sos) = set.find("_sos.bin")?;
        if self.mp0_read(81)? == 0 {
            for command in BOOT_ORDER {
                let Some(part) = sos
                    .sos_parts(false)
                    .into_iter()
                    .find(|p| p.kind == command.component() && p.region.size > 0)
                else {
                    continue;
                };
                self.load_component(command, sos.slice(part.region))?;
            }
        }
        self.create_ring()?;
        let tmr = self.mc(layout::TMR);
        self.submit(
            "SETUP_TMR",
            GfxCmd::SetupTmr,
            &[
                tmr as u32,
                (tmr >> 32) as u32,
                TMR_BYTES as u32,
                // virt_phy_addr (psp_prep_tmr_cmd_buf).
                1 << 1,
                layout::TMR as u32,
                (layout::TMR >> 32) as u32,
            ],
        )?;
        self.psp.tmr = true;
        Ok(())
    }

    /// `psp_v13_0_bootloader_load_component` (and `_sos`).
    fn load_component(&mut self, command: BootCommand, bytes: &[u8]) -> Result<(), BringupError> {
        let during = || format!("the PSP bootloader before {command:?}");
        self.mp0_wait(
            35,
            Until::Masked {
                mask: READY,
                expect: READY,
            },
            &during,
        )?;
        let mut buffer = vec![0u8; BUFFER_BYTES as usize];
        let n = bytes.len().min(buffer.len());
        buffer[..n].copy_from_slice(&bytes[..n]);
        self.vram_write(
            layout::PSP_BUFFER,
            &buffer,
            &format!("{command:?} component"),
        )?;
        let sol = if command == BootCommand::SosDrv {
            Some(self.mp0_read(81)?)
        } else {
            None
        };
        self.mp0_write(36, (self.mc(layout::PSP_BUFFER) >> 20) as u32)?;
        self.mp0_write(35, command.value())?;
        let during = || format!("the PSP bootloader taking {command:?}");
        match sol {
            // The secure OS's sign of life changes once it runs.
            Some(from) => self.mp0_wait(81, Until::Changed { from }, &during)?,
            None => self.mp0_wait(
                35,
                Until::Masked {
                    mask: READY,
                    expect: READY,
                },
                &during,
            )?,
        };
        tracing::debug!(?command, "PSP bootloader took a component");
        Ok(())
    }

    /// `psp_v13_0_ring_create`.
    fn create_ring(&mut self) -> Result<(), BringupError> {
        let during = || "the secure OS, ready for its ring".to_string();
        self.mp0_wait(
            64,
            Until::Masked {
                mask: READY,
                expect: READY,
            },
            &during,
        )?;
        self.vram_write(layout::PSP_RING, &vec![0; RING_BYTES as usize], "KM ring")?;
        let ring = self.mc(layout::PSP_RING);
        self.mp0_write(69, ring as u32)?;
        self.mp0_write(70, (ring >> 32) as u32)?;
        self.mp0_write(71, RING_BYTES)?;
        self.mp0_write(64, RING_TYPE_KM << 16)?;
        let during = || "the secure OS creating the KM ring".to_string();
        self.mp0_wait(
            64,
            Until::Masked {
                mask: READY | 0xffff,
                expect: READY,
            },
            &during,
        )?;
        self.psp.ring = true;
        self.psp.wptr = 0;
        Ok(())
    }

    /// `psp_cmd_submit_buf`: the command buffer, a frame, the write pointer, the fence; the
    /// response's `fw_addr`.
    fn submit(&mut self, what: &str, cmd: GfxCmd, fields: &[u32]) -> Result<u64, BringupError> {
        if !self.psp.ring {
            return Err(BringupError::Order("a PSP command before its ring exists"));
        }
        let mut buf = vec![0u8; CMD_BYTES];
        buf[CMD_ID_AT..CMD_ID_AT + 4].copy_from_slice(&cmd.value().to_le_bytes());
        for (i, f) in fields.iter().enumerate() {
            let at = CMD_AT + 4 * i;
            buf[at..at + 4].copy_from_slice(&f.to_le_bytes());
        }
        self.vram_write(layout::PSP_CMD, &buf, &format!("{what} command"))?;
        self.psp.fence = self.psp.fence.wrapping_add(1);
        let fence = self.psp.fence;
        let wptr = self.mp0_read(67)?;
        let (cmd_mc, fence_mc) = (self.mc(layout::PSP_CMD), self.mc(layout::PSP_FENCE));
        let mut frame = [0u8; FRAME_BYTES];
        for (i, v) in [
            cmd_mc as u32,
            (cmd_mc >> 32) as u32,
            CMD_BYTES as u32,
            fence_mc as u32,
            (fence_mc >> 32) as u32,
            fence,
        ]
        .into_iter()
        .enumerate()
        {
            frame[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        let ring_dw = RING_BYTES / 4;
        let wptr = wptr % ring_dw;
        self.vram_write(
            layout::PSP_RING + u64::from(wptr) * 4,
            &frame,
            &format!("{what} frame"),
        )?;
        let next = (wptr + (FRAME_BYTES / 4) as u32) % ring_dw;
        self.mp0_write(67, next)?;
        self.psp.wptr = next;
        let start = std::time::Instant::now();
        let mut word = [0u8; 4];
        loop {
            self.bar
                .vram_read(layout::PSP_FENCE, &mut word)
                .map_err(crate::bar_err)?;
            let last = u32::from_le_bytes(word);
            if last == fence {
                break;
            }
            if start.elapsed() >= self.timeout {
                return Err(BringupError::Fence {
                    during: what.into(),
                    expect: fence,
                    last,
                    timeout: self.timeout,
                });
            }
            std::thread::sleep(std::time::Duration::from_micros(10));
        }
        let mut resp = [0u8; 16];
        self.bar
            .vram_read(layout::PSP_CMD + RESP_AT as u64, &mut resp)
            .map_err(crate::bar_err)?;
        self.trace.push(crate::Step::VramRead {
            offset: layout::PSP_CMD + RESP_AT as u64,
            len: resp.len(),
            what: format!("{what} response after fence {fence}"),
        });
        let word = |i: usize| u32::from_le_bytes([resp[i], resp[i + 1], resp[i + 2], resp[i + 3]]);
        if word(0) != status::SUCCESS {
            return Err(BringupError::PspStatus {
                during: what.into(),
                status: word(0),
            });
        }
        Ok(u64::from(word(12)) << 32 | u64::from(word(8)))
    }

    /// Stage 5: every image of the set's GC, SDMA and SMU files through `LOAD_IP_FW`, in
    /// amdgpu's order ([`GfxFw::rank`]), then `AUTOLOAD_RLC` after `RLC_G`. Each file's
    /// header was parsed when it joined the set; one the GPU needs that is missing stops
    /// here before anything is sent.
    pub fn load_firmware(&mut self, set: &FirmwareSet) -> Result<(), BringupError> {
        if !self.psp.tmr {
            return Err(BringupError::Order("firmware before the PSP's TMR"));
        }
        for name in FirmwareSet::names(&self.blocks) {
            set.find(&name)?;
        }
        let mut images: Vec<(GfxFw, Vec<u8>)> = Vec::new();
        for (name, bytes) in set.files() {
            let Some(kind) = Kind::of_file_name(name) else {
                continue;
            };
            if kind == Kind::Sos {
                continue;
            }
            let fw = Firmware::parse(kind, bytes).map_err(|source| BringupError::Firmware {
                file: name.into(),
                source,
            })?;
            for (t, image) in ip_images(name, &fw)? {
                images.retain(|(u, _)| *u != t);
                images.push((t, image.to_vec()));
            }
        }
        images.sort_by_key(|(t, _)| t.rank());
        let mut at = layout::FW_IMAGES;
        for (t, image) in &images {
            let what = format!("LOAD_IP_FW {t:?}");
            self.vram_write(at, image, &format!("{t:?} image"))?;
            let mc = self.mc(at);
            let placed = self.submit(
                &what,
                GfxCmd::LoadIpFw,
                &[mc as u32, (mc >> 32) as u32, image.len() as u32, t.value()],
            )?;
            self.psp.loaded.push((*t, placed));
            at += (image.len() as u64).next_multiple_of(4096);
            if *t == GfxFw::RlcG {
                self.submit("AUTOLOAD_RLC", GfxCmd::AutoloadRlc, &[])?;
                self.psp.autoload = true;
            }
        }
        Ok(())
    }

    /// The images the PSP took, in order, with where it placed each (`resp.fw_addr`).
    pub fn firmware_loaded(&self) -> &[(GfxFw, u64)] {
        &self.psp.loaded
    }

    /// Whether the RLC's autoload was started.
    pub fn autoload_started(&self) -> bool {
        self.psp.autoload
    }
}
