//! Code objects edited as an attacker would: a real one (built by clang) with its metadata
//! note, relocations or kernels replaced, for the tests that send them to rigd.

pub fn u16_at(f: &[u8], o: usize) -> usize {
    u16::from_le_bytes([f[o], f[o + 1]]) as usize
}

pub fn u32_at(f: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(f[o..o + 4].try_into().unwrap())
}

pub fn u64_at(f: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(f[o..o + 8].try_into().unwrap())
}

pub fn put64(f: &mut [u8], o: usize, v: u64) {
    f[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

/// The file offsets of the program headers of type `ty`.
pub fn phdrs(f: &[u8], ty: u32) -> Vec<usize> {
    let (off, size, count) = (u64_at(f, 0x20) as usize, u16_at(f, 0x36), u16_at(f, 0x38));
    (0..count)
        .map(|i| off + i * size)
        .filter(|&p| u32_at(f, p) == ty)
        .collect()
}

/// The file offsets of the section headers of type `ty`.
pub fn shdrs(f: &[u8], ty: u32) -> Vec<usize> {
    let (off, size, count) = (u64_at(f, 0x28) as usize, u16_at(f, 0x3a), u16_at(f, 0x3c));
    (0..count)
        .map(|i| off + i * size)
        .filter(|&s| u32_at(f, s + 4) == ty)
        .collect()
}

pub const PT_NOTE: u32 = 4;
pub const SHT_RELA: u32 = 4;

/// The metadata note's descriptor bytes.
pub fn metadata(co: &[u8]) -> &[u8] {
    let p = phdrs(co, PT_NOTE)[0];
    let (mut at, end) = (u64_at(co, p + 8) as usize, 0);
    let end = end + at + u64_at(co, p + 32) as usize;
    while at < end {
        let (namesz, descsz, ty) = (
            u32_at(co, at) as usize,
            u32_at(co, at + 4) as usize,
            u32_at(co, at + 8),
        );
        let desc = at + 12 + namesz.div_ceil(4) * 4;
        if ty == 32 && &co[at + 12..at + 12 + namesz] == b"AMDGPU\0" {
            return &co[desc..desc + descsz];
        }
        at = desc + descsz.div_ceil(4) * 4;
    }
    panic!("no metadata note")
}

/// `co` with `desc` as its metadata note: appended to the file, its note segment pointing
/// at it (which the parser reads before the sections).
pub fn with_metadata(co: &[u8], desc: &[u8]) -> Vec<u8> {
    let mut f = co.to_vec();
    f.resize(f.len().div_ceil(8) * 8, 0);
    let at = f.len();
    f.extend(7u32.to_le_bytes());
    f.extend((desc.len() as u32).to_le_bytes());
    f.extend(32u32.to_le_bytes());
    f.extend(b"AMDGPU\0\0");
    f.extend(desc);
    f.resize(f.len().div_ceil(4) * 4, 0);
    let size = (f.len() - at) as u64;
    let p = phdrs(&f, PT_NOTE)[0];
    put64(&mut f, p + 8, at as u64);
    put64(&mut f, p + 32, size);
    put64(&mut f, p + 40, size);
    f
}

/// `note` (a msgpack map of at most 14 entries) with one more, `key` and `value` (msgpack
/// bytes).
pub fn with_entry(note: &[u8], key: &str, value: &[u8]) -> Vec<u8> {
    assert!((0x80..0x8f).contains(&note[0]), "a small map");
    let mut out = vec![note[0] + 1];
    out.extend(&note[1..]);
    out.push(0xa0 | key.len() as u8);
    out.extend(key.as_bytes());
    out.extend(value);
    out
}

/// A msgpack array of `n` items, each `item`.
pub fn array_of(n: usize, item: &[u8]) -> Vec<u8> {
    let mut out = vec![0xdd];
    out.extend((n as u32).to_be_bytes());
    for _ in 0..n {
        out.extend(item);
    }
    out
}

pub const SHT_DYNSYM: u32 = 11;

/// `KERNEL` reading a global `name` it does not define, weak or not (lld refuses to link a
/// strong one, so the weak one's binding is rewritten, as an attacker would).
pub fn needing(name: &str, weak: bool) -> Option<Vec<u8>> {
    let mut co = rig_testkit::kernels::compile(
        "needing",
        &format!(
            "extern __global int {name} __attribute__((weak, visibility(\"default\")));\n__kernel void add(__global int* a, int b) {{ a[__builtin_amdgcn_workitem_id_x()] += b + {name}; }}\n"
        ),
        "gfx1100",
    )?;
    if !weak {
        let s = shdrs(&co, SHT_DYNSYM)[0];
        let (off, size) = (u64_at(&co, s + 24) as usize, u64_at(&co, s + 32) as usize);
        for sym in (off..off + size).step_by(24) {
            // st_shndx 0 (undefined), st_info's binding STB_WEAK (2) to STB_GLOBAL (1).
            if u16_at(&co, sym + 6) == 0 && co[sym + 4] >> 4 == 2 {
                co[sym + 4] = (1 << 4) | (co[sym + 4] & 0xf);
            }
        }
    }
    Some(co)
}

/// `co` with its relocation section's `n` copies of its first entry, appended, and `also`
/// more allocated relocation sections naming the same entries (overlapping in the file).
pub fn with_relocations(co: &[u8], n: usize, also: usize) -> Vec<u8> {
    let mut f = co.to_vec();
    let s = *shdrs(&f, SHT_RELA).first().expect("a relocation section");
    let (off, size) = (u64_at(&f, s + 24) as usize, u64_at(&f, s + 32));
    assert_eq!(size, 24, "one relocation");
    let entry = f[off..off + 24].to_vec();
    f.resize(f.len().div_ceil(8) * 8, 0);
    let at = f.len();
    for _ in 0..n {
        f.extend(&entry);
    }
    put64(&mut f, s + 24, at as u64);
    put64(&mut f, s + 32, 24 * n as u64);
    if also > 0 {
        // A new section header table: the old one and `also` copies of the section's.
        let (shoff, shentsize, shnum) = (
            u64_at(&f, 0x28) as usize,
            u16_at(&f, 0x3a),
            u16_at(&f, 0x3c),
        );
        let table = f[shoff..shoff + shentsize * shnum].to_vec();
        let rela = f[s..s + shentsize].to_vec();
        f.resize(f.len().div_ceil(8) * 8, 0);
        let new = f.len();
        f.extend(&table);
        for _ in 0..also {
            f.extend(&rela);
        }
        put64(&mut f, 0x28, new as u64);
        let count = (shnum + also) as u16;
        f[0x3c..0x3e].copy_from_slice(&count.to_le_bytes());
    }
    f
}

/// `co`'s metadata with `n` kernels, each `add` under another name (they share its
/// descriptor).
pub fn with_kernels(co: &[u8], n: usize) -> Vec<u8> {
    let mut root = rmpv::decode::read_value(&mut metadata(co)).unwrap();
    let rmpv::Value::Map(entries) = &mut root else {
        panic!("the root is a map")
    };
    let (_, rmpv::Value::Array(kernels)) = entries
        .iter_mut()
        .find(|(k, _)| k.as_str() == Some("amdhsa.kernels"))
        .unwrap()
    else {
        panic!("kernels")
    };
    let add = kernels[0].clone();
    *kernels = (0..n)
        .map(|i| {
            let mut k = add.clone();
            let rmpv::Value::Map(f) = &mut k else {
                panic!("a kernel is a map")
            };
            for (key, v) in f.iter_mut() {
                if key.as_str() == Some(".name") {
                    *v = format!("kernel_number_{i}").into();
                }
            }
            k
        })
        .collect();
    let mut note = Vec::new();
    rmpv::encode::write_value(&mut note, &root).unwrap();
    with_metadata(co, &note)
}
