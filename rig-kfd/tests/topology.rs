//! Reading KFD topology trees: typed nodes, the path's fields from them, rig-amd matching,
//! and refusals of malformed or oversized trees.

use std::path::Path;

use rig_kfd::topology::{self, NotDriven, TopologyError};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A node as the kernel lays it out: `gpu_id`, `name`, `properties`, banks and caches.
fn node(
    root: &Path,
    index: u32,
    gpu_id: u32,
    name: &str,
    props: &[(&str, i64)],
    banks: &[(u32, u64)],
    caches: &[(u32, u64)],
) {
    let dir = root.join(format!("nodes/{index}"));
    write(&dir.join("gpu_id"), &format!("{gpu_id}\n"));
    write(&dir.join("name"), &format!("{name}\n"));
    let mut text = String::new();
    for (k, v) in props {
        text += &format!("{k} {v}\n");
    }
    write(&dir.join("properties"), &text);
    for (i, (heap, bytes)) in banks.iter().enumerate() {
        write(
            &dir.join(format!("mem_banks/{i}/properties")),
            &format!(
                "heap_type {heap}\nsize_in_bytes {bytes}\nflags 0\nwidth 384\nmem_clk_max 1249\n"
            ),
        );
    }
    for (i, (level, kib)) in caches.iter().enumerate() {
        write(
            &dir.join(format!("caches/{i}/properties")),
            &format!(
                "processor_id_low 2147487744\nlevel {level}\nsize {kib}\ncache_line_size 128\n\
                 cache_lines_per_tag 1\nassociation 16\nlatency 1\ntype 5\nsibling_map 1,0,0,0\n"
            ),
        );
    }
}

fn cpu(root: &Path) {
    node(
        root,
        0,
        0,
        "AMD EPYC",
        &[
            ("cpu_cores_count", 16),
            ("simd_count", 0),
            ("gfx_target_version", 0),
        ],
        &[(0, 1 << 36)],
        &[],
    );
}

/// A Radeon RX 7900 XTX as amdgpu lists it.
fn gfx1100(root: &Path, index: u32) {
    node(
        root,
        index,
        0x4f1a,
        "gfx1100",
        &[
            ("cpu_cores_count", 0),
            ("simd_count", 192),
            ("max_waves_per_simd", 16),
            ("lds_size_in_kb", 64),
            ("wave_front_size", 32),
            ("array_count", 12),
            ("simd_arrays_per_engine", 2),
            ("cu_per_simd_array", 8),
            ("simd_per_cu", 2),
            ("gfx_target_version", 110000),
            ("vendor_id", 4098),
            ("device_id", 29772),
            ("location_id", 0x0300),
            ("domain", 0),
            ("drm_render_minor", 128),
            ("num_sdma_engines", 2),
            ("num_cp_queues", 8),
            ("max_engine_clk_fcompute", 2482),
            ("fw_version", 2140),
            ("sdma_fw_version", 20),
            ("num_xcc", 1),
        ],
        &[(1, 24 << 30)],
        &[(1, 32), (1, 32), (2, 6144), (3, 98304)],
    );
}

#[test]
fn reads_a_gpu_node_into_the_paths_fields() {
    let t = tempfile::tempdir().unwrap();
    cpu(t.path());
    gfx1100(t.path(), 1);
    let nodes = topology::read(t.path()).unwrap();
    assert_eq!(nodes.len(), 2);
    assert!(!nodes[0].is_gpu());
    let n = &nodes[1];
    assert!(n.is_gpu());
    assert_eq!(n.gpu_id, 0x4f1a);
    assert_eq!(n.processor_name(), "gfx1100");
    assert_eq!(n.compute_units(), 96);
    assert_eq!(n.shader_engines(), 6);
    assert_eq!(n.waves_per_cu(), 32);
    assert_eq!(n.lds_bytes(), 64 * 1024);
    assert_eq!(n.bus(), "0000:03:00.0");
    assert_eq!(n.drm_render_minor(), Some(128));
    assert_eq!(n.mec_firmware(), 2140);
    assert_eq!(n.sdma_firmware(), 20);
    assert_eq!(n.vram_bytes(), 24 << 30);
    // L2 6 MiB + MALL 96 MiB; the L1s are not counted.
    assert_eq!(n.cache_bytes(), Some((6 + 96) << 20));
    // 8 CUs per array = 4 WGPs, all set: 6 engines of 2 arrays.
    let gpu = n.gpu().unwrap();
    assert_eq!(n.wgps(gpu.hal()), vec![vec![0xf; 2]; 6]);
    assert_eq!(gpu.name(), "gfx1100");
}

#[test]
fn a_gpu_rig_does_not_drive_is_named_with_the_reason() {
    let t = tempfile::tempdir().unwrap();
    node(
        t.path(),
        0,
        7,
        "gfx1030",
        &[
            ("simd_count", 160),
            ("gfx_target_version", 100300),
            ("wave_front_size", 32),
        ],
        &[],
        &[],
    );
    node(
        t.path(),
        1,
        8,
        "gfx90a",
        &[
            ("simd_count", 440),
            ("gfx_target_version", 90010),
            ("wave_front_size", 64),
        ],
        &[],
        &[],
    );
    node(
        t.path(),
        2,
        9,
        "gfx1100",
        &[
            ("simd_count", 192),
            ("gfx_target_version", 110000),
            ("wave_front_size", 64),
        ],
        &[],
        &[],
    );
    let nodes = topology::read(t.path()).unwrap();
    let e = nodes[0].gpu().unwrap_err();
    assert_eq!(
        e,
        NotDriven::Generation {
            processor: "gfx1030".into(),
            major: 10
        }
    );
    assert!(e.to_string().contains("GFX10"), "{e}");
    assert_eq!(
        nodes[1].gpu().unwrap_err(),
        NotDriven::Unknown {
            processor: "gfx90a".into()
        }
    );
    assert!(matches!(
        nodes[2].gpu().unwrap_err(),
        NotDriven::WaveSize {
            found: 64,
            table: 32,
            ..
        }
    ));
    // No L2 stated: no cache bytes.
    assert_eq!(nodes[0].cache_bytes(), None);
}

#[test]
fn nodes_come_in_number_order_and_no_tree_is_no_nodes() {
    let t = tempfile::tempdir().unwrap();
    gfx1100(t.path(), 10);
    gfx1100(t.path(), 2);
    cpu(t.path());
    let idx: Vec<u32> = topology::read(t.path())
        .unwrap()
        .iter()
        .map(|n| n.index)
        .collect();
    assert_eq!(idx, [0, 2, 10]);
    assert!(
        topology::read(Path::new("/nonexistent-kfd"))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn malformed_and_oversized_files_are_refused_naming_the_file() {
    let t = tempfile::tempdir().unwrap();
    gfx1100(t.path(), 1);
    let props = t.path().join("nodes/1/properties");
    write(&props, "simd_count 192\nwave_front_size thirty-two\n");
    match topology::read(t.path()) {
        Err(TopologyError::Parse { path, line: 2, .. }) => assert_eq!(path, props),
        other => panic!("{other:?}"),
    }
    write(&props, &"x 1\n".repeat(20_000));
    let e = topology::read(t.path()).unwrap_err();
    assert!(matches!(e, TopologyError::TooLarge { .. }), "{e}");
    assert!(e.to_string().contains("65536"), "{e}");
    write(&t.path().join("nodes/1/gpu_id"), "not a number\n");
    assert!(matches!(
        topology::read(t.path()),
        Err(TopologyError::Parse { .. })
    ));
}

#[test]
fn too_many_nodes_is_refused_with_the_limit() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..=topology::MAX_NODES as u32 {
        std::fs::create_dir_all(t.path().join(format!("nodes/{i}"))).unwrap();
    }
    let e = topology::read(t.path()).unwrap_err();
    assert!(
        matches!(e, TopologyError::TooMany { limit: 256, .. }),
        "{e}"
    );
}

#[test]
fn context_save_sizes_follow_the_node() {
    let t = tempfile::tempdir().unwrap();
    gfx1100(t.path(), 1);
    let n = &topology::read(t.path()).unwrap()[0];
    let c = rig_kfd::queue::ContextSave::of(n);
    // 96 CUs x 32 waves x 12 bytes + 8, with the 40-byte header, in pages.
    assert_eq!(c.ctl_stack_bytes, 40960);
    // Plus 96 CUs x (384 KiB VGPRs + 16 KiB SGPRs + 64 KiB LDS + 4 KiB registers).
    assert_eq!(c.cwsr_bytes, 40960 + 96 * 0x75000);
    assert_eq!(c.debug_bytes, 96 * 32 * 32);
    assert_eq!(
        c.total_bytes(),
        (c.cwsr_bytes + c.debug_bytes).div_ceil(4096) * 4096
    );
}
