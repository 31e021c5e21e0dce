//! Pins `rig_vfio::abi` to the system's `linux/vfio.h`: a C program compiled against the
//! header prints every request number, constant, struct size and field offset the crate
//! relies on (itself or through `vfio-ioctls`/`vfio-bindings`), and each must equal the Rust
//! value.
//!
//! One difference is allowed, and only where it is named: `vfio_device_info` gained a
//! trailing `pad` after Linux 6.1 (vfio-bindings has it, older headers do not). The kernel
//! reads `argsz` and copies no more than it knows, so a longer struct is sound there.
//!
//! Needs a C compiler (`$CC`, else `cc`) and the header (Debian: `linux-libc-dev`).

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::process::Command as Process;

use rig_vfio::abi::{self, *};

/// One struct: C name, Rust size, (field, Rust offset), and the trailing fields the header
/// may lack.
struct Layout {
    c: &'static str,
    size: usize,
    fields: Vec<(&'static str, usize)>,
    newer_tail: &'static [(&'static str, usize)],
}

macro_rules! layout {
    ($ty:ident { $($f:ident),* } $(newer { $($nf:ident),* })?) => {
        Layout {
            c: stringify!($ty),
            size: size_of::<$ty>(),
            fields: vec![$((stringify!($f), offset_of!($ty, $f))),*],
            newer_tail: &[$($((stringify!($nf), offset_of!($ty, $nf))),*)?],
        }
    };
}

fn layouts() -> Vec<Layout> {
    vec![
        layout!(vfio_group_status { argsz, flags }),
        layout!(vfio_device_info { argsz, flags, num_regions, num_irqs, cap_offset } newer { pad }),
        layout!(vfio_region_info {
            argsz,
            flags,
            index,
            cap_offset,
            size,
            offset
        }),
        layout!(vfio_irq_info {
            argsz,
            flags,
            index,
            count
        }),
        layout!(vfio_irq_set {
            argsz,
            flags,
            index,
            start,
            count,
            data
        }),
        layout!(vfio_iommu_type1_dma_map {
            argsz,
            flags,
            vaddr,
            iova,
            size
        }),
        layout!(vfio_iommu_type1_dma_unmap {
            argsz,
            flags,
            iova,
            size,
            data
        }),
    ]
}

fn constants() -> Vec<(&'static str, u64)> {
    macro_rules! c {
        ($($name:ident),* $(,)?) => { vec![$((stringify!($name), u64::from($name))),*] };
    }
    c![
        VFIO_API_VERSION,
        VFIO_TYPE,
        VFIO_BASE,
        VFIO_TYPE1v2_IOMMU,
        VFIO_GROUP_FLAGS_VIABLE,
        VFIO_GROUP_FLAGS_CONTAINER_SET,
        VFIO_DEVICE_FLAGS_RESET,
        VFIO_DEVICE_FLAGS_PCI,
        VFIO_REGION_INFO_FLAG_READ,
        VFIO_REGION_INFO_FLAG_WRITE,
        VFIO_REGION_INFO_FLAG_MMAP,
        VFIO_REGION_INFO_FLAG_CAPS,
        VFIO_IRQ_INFO_EVENTFD,
        VFIO_IRQ_SET_DATA_NONE,
        VFIO_IRQ_SET_DATA_EVENTFD,
        VFIO_IRQ_SET_ACTION_TRIGGER,
        VFIO_DMA_MAP_FLAG_READ,
        VFIO_DMA_MAP_FLAG_WRITE,
        VFIO_PCI_BAR0_REGION_INDEX,
        VFIO_PCI_BAR5_REGION_INDEX,
        VFIO_PCI_ROM_REGION_INDEX,
        VFIO_PCI_CONFIG_REGION_INDEX,
        VFIO_PCI_INTX_IRQ_INDEX,
        VFIO_PCI_MSI_IRQ_INDEX,
        VFIO_PCI_MSIX_IRQ_INDEX,
    ]
}

/// The C program: one `NAME VALUE` line per fact.
fn program() -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <linux/vfio.h>\nint main(void) {\n",
    );
    let print = |c: &mut String, key: &str, expr: &str| {
        *c += &format!("printf(\"{key} %llu\\n\", (unsigned long long)({expr}));\n");
    };
    for i in abi::ALL {
        print(&mut c, i.name, i.name);
    }
    for (name, _) in constants() {
        print(&mut c, name, name);
    }
    for l in layouts() {
        print(
            &mut c,
            &format!("sizeof {}", l.c),
            &format!("sizeof(struct {})", l.c),
        );
        for (f, _) in &l.fields {
            print(
                &mut c,
                &format!("offsetof {}.{f}", l.c),
                &format!("offsetof(struct {}, {f})", l.c),
            );
        }
    }
    c + "return 0;\n}\n"
}

fn header_values() -> BTreeMap<String, u64> {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("vfio_layout.c");
    let bin = dir.path().join("vfio_layout");
    std::fs::write(&src, program()).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Process::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler {cc:?}: {e}"));
    assert!(
        out.status.success(),
        "compiling against linux/vfio.h failed (install linux-libc-dev):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Process::new(&bin).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn ioctl_numbers_constants_and_layouts_match_linux_vfio_h() {
    let h = header_values();
    let mut wrong = Vec::new();
    let check = |wrong: &mut Vec<String>, key: String, rust: u64| match h.get(&key) {
        Some(&c) if c == rust => {}
        Some(&c) => wrong.push(format!("{key}: header {c:#x}, rust {rust:#x}")),
        None => wrong.push(format!("{key}: not printed")),
    };
    for i in abi::ALL {
        check(&mut wrong, i.name.to_owned(), i.nr);
    }
    for (name, value) in constants() {
        check(&mut wrong, name.to_owned(), value);
    }
    for l in layouts() {
        for (f, off) in &l.fields {
            check(&mut wrong, format!("offsetof {}.{f}", l.c), *off as u64);
        }
        let c_size = h[&format!("sizeof {}", l.c)] as usize;
        // A newer header's trailing fields, where this header lacks them: the Rust struct
        // ends with exactly those.
        let tail_start = l.newer_tail.first().map(|(_, off)| *off);
        let ok = c_size == l.size || tail_start == Some(c_size);
        if !ok {
            wrong.push(format!("sizeof {}: header {c_size}, rust {}", l.c, l.size));
        }
    }
    assert!(
        wrong.is_empty(),
        "differences from linux/vfio.h:\n{}",
        wrong.join("\n")
    );
    assert_eq!(abi::ALL.len(), 14, "every request is pinned");
}
