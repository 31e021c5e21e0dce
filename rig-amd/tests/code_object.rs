//! Code objects built by `kernels/build.sh` (clang-19, ld.lld-19), read by rig-amd and, where
//! LLVM 19 is installed, compared with what `llvm-readelf-19` reads from the same files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rig_amd::code_object::{
    ArgKind, Axis, CodeObject, CodeObjectError, GenericFamily, Hidden, Kernel, Processor,
};
use rig_amd::gpu::{Gpu, IpVersion};
use rig_amd::kernarg::{self, Grid, Ref};

fn kernels_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/out")
}

fn read(rel: &str) -> Vec<u8> {
    let path = kernels_dir().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn parse(rel: &str) -> CodeObject {
    CodeObject::parse(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every committed code object, as paths relative to `kernels/out`.
fn all_objects() -> Vec<String> {
    let mut out = Vec::new();
    for dir in std::fs::read_dir(kernels_dir()).unwrap() {
        let dir = dir.unwrap().path();
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "co") {
                let rel = f.strip_prefix(kernels_dir()).unwrap();
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

fn gpu(name: &str) -> &'static Gpu {
    Gpu::by_name(name).unwrap()
}

#[test]
fn every_committed_object_parses_and_runs_on_its_gpus() {
    let objects = all_objects();
    assert!(objects.len() >= 60, "{} objects", objects.len());
    for rel in &objects {
        let co = parse(rel);
        let dir = rel.split('/').next().unwrap();
        let (processor, version) = match dir {
            "gfx1100-cov4" => ("gfx1100", 4),
            "gfx11-generic" => ("gfx11-generic", 6),
            other => (other, 5),
        };
        assert_eq!(co.processor().name(), processor, "{rel}");
        assert_eq!(co.version(), version, "{rel}");
        assert_eq!(co.image_size() % 4096, 0, "{rel}");
        assert!(!co.kernels().is_empty(), "{rel}");
        for k in co.kernels() {
            assert!(
                k.code_offset() < co.image_size() && k.code_offset() % 256 == 0,
                "{rel}"
            );
            assert!(k.descriptor_offset() + 64 <= co.image_size(), "{rel}");
            assert_eq!(k.wave64(), processor == "gfx942", "{rel} {}", k.name());
            assert!(k.explicit_size() <= k.kernarg_size(), "{rel}");
        }
        let runs_on = match dir {
            "gfx11-generic" | "gfx1100-cov4" => "gfx1100",
            other => other,
        };
        let printf = rel.ends_with("printf.co");
        match co.check(gpu(runs_on)) {
            Ok(()) => assert!(!printf, "{rel}"),
            // printf calls a device library's __printf_alloc, which rig does not link.
            Err(CodeObjectError::Undefined(s)) => assert!(printf && s == "__printf_alloc", "{rel}"),
            Err(e) => panic!("{rel}: {e}"),
        }
    }
}

#[test]
fn the_readme_kernel() {
    let co = parse("gfx1100/add.co");
    assert_eq!(co.processor(), Processor::Gfx(IpVersion::new(11, 0, 0)));
    assert_eq!(co.target_id(), "amdgcn-amd-amdhsa--gfx1100");
    assert_eq!(co.metadata_version(), [1, 2]);
    assert_eq!(co.kernels().len(), 1);
    let add = co.kernel("add").unwrap();
    assert_eq!(add.symbol(), "add.kd");
    assert_eq!(add.explicit_size(), 16);
    assert_eq!(add.kernarg_size(), 272);
    assert_eq!(add.kernarg_align(), 8);
    assert_eq!(add.max_threads(), 256);
    assert_eq!(add.group_segment_size(), 0);
    assert_eq!(add.private_segment_size(), 0);
    assert!(!add.wave64());
    assert!(!add.reads_dispatch_packet());
    assert_eq!(add.runtime_services().count(), 0);
    let explicit: Vec<_> = add
        .explicit_args()
        .map(|a| (a.offset, a.size, &a.kind))
        .collect();
    assert_eq!(
        explicit,
        [
            (0, 8, &ArgKind::GlobalBuffer),
            (8, 8, &ArgKind::GlobalBuffer)
        ]
    );
    let hidden: BTreeMap<u32, Hidden> = add.hidden().map(|(h, o)| (o, h.clone())).collect();
    assert_eq!(hidden[&16], Hidden::BlockCount(Axis::X));
    assert_eq!(hidden[&28], Hidden::GroupSize(Axis::X));
    assert_eq!(hidden[&34], Hidden::Remainder(Axis::X));
    assert_eq!(hidden[&56], Hidden::GlobalOffset(Axis::X));
    assert_eq!(hidden[&80], Hidden::GridDims);
    assert_eq!(hidden.len(), 13);
    assert_eq!(
        add.plan().hidden.block_count,
        [Some(16), Some(20), Some(24)]
    );
    assert_eq!(add.plan().hidden.dynamic_lds_size, None);

    co.check(gpu("gfx1100")).unwrap();
    let wrong = co.check(gpu("gfx1201")).unwrap_err();
    assert_eq!(
        wrong.to_string(),
        "a code object for gfx1100; the GPU is gfx1201"
    );
    let wrong = parse("gfx942/add.co").check(gpu("gfx1201")).unwrap_err();
    assert_eq!(
        wrong.to_string(),
        "a code object for gfx942; the GPU is gfx1201"
    );
    assert!(parse("gfx942/add.co").kernel("add").unwrap().wave64());
}

/// Lays out `add`'s arguments as a client would: x and y as refs into the caller's buffers.
#[test]
fn kernel_arguments_of_a_real_kernel() {
    let co = parse("gfx1100/add.co");
    let add = co.kernel("add").unwrap();
    let params = [0u8; 16];
    let refs = [
        Ref {
            offset: 0,
            address: 0x7000_0000,
        },
        Ref {
            offset: 8,
            address: 0x7100_0000,
        },
    ];
    let grid = Grid {
        groups: [16, 1, 1],
        group_size: [64, 1, 1],
        dynamic_lds: 0,
    };
    let mut out = [0xffu8; 512];
    let n = kernarg::layout(add.plan(), &params, &refs, &grid, &mut out).unwrap();
    assert_eq!(n, 272);
    let u = |o: usize, n: usize| {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&out[o..o + n]);
        u64::from_le_bytes(b)
    };
    assert_eq!((u(0, 8), u(8, 8)), (0x7000_0000, 0x7100_0000));
    assert_eq!((u(16, 4), u(20, 4), u(24, 4)), (16, 1, 1));
    assert_eq!((u(28, 2), u(30, 2), u(32, 2)), (64, 1, 1));
    assert_eq!(u(80, 2), 1);
    assert_eq!((u(34, 2), u(56, 8), u(64, 8), u(72, 8)), (0, 0, 0, 0));
}

#[test]
fn bytes_at_any_alignment_parse() {
    let good = read("gfx1100/add.co");
    let mut shifted = vec![0u8; 3];
    shifted.extend_from_slice(&good);
    let co = CodeObject::parse(&shifted[3..]).unwrap();
    assert_eq!(co.kernels()[0].name(), "add");
}

#[test]
fn v4_reads_group_sizes_from_the_dispatch_packet() {
    let co = parse("gfx1100-cov4/add.co");
    assert_eq!(co.version(), 4);
    assert_eq!(co.metadata_version(), [1, 1]);
    let add = co.kernel("add").unwrap();
    assert_eq!(add.kernarg_size(), 16);
    assert_eq!(add.hidden().count(), 0);
    assert!(add.reads_dispatch_packet());
}

#[test]
fn v6_generic_objects_run_on_their_family() {
    let co = parse("gfx11-generic/add.co");
    assert_eq!(co.version(), 6);
    assert_eq!(
        co.processor(),
        Processor::Generic {
            family: GenericFamily::Gfx11,
            version: 1
        }
    );
    for name in [
        "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151",
    ] {
        co.check(gpu(name)).unwrap();
    }
    let err = co.check(gpu("gfx1201")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "a code object for gfx11-generic; the GPU is gfx1201"
    );
}

#[test]
fn segments_and_hidden_arguments_of_each_kind_of_kernel() {
    for target in ["gfx1100", "gfx1201", "gfx942"] {
        let co = parse(&format!("{target}/scratch.co"));
        assert!(co.kernel("scratch").unwrap().private_segment_size() > 0);

        let co = parse(&format!("{target}/reduce.co"));
        assert_eq!(co.kernel("reduce").unwrap().group_segment_size(), 1024);

        let co = parse(&format!("{target}/reduce_dyn.co"));
        let k = co.kernel("reduce_dyn").unwrap();
        assert_eq!(k.explicit_size(), 24);
        assert_eq!(k.plan().hidden.dynamic_lds_size, Some(24 + 120));
        assert_eq!(k.max_threads(), 1024);

        let co = parse(&format!("{target}/dims.co"));
        let h = co.kernel("dims").unwrap().plan().hidden;
        assert!(h.block_count.iter().all(Option::is_some));
        assert!(h.group_size.iter().all(Option::is_some));
        assert!(h.grid_dims.is_some());

        let co = parse(&format!("{target}/affine.co"));
        let k = co.kernel("affine").unwrap();
        let by_value: Vec<_> = k
            .explicit_args()
            .filter(|a| a.kind == ArgKind::ByValue)
            .map(|a| (a.offset, a.size))
            .collect();
        assert_eq!(by_value, [(16, 24)], "the struct affine_t by value");
        assert_eq!(k.explicit_size(), 40);

        let co = parse(&format!("{target}/multi.co"));
        let names: Vec<_> = co.kernels().iter().map(Kernel::name).collect();
        assert_eq!(names, ["scale", "offset"]);
        assert_ne!(
            co.kernels()[0].descriptor_offset(),
            co.kernels()[1].descriptor_offset()
        );
        assert!(co.kernel("shift").is_none());

        let co = parse(&format!("{target}/printf.co"));
        let services: Vec<_> = co.kernel("hello").unwrap().runtime_services().collect();
        assert!(services.contains(&"printf_buffer"), "{services:?}");
        assert!(services.contains(&"hostcall_buffer"), "{services:?}");
    }
    let services: Vec<_> = parse("gfx1100-cov4/printf.co").kernels()[0]
        .runtime_services()
        .map(str::to_string)
        .collect();
    assert!(
        services.contains(&"printf_buffer".to_string()),
        "{services:?}"
    );
}

#[test]
fn a_kernel_with_more_lds_than_the_gpu_is_refused() {
    let co = parse("gfx1100/big_lds.co");
    assert_eq!(
        co.kernel("big_lds").unwrap().group_segment_size(),
        48 * 1024
    );
    co.check(gpu("gfx1100")).unwrap();
    let mut small = gpu("gfx1100").clone();
    small.lds_bytes = 32 * 1024;
    assert_eq!(
        co.check(&small).unwrap_err().to_string(),
        "kernel big_lds takes 49152 bytes of local data share; the GPU has 32768"
    );
}

/// pointers.co holds a table of two pointers, which R_AMDGPU_RELATIVE64 relocations make
/// point into the placed image.
#[test]
fn placing_applies_relocations_for_the_load_address() {
    for rel in [
        "gfx1100/pointers.co",
        "gfx942/pointers.co",
        "gfx1100-cov4/pointers.co",
    ] {
        let co = parse(rel);
        let at_zero = co.placed(0).unwrap();
        let load = 0x7f12_3456_0000;
        let placed = co.placed(load).unwrap();
        assert_eq!(placed.len() as u64, co.image_size());
        // Compare whole words: exactly two 8-byte slots differ, each by the load address.
        let words = |b: &[u8]| -> Vec<u64> {
            b.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        let (a, b) = (words(&at_zero), words(&placed));
        let diffs: Vec<_> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
        assert_eq!(diffs.len(), 2, "{rel}");
        for i in diffs {
            assert_eq!(b[i], a[i] + load, "{rel}");
            assert!(
                a[i] < co.image_size(),
                "{rel}: the pointer targets the image"
            );
        }
        // The descriptors are placed where the kernel says.
        let k = co.kernel("pick").unwrap();
        let d = k.descriptor_offset() as usize;
        let entry = i64::from_le_bytes(placed[d + 16..d + 24].try_into().unwrap());
        assert_eq!(entry, k.descriptor().kernel_code_entry_byte_offset);
        assert!(co.place(load + 8, &mut vec![0; placed.len()]).is_err());
        assert!(co.place(load, &mut [0; 16]).is_err());
    }
}

// ---- edited objects: each names its problem ----

fn message(bytes: &[u8]) -> String {
    CodeObject::parse(bytes).unwrap_err().to_string()
}

/// The byte range of the metadata note's descriptor (found by its "AMDGPU" name and type 32).
fn note_desc(bytes: &[u8]) -> std::ops::Range<usize> {
    let at = bytes
        .windows(8)
        .position(|w| w == b"AMDGPU\0\0")
        .expect("note name");
    let word = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()) as usize;
    assert_eq!(word(at - 4), 32, "NT_AMDGPU_METADATA");
    let size = word(at - 8);
    at + 8..at + 8 + size
}

/// Replaces `from` by `to` (same length) inside the metadata note only.
fn edit_note(bytes: &mut [u8], from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let r = note_desc(bytes);
    let desc = &mut bytes[r];
    let at = desc
        .windows(from.len())
        .position(|w| w == from)
        .unwrap_or_else(|| panic!("{} not in the note", String::from_utf8_lossy(from)));
    desc[at..at + to.len()].copy_from_slice(to);
}

#[test]
fn edited_headers_are_named() {
    let good = read("gfx1100/add.co");
    assert_eq!(
        message(b"hello"),
        "not a code object: it does not start with the ELF magic"
    );
    assert_eq!(
        message(&good[..40]),
        "not a code object: 40 bytes are too few for an ELF header"
    );
    let edit = |at: usize, bytes: &[u8]| {
        let mut b = good.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        message(&b)
    };
    assert_eq!(
        edit(4, &[1]),
        "not a code object: it is not a 64-bit ELF file"
    );
    assert_eq!(
        edit(5, &[2]),
        "not a code object: it is not a little-endian ELF file"
    );
    assert_eq!(
        edit(7, &[0]),
        "not a code object: its OS ABI is 0, not AMDGPU HSA (64)"
    );
    assert_eq!(
        edit(8, &[1]),
        "not a code object: its ABI version 1 is not code object v4, v5 or v6"
    );
    assert_eq!(
        edit(16, &[1, 0]),
        "not a code object: its ELF type is 1, not a shared object (ET_DYN); link it with ld.lld -shared"
    );
    assert_eq!(
        edit(18, &[62, 0]),
        "not a code object: its machine is 62, not EM_AMDGPU (224)"
    );
    assert_eq!(
        edit(48, &[0x46]),
        "not a code object: its e_flags say gfx1101 but its metadata's target is amdgcn-amd-amdhsa--gfx1100"
    );
    assert_eq!(
        edit(48, &[0x27]),
        "not a code object: its e_flags 0x27 name no AMDGPU processor"
    );
}

#[test]
fn edited_metadata_is_named() {
    let good = read("gfx1100/add.co");

    let mut b = good.clone();
    let r = note_desc(&b);
    b[r.start - 4] = 33;
    assert_eq!(
        message(&b),
        "not a code object: it has no NT_AMDGPU_METADATA note"
    );

    let mut b = good.clone();
    b[r.start] = 0xdf; // a map of 2^31-odd entries, cut short
    assert!(
        message(&b).starts_with("not a code object: its metadata note is not msgpack: "),
        "{}",
        message(&b)
    );

    let mut b = good.clone();
    edit_note(&mut b, b"add.kd", b"add.kx");
    assert_eq!(
        message(&b),
        "not a code object: kernel add has no descriptor symbol add.kx"
    );

    let mut b = good.clone();
    edit_note(
        &mut b,
        b".max_flat_workgroup_size",
        b".max_flat_workgroup_sizf",
    );
    assert_eq!(
        message(&b),
        "not a code object: its metadata is malformed: kernel 'add': .max_flat_workgroup_size is missing"
    );
}

/// No committed kernel needs a runtime service and parses cleanly (printf also needs a
/// library symbol), so this one renames add's hidden_grid_dims to hidden_queue_ptr.
#[test]
fn a_kernel_reading_a_runtime_service_says_so() {
    let mut b = read("gfx1100/add.co");
    edit_note(&mut b, b"hidden_grid_dims", b"hidden_queue_ptr");
    let co = CodeObject::parse(&b).unwrap();
    let add = co.kernel("add").unwrap();
    assert_eq!(add.runtime_services().collect::<Vec<_>>(), ["queue_ptr"]);
    assert_eq!(add.plan().hidden.grid_dims, None);
    co.check(gpu("gfx1100")).unwrap();
}

// ---- LLVM's reading of the same files ----

/// One kernel as `llvm-readelf-19 --notes` prints it: scalar keys, and each argument's keys.
#[derive(Debug, Default)]
struct LlvmKernel {
    keys: BTreeMap<String, String>,
    args: Vec<BTreeMap<String, String>>,
}

/// Reads the YAML that `llvm-readelf --notes` prints for `amdhsa.kernels`: kernels are list
/// items at indent 2 with keys at 4, arguments list items at indent 6 with keys at 8.
fn llvm_kernels(yaml: &str) -> Vec<LlvmKernel> {
    let mut kernels: Vec<LlvmKernel> = Vec::new();
    let mut inside = false;
    for line in yaml.lines() {
        if line.starts_with("amdhsa.kernels:") {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if !line.starts_with(' ') {
            inside = false;
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let mut rest = line.trim_start();
        let mut key_indent = indent;
        if let Some(r) = rest.strip_prefix("- ") {
            if !r.contains(':') {
                continue; // an item of a scalar list, such as .language_version
            }
            rest = r;
            key_indent += 2;
            match indent {
                2 => kernels.push(LlvmKernel::default()),
                6 => kernels.last_mut().unwrap().args.push(BTreeMap::new()),
                _ => {}
            }
        }
        let Some((key, value)) = rest.split_once(':') else {
            continue;
        };
        let value = value.trim().trim_matches('\'').to_string();
        let k = kernels.last_mut().unwrap();
        match key_indent {
            4 => {
                k.keys.insert(key.to_string(), value);
            }
            8 => {
                k.args.last_mut().unwrap().insert(key.to_string(), value);
            }
            _ => {}
        }
    }
    kernels
}

fn readelf(args: &[&str], file: &Path) -> Option<String> {
    let out = Command::new("llvm-readelf-19")
        .args(args)
        .arg(file)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "llvm-readelf-19 {args:?} {}",
        file.display()
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

#[test]
fn rig_reads_what_llvm_reads() {
    if Command::new("llvm-readelf-19")
        .arg("--version")
        .output()
        .is_err()
    {
        println!(
            "skipping: llvm-readelf-19 is not installed (apt install llvm-19) to compare with"
        );
        return;
    }
    let mut relocations = 0;
    for rel in all_objects() {
        let path = kernels_dir().join(&rel);
        let co = parse(&rel);
        // One run for all: each part below finds its lines in the whole output.
        let all = readelf(&["-h", "--notes", "--dyn-syms", "-r"], &path).unwrap();
        let notes = &all;
        let llvm = llvm_kernels(notes);
        assert_eq!(llvm.len(), co.kernels().len(), "{rel}");
        for (l, k) in llvm.iter().zip(co.kernels()) {
            let key = |name: &str| l.keys.get(name).map(String::as_str).unwrap_or("");
            assert_eq!(key(".name"), k.name(), "{rel}");
            assert_eq!(key(".symbol"), k.symbol(), "{rel}");
            let num = |name: &str| {
                key(name)
                    .parse::<u64>()
                    .unwrap_or_else(|_| panic!("{rel} {name}"))
            };
            assert_eq!(
                num(".group_segment_fixed_size"),
                u64::from(k.group_segment_size()),
                "{rel}"
            );
            assert_eq!(
                num(".private_segment_fixed_size"),
                u64::from(k.private_segment_size()),
                "{rel}"
            );
            assert_eq!(
                num(".kernarg_segment_size"),
                u64::from(k.kernarg_size()),
                "{rel}"
            );
            assert_eq!(
                num(".kernarg_segment_align"),
                u64::from(k.kernarg_align()),
                "{rel}"
            );
            assert_eq!(
                num(".max_flat_workgroup_size"),
                u64::from(k.max_threads()),
                "{rel}"
            );
            assert_eq!(
                num(".wavefront_size"),
                if k.wave64() { 64 } else { 32 },
                "{rel}"
            );
            assert_eq!(num(".sgpr_count"), u64::from(k.registers().0), "{rel}");
            assert_eq!(num(".vgpr_count"), u64::from(k.registers().1), "{rel}");
            assert_eq!(l.args.len(), k.args().len(), "{rel} {}", k.name());
            for (la, a) in l.args.iter().zip(k.args()) {
                assert_eq!(la[".offset"], a.offset.to_string(), "{rel}");
                assert_eq!(la[".size"], a.size.to_string(), "{rel}");
                assert_eq!(la[".value_kind"], a.kind.value_kind(), "{rel}");
                assert_eq!(la.get(".address_space"), a.address_space.as_ref(), "{rel}");
            }
        }
        assert!(
            notes.contains(&format!("amdhsa.target:   {}", co.target_id()))
                || notes.contains(&format!("amdhsa.target:   '{}'", co.target_id())),
            "{rel}"
        );

        // The processor llvm-readelf names in the header's flags.
        let flags = all.lines().find(|l| l.contains("Flags:")).unwrap();
        let name = flags.split(',').nth(1).unwrap().trim();
        assert_eq!(name, co.processor().name(), "{rel}");

        // Each kernel's code is its function symbol, in the image as placed at 0.
        for k in co.kernels() {
            let line = all
                .lines()
                .find(|l| l.ends_with(&format!(" {}", k.name())) && l.contains("FUNC"))
                .unwrap_or_else(|| panic!("{rel}: no symbol {}", k.name()));
            let value = u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
            assert_eq!(value, k.code_offset(), "{rel} {}", k.name());
        }

        // Relocations: every R_AMDGPU_RELATIVE64 llvm-readelf lists is applied.
        let placed = co.placed(0x10_0000_0000);
        for line in all.lines().filter(|l| l.contains("R_AMDGPU_RELATIVE64")) {
            let mut f = line.split_whitespace();
            let offset = usize::from_str_radix(f.next().unwrap(), 16).unwrap();
            let addend = u64::from_str_radix(f.nth(2).unwrap(), 16).unwrap();
            let placed = placed.as_ref().unwrap();
            let word = u64::from_le_bytes(placed[offset..offset + 8].try_into().unwrap());
            assert_eq!(word, 0x10_0000_0000 + addend, "{rel} at {offset:#x}");
            relocations += 1;
        }
    }
    assert!(relocations >= 10, "pointers.co of each target has two");
}

/// The hostile shapes of `fuzz/seeds/code_object` (made by
/// `fuzz/seeds/make_code_object_seeds.py`): each refused naming its bound, or parsed having
/// skipped what rig does not read.
#[test]
fn hostile_seeds_are_refused_naming_their_bound() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/code_object");
    let gfx1100 = Gpu::by_name("gfx1100").unwrap();
    let seed = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let err = |name: &str| match CodeObject::parse(&seed(name)) {
        Ok(co) => co.check(gfx1100).unwrap_err().to_string(),
        Err(e) => e.to_string(),
    };
    let co = CodeObject::parse(&seed("metadata-skipped-values.co")).unwrap();
    assert_eq!(co.kernels().len(), 1);
    let e = err("metadata-15000-kernels.co");
    assert!(
        e.contains("15000 kernels") && e.contains("MAX_KERNELS (4096)"),
        "{e}"
    );
    let e = err("metadata-deep.co");
    assert!(e.contains("MAX_DEPTH"), "{e}");
    let e = err("metadata-count-lies.co");
    assert!(e.contains("declares 4294967295 entries"), "{e}");
    let e = err("relocations-long-undefined.co");
    assert!(
        e.contains("needs symbol uuuu") && e.contains("(4000 bytes)") && e.len() < 1024,
        "{e}"
    );
    let co = CodeObject::parse(&seed("relocations-long-undefined.co")).unwrap();
    assert_eq!(co.undefined().count(), 1, "named once");
    let e = err("relocations-overlapping.co");
    assert!(e.contains("overlap"), "{e}");
}
