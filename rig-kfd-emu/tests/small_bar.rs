//! A GPU without resizable BAR, as the emulated KFD plays it (`Config::bar_bytes`): the
//! topology lists its VRAM as one private bank, PUBLIC VRAM is refused (EINVAL, as
//! `kfd_ioctl_alloc_memory_of_gpu` refuses it on a small BAR), and an mmap of VRAM without
//! PUBLIC is refused (EPERM, as `amdgpu_gem_object_mmap` refuses NO_CPU_ACCESS memory).

use std::os::fd::AsFd;
use std::sync::Arc;

use rig_kfd::abi;
use rig_kfd::kfd::{Kfd, KfdError};
use rig_kfd::seam::{Emulated, Kernel};
use rig_kfd::topology;
use rig_kfd_emu::kernel::{Config, GPUVM_BASE};

fn errno(e: &KfdError) -> i32 {
    match e {
        KfdError::Ioctl { errno, .. } => errno.0,
        other => panic!("not an ioctl error: {other}"),
    }
}

/// (PUBLIC VRAM's answer, the errno of an mmap of VRAM without PUBLIC, the bank's heap
/// type) on one gfx1100 of 4 GiB whose BAR is `bar_bytes`.
fn on(bar_bytes: Option<u64>) -> (Result<(), i32>, i32, u32) {
    let dir = tempfile::tempdir().unwrap();
    let (sock, topo) = (dir.path().join("kfd.sock"), dir.path().join("topology"));
    let config = Config {
        models: vec!["gfx1100".into()],
        bar_bytes,
        ..Config::default()
    };
    let _server = rig_kfd_emu::start(config, &sock, &topo).unwrap();
    let kernel: Arc<dyn Kernel> = Arc::new(Emulated::new(&sock, &topo));
    let kfd = Kfd::open(kernel.clone()).unwrap();
    let node = topology::read(&topo)
        .unwrap()
        .into_iter()
        .find(|n| n.is_gpu())
        .unwrap();
    let render = kfd
        .acquire_vm(node.gpu_id, node.drm_render_minor().unwrap())
        .unwrap();
    let vram = abi::ALLOC_MEM_FLAGS_VRAM | abi::ALLOC_MEM_FLAGS_WRITABLE;
    let public = kfd
        .alloc(
            node.gpu_id,
            GPUVM_BASE,
            4096,
            vram | abi::ALLOC_MEM_FLAGS_PUBLIC,
        )
        .map(|(h, offset)| {
            kernel
                .mmap(render.as_fd(), offset, 4096)
                .expect("PUBLIC VRAM maps for the host");
            kfd.free(h).unwrap();
        })
        .map_err(|e| errno(&e));
    let (_, offset) = kfd
        .alloc(node.gpu_id, GPUVM_BASE + 8192, 4096, vram)
        .unwrap();
    let mmap = kernel
        .mmap(render.as_fd(), offset, 4096)
        .map(|_| 0)
        .unwrap_or_else(|e| e.0);
    (public, mmap, node.mem_banks[0].heap_type)
}

#[test]
fn a_small_bar_lists_private_vram_and_refuses_host_visible_vram() {
    let (public, mmap, heap) = on(Some(256 << 20));
    assert_eq!(heap, topology::HEAP_FRAME_BUFFER_PRIVATE);
    assert_eq!(public, Err(libc::EINVAL), "PUBLIC VRAM on a small BAR");
    assert_eq!(
        mmap,
        libc::EPERM,
        "an mmap of VRAM the host does not address"
    );
}

#[test]
fn a_large_bar_lists_public_vram_and_maps_it() {
    let (public, mmap, heap) = on(None);
    assert_eq!(heap, topology::HEAP_FRAME_BUFFER_PUBLIC);
    assert_eq!(public, Ok(()));
    assert_eq!(mmap, libc::EPERM, "VRAM without PUBLIC never maps");
}
