//! Code objects as an attacker makes them, against the real rigd: a small file whose
//! segment declares gigabytes of zero-filled memory is refused from its program headers,
//! at once and without rigd's memory growing; a large but legal one loads without
//! zero-filling on rigd's heap, and without stalling anyone else while it does. Bombs of
//! metadata (a note of millions of values), of relocations (tens of thousands naming a long
//! undefined symbol, sections that overlap) and of kernels cost rigd a small multiple of
//! their bytes at most, and what rigd keeps of a loaded image is its kernels' entries,
//! charged to the client.

use std::time::{Duration, Instant};

use crate::bombs::*;
use rig_proto::messages::{ErrorCode, Request, Response};
use rig_testkit::rigd::Rigd;

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
    rig_testkit::rigd::peak_rss(d.pid())
}

/// rigd's resident memory now (`VmRSS`), in bytes.
fn rss(d: &Rigd) -> u64 {
    rig_testkit::rigd::rss(d.pid())
}

/// A simulated GPU with VRAM enough for the huge segment, so that only rigd's image limit
/// stands in its way.
const BIG_SIM: &str = "[access]\nany = true\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 8589934592\nhang_ms = 300\n";

#[test]
fn a_huge_zero_filled_segment_is_refused_at_once_and_costs_no_memory() {
    let d = Rigd::start(BIG_SIM);
    let Some(co) = rig_testkit::kernels::compile("kernel", KERNEL, "gfx1100") else {
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
    let Some(co) = rig_testkit::kernels::compile("kernel", KERNEL, "gfx1100") else {
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
        assert!(rig_testkit::rigd::holds_within(
            Duration::from_secs(20),
            || served.load(Ordering::Relaxed) >= n
        ));
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

/// rigd's peak memory may grow by at most this for a request of `bytes`: a small multiple,
/// and a constant.
fn bound(bytes: usize) -> u64 {
    4 * bytes as u64 + (32 << 20)
}

#[test]
fn a_metadata_bomb_costs_rigd_a_small_multiple_of_its_bytes() {
    let d = Rigd::start(rig_testkit::rigd::SIM);
    let Some(co) = rig_testkit::kernels::compile("kernel", KERNEL, "gfx1100") else {
        return;
    };
    let note = metadata(&co).to_vec();
    let mut c = d.client("bomb");
    let dev = c.open().id();
    // 15 MiB of nils under a key rig does not read: each was a 40-byte value before.
    let skipped = with_metadata(
        &co,
        &with_entry(&note, "amdhsa.bomb", &array_of(15 << 20, &[0xc0])),
    );
    // 15 MiB of empty kernels: refused from the array's count.
    let kernels = {
        let root = rmpv::decode::read_value(&mut &note[..]).unwrap();
        let mut bytes = Vec::new();
        let rmpv::Value::Map(entries) = root else {
            panic!("the root is a map")
        };
        let rest: Vec<_> = entries
            .into_iter()
            .filter(|(k, _)| k.as_str() != Some("amdhsa.kernels"))
            .collect();
        rmpv::encode::write_value(&mut bytes, &rmpv::Value::Map(rest)).unwrap();
        with_metadata(
            &co,
            &with_entry(&bytes, "amdhsa.kernels", &array_of(15 << 20, &[0x80])),
        )
    };
    for (what, file) in [("skipped values", skipped), ("kernels", kernels)] {
        let before = peak_rss(&d);
        let len = file.len();
        let r = c.call(Request::LoadImage {
            device: dev,
            code_object: file,
        });
        let grew = peak_rss(&d).saturating_sub(before);
        eprintln!("a {len}-byte metadata bomb of {what}: rigd's peak grew by {grew} bytes: {r:?}");
        match (what, &r) {
            ("skipped values", Response::ImageLoaded { kernels, .. }) => {
                assert_eq!(kernels, &["add"])
            }
            ("kernels", Response::Error(e)) => {
                assert_eq!(e.code, ErrorCode::ImageRefused);
                assert!(
                    e.message.contains("15728640 kernels")
                        && e.message.contains("MAX_KERNELS (4096)"),
                    "{}",
                    e.message
                );
            }
            _ => panic!("{what}: {r:?}"),
        }
        assert!(
            grew <= bound(len),
            "a {len}-byte metadata bomb grew rigd's peak by {grew} bytes"
        );
    }
}

#[test]
fn a_relocation_bomb_is_refused_naming_its_symbol_once() {
    let d = Rigd::start(rig_testkit::rigd::SIM);
    let long = "w".repeat(8000);
    let (Some(weak), Some(strong), Some(short)) = (
        needing(&long, true),
        needing(&long, false),
        needing("ext", false),
    ) else {
        return;
    };
    let mut c = d.client("bomb");
    let dev = c.open().id();
    // 40,000 relocations naming an 8000-byte symbol: 320 MB as copies of the name.
    let bombs = [
        ("weak", with_relocations(&weak, 40_000, 0), long.as_str()),
        (
            "strong",
            with_relocations(&strong, 40_000, 0),
            long.as_str(),
        ),
        // 64 sections over one block of relocations: 2.6 million from a 1 MB file.
        ("overlapping", with_relocations(&short, 40_000, 64), "ext"),
    ];
    for (what, file, name) in bombs {
        let before = peak_rss(&d);
        let len = file.len();
        let r = c.call(Request::LoadImage {
            device: dev,
            code_object: file,
        });
        let grew = peak_rss(&d).saturating_sub(before);
        eprintln!("a {len}-byte {what} relocation bomb: rigd's peak grew by {grew} bytes");
        let Response::Error(e) = &r else {
            panic!("{what}: a relocation bomb was loaded: {r:?}")
        };
        assert_eq!(e.code, ErrorCode::ImageRefused, "{what}: {}", e.message);
        if what == "overlapping" {
            assert!(e.message.contains("overlap"), "{}", e.message);
        } else {
            // Named once, and cut.
            assert_eq!(
                e.message.matches("(8000 bytes)").count(),
                1,
                "{}",
                e.message
            );
            assert!(
                e.message.contains("(8000 bytes)") && e.message.len() < 1024,
                "{}",
                e.message
            );
            assert!(e.message.contains(&name[..512]));
        }
        assert!(
            grew <= bound(len),
            "a {len}-byte {what} relocation bomb grew rigd's peak by {grew} bytes"
        );
    }
    // Each symbol alone, weak or not, is refused too: rig defines none.
    for co in [weak, strong] {
        let r = c.call(Request::LoadImage {
            device: dev,
            code_object: co,
        });
        assert!(
            matches!(&r, Response::Error(e) if e.code == ErrorCode::ImageRefused && e.message.contains("needs symbol")),
            "{r:?}"
        );
    }
}

/// The bytes rigd charges the client named `program`, as `rigctl clients` shows them.
fn charged(c: &mut rig_testkit::rigd::Client, program: &str) -> u64 {
    let Response::Clients(list) = c.call(Request::ListClients) else {
        panic!("no client list")
    };
    list.iter()
        .filter(|i| i.program == program)
        .map(|i| i.bytes)
        .sum()
}

#[test]
fn an_image_keeps_only_its_entries_and_they_are_charged() {
    let d = Rigd::start(BIG_SIM);
    let Some(co) = rig_testkit::kernels::compile("kernel", KERNEL, "gfx1100") else {
        return;
    };
    let mut c = d.client("keeper");
    let dev = c.open().id();

    // 15 MiB of bytes past the file's sections and segments: nothing rigd needs to keep.
    let mut padded = co.clone();
    padded.resize(co.len() + (15 << 20), 0x5a);
    let base = rss(&d);
    let images = 24;
    for _ in 0..images {
        let r = c.call(Request::LoadImage {
            device: dev,
            code_object: padded.clone(),
        });
        assert!(matches!(r, Response::ImageLoaded { .. }), "{r:?}");
    }
    let grew = rss(&d).saturating_sub(base);
    eprintln!(
        "{images} images of {} bytes: rigd's memory grew by {grew} bytes",
        padded.len()
    );
    assert!(
        grew < 160 << 20,
        "{images} images of 15 MiB files kept {grew} bytes"
    );

    // 15,000 kernels are refused naming the limit; 4,000 load, and what rigd keeps of them
    // is charged to the client, and given back with the image.
    let r = c.call(Request::LoadImage {
        device: dev,
        code_object: with_kernels(&co, 15_000),
    });
    assert!(
        matches!(&r, Response::Error(e) if e.code == ErrorCode::ImageRefused && e.message.contains("15000 kernels") && e.message.contains("MAX_KERNELS (4096)")),
        "{r:?}"
    );
    let mut admin = d.client("admin");
    let before = charged(&mut admin, "keeper");
    let one = c.call(Request::LoadImage {
        device: dev,
        code_object: co.clone(),
    });
    let Response::ImageLoaded {
        size,
        image: small,
        region: small_region,
        ..
    } = one
    else {
        panic!("{one:?}")
    };
    let small_charge = charged(&mut admin, "keeper") - before;
    assert!(
        small_charge > size,
        "an image's entries are charged: {small_charge} for {size} bytes"
    );
    let r = c.call(Request::LoadImage {
        device: dev,
        code_object: with_kernels(&co, 4000),
    });
    let Response::ImageLoaded {
        image,
        region,
        size: big_size,
        kernels,
        ..
    } = r
    else {
        panic!("{r:?}")
    };
    assert_eq!(kernels.len(), 4000);
    let big_charge = charged(&mut admin, "keeper") - before - small_charge;
    eprintln!(
        "an image of 4000 kernels: charged {big_charge} bytes for {big_size} bytes of GPU memory"
    );
    assert!(
        big_charge >= big_size + 4000 * 200,
        "4000 kernels' entries charged {big_charge} bytes, {big_size} of them GPU memory"
    );
    let r = c.call(Request::ResolveEntry {
        device: dev,
        image,
        name: "kernel_number_3999".into(),
    });
    assert!(matches!(r, Response::Entry(_)), "{r:?}");
    c.call(Request::Unload { device: dev, image });
    c.call(Request::Free {
        device: dev,
        region,
    });
    c.call(Request::Unload {
        device: dev,
        image: small,
    });
    c.call(Request::Free {
        device: dev,
        region: small_region,
    });
    assert!(
        rig_testkit::rigd::holds_within(Duration::from_secs(5), || charged(&mut admin, "keeper")
            <= before),
        "the charge is given back: {} after, {before} before",
        charged(&mut admin, "keeper")
    );
}
