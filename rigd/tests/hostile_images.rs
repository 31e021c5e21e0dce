//! Code objects as an attacker makes them, against the real rigd: a small file whose
//! segment declares gigabytes of zero-filled memory is refused from its program headers,
//! at once and without rigd's memory growing; a large but legal one loads without
//! zero-filling on rigd's heap, and without stalling anyone else while it does.

mod common;

use std::time::{Duration, Instant};

use common::{Rigd, compile};
use rig_proto::messages::{ErrorCode, Request, Response};

const KERNEL: &str =
    "__kernel void add(__global int* a, int b) { a[__builtin_amdgcn_workitem_id_x()] += b; }\n";

/// `co` with its last loadable segment (by address) declaring `memsz` bytes of memory: a
/// file of a few KiB that asks for a huge zero-filled segment.
fn with_memsz(co: &[u8], memsz: u64) -> Vec<u8> {
    let mut f = co.to_vec();
    let u16_at = |f: &[u8], o: usize| u16::from_le_bytes([f[o], f[o + 1]]) as usize;
    let u64_at = |f: &[u8], o: usize| u64::from_le_bytes(f[o..o + 8].try_into().unwrap());
    let phoff = u64_at(&f, 0x20) as usize;
    let (size, count) = (u16_at(&f, 0x36), u16_at(&f, 0x38));
    let last = (0..count)
        .map(|i| phoff + i * size)
        .filter(|&p| u32::from_le_bytes(f[p..p + 4].try_into().unwrap()) == 1) // PT_LOAD
        .max_by_key(|&p| u64_at(&f, p + 16))
        .expect("a loadable segment");
    f[last + 40..last + 48].copy_from_slice(&memsz.to_le_bytes());
    f
}

/// rigd's peak resident memory (`VmHWM`), in bytes.
fn peak_rss(d: &Rigd) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

/// A simulated GPU with VRAM enough for the huge segment, so that only rigd's image limit
/// stands in its way.
const BIG_SIM: &str = "[access]\nany = true\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 8589934592\nhang_ms = 300\n";

#[test]
fn a_huge_zero_filled_segment_is_refused_at_once_and_costs_no_memory() {
    let d = Rigd::start(BIG_SIM);
    let dir = tempfile::tempdir().unwrap();
    let Some(co) = compile(dir.path(), KERNEL, "gfx1100") else {
        return;
    };
    let hostile = with_memsz(&co, 0xf000_0000);
    assert!(hostile.len() < 64 << 10, "a small file");
    let mut c = d.client("hostile");
    let dev = c.open().id();
    let before = peak_rss(&d);
    let t = Instant::now();
    let r = c.call(Request::LoadImage {
        device: dev,
        code_object: hostile,
    });
    let took = t.elapsed();
    let Response::Error(e) = r else {
        panic!("a 3.75 GiB image was not refused: {r:?}")
    };
    assert_eq!(e.code, ErrorCode::ImageRefused);
    assert!(
        e.message.contains("images.max_bytes") && e.message.contains("1073741824"),
        "{}",
        e.message
    );
    assert!(took < Duration::from_secs(1), "refusing took {took:?}");
    let grew = peak_rss(&d).saturating_sub(before);
    assert!(grew < 64 << 20, "rigd's peak memory grew by {grew} bytes");
    // The same client still loads a legal image.
    assert!(matches!(
        c.call(Request::LoadImage {
            device: dev,
            code_object: co
        }),
        Response::ImageLoaded { .. }
    ));
}

#[test]
fn others_are_served_while_a_big_image_loads() {
    let d = Rigd::start(
        "[access]\nany = true\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 4294967296\nhang_ms = 300\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let Some(co) = compile(dir.path(), KERNEL, "gfx1100") else {
        return;
    };
    // 900 MiB once loaded, under the 1 GiB limit: legal, and nearly all zero-filled.
    let big = with_memsz(&co, 900 << 20);
    let mut loader = d.client("loader");
    let dev = loader.open().id();
    let before = peak_rss(&d);

    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let served = std::sync::Arc::new(AtomicU32::new(0));
    let mut other = d.client("other");
    let other_dev = other.open().id();
    let watcher = {
        let (stop, served) = (stop.clone(), served.clone());
        std::thread::spawn(move || {
            let (mut worst, mut n) = (Duration::ZERO, 0u32);
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let r = other.call(Request::DeviceStatus { device: other_dev });
                worst = worst.max(t.elapsed());
                assert!(matches!(r, Response::Status(_)), "{r:?}");
                n += 1;
                served.store(n, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
            (worst, n)
        })
    };
    // The other client is being served before the loads start and after they end.
    let until = |n: u32| {
        assert!(common::eventually(Duration::from_secs(20), || served
            .load(Ordering::Relaxed)
            >= n));
    };
    until(5);
    let mut loads = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let r = loader.call(Request::LoadImage {
            device: dev,
            code_object: big.clone(),
        });
        loads.push(t.elapsed());
        let Response::ImageLoaded {
            image,
            region,
            size,
            ..
        } = r
        else {
            panic!("{r:?}")
        };
        assert!(size >= 900 << 20);
        assert!(matches!(
            loader.call(Request::ResolveEntry {
                device: dev,
                image,
                name: "add".into()
            }),
            Response::Entry(_)
        ));
        loader.call(Request::Unload { device: dev, image });
        loader.call(Request::Free {
            device: dev,
            region,
        });
    }
    until(served.load(Ordering::Relaxed) + 5);
    stop.store(true, Ordering::Relaxed);
    let (worst, n) = watcher.join().unwrap();
    eprintln!(
        "5 loads of a 900 MiB image took {loads:?}; the other client's worst of {n} requests: {worst:?}"
    );
    assert!(
        worst < Duration::from_millis(200),
        "another client waited {worst:?} while images loaded in {loads:?}"
    );
    // Nothing was zero-filled on rigd's heap (nor written into the simulated VRAM).
    let grew = peak_rss(&d).saturating_sub(before);
    assert!(grew < 64 << 20, "rigd's peak memory grew by {grew} bytes");
}
