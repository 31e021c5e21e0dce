//! A simple [`Memory`] for tests, benches and fuzzers: a flat byte range at a base address,
//! backed by atomics so waves on several threads may share it.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::{Memory, MemoryFault, Window};

/// Flat memory: `[base, base + len)` is mapped, everything else faults.
#[derive(Debug)]
pub struct FlatMemory {
    base: u64,
    words: Vec<AtomicU32>,
}

impl FlatMemory {
    /// Zeroed memory of `len` bytes (rounded up to 4) at `base`.
    pub fn new(base: u64, len: usize) -> Self {
        FlatMemory {
            base,
            words: (0..len.div_ceil(4)).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// First mapped address.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Mapped bytes.
    pub fn len(&self) -> usize {
        self.words.len() * 4
    }

    /// Whether no byte is mapped.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    fn range(&self, addr: u64, n: usize, write: bool) -> Result<usize, MemoryFault> {
        let fault = MemoryFault {
            address: addr,
            write,
        };
        let off = addr.checked_sub(self.base).ok_or(fault)?;
        let end = off.checked_add(n as u64).ok_or(fault)?;
        if end > self.len() as u64 {
            return Err(fault);
        }
        Ok(off as usize)
    }

    fn byte(&self, off: usize) -> u8 {
        (self.words[off / 4].load(Ordering::Relaxed) >> (8 * (off % 4))) as u8
    }

    fn set_byte(&self, off: usize, v: u8) {
        let sh = 8 * (off % 4);
        let _ = self.words[off / 4].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
            Some((w & !(0xff << sh)) | (v as u32) << sh)
        });
    }
}

impl Memory for FlatMemory {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), MemoryFault> {
        let off = self.range(addr, out.len(), false)?;
        if off % 4 == 0 {
            // Whole words as fixed-size copies (a copy of a variable length is a call).
            let (whole, tail) = out.as_chunks_mut::<4>();
            let words = &self.words[off / 4..];
            for (chunk, w) in whole.iter_mut().zip(words) {
                *chunk = w.load(Ordering::Relaxed).to_le_bytes();
            }
            if !tail.is_empty() {
                let w = words[whole.len()].load(Ordering::Relaxed).to_le_bytes();
                tail.copy_from_slice(&w[..tail.len()]);
            }
        } else {
            for (k, b) in out.iter_mut().enumerate() {
                *b = self.byte(off + k);
            }
        }
        Ok(())
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemoryFault> {
        let off = self.range(addr, data.len(), true)?;
        if off % 4 == 0 {
            for (k, chunk) in data.chunks(4).enumerate() {
                if chunk.len() == 4 {
                    let v = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
                    self.words[off / 4 + k].store(v, Ordering::Relaxed);
                } else {
                    for (j, b) in chunk.iter().enumerate() {
                        self.set_byte(off + 4 * k + j, *b);
                    }
                }
            }
        } else {
            for (k, b) in data.iter().enumerate() {
                self.set_byte(off + k, *b);
            }
        }
        Ok(())
    }

    fn window(&self, addr: u64) -> Option<Window<'_>> {
        // The whole range is one run, never unmapped while borrowed.
        self.range(addr, 1, false).ok()?;
        Some(Window::new(self.base, &self.words, true))
    }

    fn atomic_u32(&self, addr: u64, op: &dyn Fn(u32) -> u32) -> Result<u32, MemoryFault> {
        let off = self.range(addr, 4, true)?;
        if off % 4 != 0 {
            return Err(MemoryFault {
                address: addr,
                write: true,
            });
        }
        let w = &self.words[off / 4];
        Ok(
            w.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some(op(v)))
                .unwrap_or_else(|v| v),
        )
    }

    fn atomic_u64(&self, addr: u64, op: &dyn Fn(u64) -> u64) -> Result<u64, MemoryFault> {
        // Two 32-bit words: serialise through a lock striped by address.
        let off = self.range(addr, 8, true)?;
        if off % 8 != 0 {
            return Err(MemoryFault {
                address: addr,
                write: true,
            });
        }
        static LOCKS: [std::sync::Mutex<()>; 16] = [const { std::sync::Mutex::new(()) }; 16];
        let _g = LOCKS[(off / 8) % 16]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let lo = self.words[off / 4].load(Ordering::SeqCst) as u64;
        let hi = self.words[off / 4 + 1].load(Ordering::SeqCst) as u64;
        let old = lo | hi << 32;
        let new = op(old);
        self.words[off / 4].store(new as u32, Ordering::SeqCst);
        self.words[off / 4 + 1].store((new >> 32) as u32, Ordering::SeqCst);
        Ok(old)
    }
}
