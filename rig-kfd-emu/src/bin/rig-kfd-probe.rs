//! `rig-kfd-probe`: runs rig-kfd's discovery and every call that needs no GPU against a KFD,
//! and prints what each answered, one `KFD <call>: <answer>` line per call. Against the
//! machine's kernel with no arguments (`/dev/kfd`, the sysfs topology); against the
//! emulation with `--socket S --topology T`.
//!
//! `tests/guest_kfd.rs` runs it in a guest whose kernel has amdgpu (and so `/dev/kfd` with
//! CPU nodes only) and against `rig-kfd-emu` configured with no GPU, and asserts that the
//! two transcripts are equal: the emulation is held to the kernel wherever the kernel can
//! answer without a GPU. Answers are printed so that what may differ between two correct
//! kernels (a CPU's core count, its memory size) does not show.

use std::sync::Arc;

use rig_kfd::abi;
use rig_kfd::kfd::{Kfd, KfdError};
use rig_kfd::seam::{Emulated, Host, Kernel};
use rig_kfd::topology;

/// A GPU id no KFD has.
const NO_GPU: u32 = 0xdead;

fn answer<T>(r: Result<T, KfdError>, ok: impl FnOnce(T) -> String) -> String {
    match r {
        Ok(v) => format!("ok {}", ok(v)),
        Err(KfdError::Ioctl { errno, .. }) => format!("errno {}", errno.0),
        Err(KfdError::Open { errno, .. }) => format!("open errno {}", errno.0),
        Err(KfdError::Mmap { errno, .. }) => format!("mmap errno {}", errno.0),
        Err(e) => format!("refused by rig-kfd: {e}"),
    }
}

fn line(name: &str, text: String) {
    println!("KFD {name}: {text}");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (kernel, root): (Arc<dyn Kernel>, std::path::PathBuf) = match args.as_slice() {
        [] => (Arc::new(Host::new()), topology::SYSFS_ROOT.into()),
        [s, socket, t, tree] if s == "--socket" && t == "--topology" => {
            (Arc::new(Emulated::new(socket, tree)), tree.into())
        }
        _ => {
            eprintln!("usage: rig-kfd-probe [--socket S --topology T]");
            std::process::exit(2);
        }
    };

    // Discovery: the topology tree, as rig-kfd reads it.
    match topology::read(&root) {
        Ok(nodes) => {
            line("topology nodes", nodes.len().to_string());
            for n in &nodes {
                let p = &n.properties;
                line(
                    &format!("node {}", n.index),
                    format!(
                        "gpu_id {} is_gpu {} cpu_cores {} simd_count {} mem_banks {} \
                         gfx_target_version {} caches {} io_links {}",
                        n.gpu_id,
                        n.is_gpu(),
                        if p.get("cpu_cores_count") > 0 {
                            "some"
                        } else {
                            "none"
                        },
                        p.get("simd_count"),
                        n.mem_banks.len(),
                        p.get("gfx_target_version"),
                        p.get("caches_count"),
                        p.get("io_links_count"),
                    ),
                );
                let mut keys: Vec<&str> = p.0.keys().map(String::as_str).collect();
                keys.sort_unstable();
                line(&format!("node {} properties", n.index), keys.join(" "));
                for (i, b) in n.mem_banks.iter().enumerate() {
                    line(
                        &format!("node {} mem_bank {i}", n.index),
                        format!(
                            "heap_type {} size {}",
                            b.heap_type,
                            if b.size_in_bytes > 0 { "some" } else { "none" },
                        ),
                    );
                }
            }
        }
        Err(e) => line("topology", format!("error {e}")),
    }

    let kfd = match Kfd::open(kernel) {
        Ok(k) => k,
        Err(e) => {
            line("open", format!("error {e}"));
            std::process::exit(1);
        }
    };
    let v = kfd.features().version;
    line("version", format!("{}.{}", v.major, v.minor));
    let mut count = abi::GetProcessAperturesNewArgs::default();
    line(
        "apertures count",
        answer(
            rig_kfd::seam::call(
                &**kfd.kernel(),
                kfd.fd(),
                &mut count,
                rig_kfd::seam::Extra::None,
            )
            .map_err(|errno| KfdError::Ioctl {
                ioctl: "GET_PROCESS_APERTURES_NEW",
                errno,
            }),
            |()| format!("{} nodes", count.num_of_nodes),
        ),
    );
    line(
        "apertures",
        answer(kfd.apertures(), |a| format!("{} nodes", a.len())),
    );

    // Events, which need no GPU.
    let first = kfd.create_event(abi::EVENT_SIGNAL, true, 0, 0);
    let first_id = first.as_ref().map(|a| a.event_id).ok();
    let page_offset = first.as_ref().map_or(0, |a| a.event_page_offset);
    line(
        "create signal event",
        answer(first, |a| {
            format!(
                "id {} slot {} trigger {} page_offset {:#x}",
                a.event_id, a.event_slot_index, a.event_trigger_data, a.event_page_offset
            )
        }),
    );
    let manual = kfd.create_event(abi::EVENT_SIGNAL, false, 0, 0);
    let manual_id = manual.as_ref().map(|a| a.event_id).ok();
    line(
        "create manual-reset signal event",
        answer(manual, |a| {
            format!("id {} page_offset {:#x}", a.event_id, a.event_page_offset)
        }),
    );
    line(
        "create memory event",
        answer(kfd.create_event(abi::EVENT_MEMORY, false, 0, 0), |a| {
            format!("id {:#x}", a.event_id)
        }),
    );
    line(
        "create hw exception event",
        answer(
            kfd.create_event(abi::EVENT_HW_EXCEPTION, false, 0, 0),
            |a| format!("id {:#x}", a.event_id),
        ),
    );
    line(
        "create debug event",
        answer(kfd.create_event(abi::EVENT_DEBUG_EVENT, false, 0, 0), |a| {
            format!("id {} page_offset {:#x}", a.event_id, a.event_page_offset)
        }),
    );
    line(
        "create event of type 99",
        answer(kfd.create_event(99, false, 0, 0), |a| {
            format!("id {}", a.event_id)
        }),
    );
    let wait = |id: u32, ms: u32| {
        let mut ev = [abi::EventData {
            event_id: id,
            ..Default::default()
        }];
        answer(kfd.wait_events(&mut ev, ms), |r| format!("result {r}"))
    };
    if let (Some(a), Some(m)) = (first_id, manual_id) {
        line("wait unsignaled, 0 ms", wait(a, 0));
        line("set", answer(kfd.set_event(a), |()| String::new()));
        line("wait signaled", wait(a, 1000));
        line("wait again (auto reset)", wait(a, 0));
        line("set manual", answer(kfd.set_event(m), |()| String::new()));
        line("wait manual", wait(m, 1000));
        line("wait manual again (stays set)", wait(m, 0));
        line("destroy", answer(kfd.destroy_event(a), |()| String::new()));
        line(
            "destroy again",
            answer(kfd.destroy_event(a), |()| String::new()),
        );
        line(
            "set destroyed",
            answer(kfd.set_event(a), |()| String::new()),
        );
        line("wait destroyed", wait(a, 0));
    }
    line(
        "wait no events",
        answer(kfd.wait_events(&mut [], 0), |r| format!("result {r}")),
    );
    line(
        "set never made",
        answer(kfd.set_event(4000), |()| String::new()),
    );

    // The kernel's event page, as a process that made signal events without a page of its
    // own maps it.
    line(
        "mmap event page",
        answer(
            kfd.mmap("events", page_offset, abi::SIGNAL_EVENT_LIMIT as usize * 8),
            |p| format!("{} bytes", p.len()),
        ),
    );

    // Calls that name a GPU that does not exist.
    line(
        "alloc gtt on no gpu",
        answer(
            kfd.alloc(
                NO_GPU,
                0x1_0000_0000,
                4096,
                abi::ALLOC_MEM_FLAGS_GTT | abi::ALLOC_MEM_FLAGS_WRITABLE,
            ),
            |(h, o)| format!("handle {h:#x} offset {o:#x}"),
        ),
    );
    line(
        "alloc vram on no gpu",
        answer(
            kfd.alloc(NO_GPU, 0x1_0000_0000, 4096, abi::ALLOC_MEM_FLAGS_VRAM),
            |(h, o)| format!("handle {h:#x} offset {o:#x}"),
        ),
    );
    line(
        "free no handle",
        answer(kfd.free(0x1234_0000_0001), |()| String::new()),
    );
    line(
        "map no handle",
        answer(kfd.map(0x1234_0000_0001, NO_GPU), |()| String::new()),
    );
    line(
        "unmap no handle",
        answer(kfd.unmap(0x1234_0000_0001, NO_GPU), |()| String::new()),
    );
    let mut q = abi::CreateQueueArgs {
        gpu_id: NO_GPU,
        queue_type: abi::QUEUE_TYPE_COMPUTE_AQL,
        ring_size: 4096,
        queue_percentage: 100,
        ..Default::default()
    };
    line(
        "create queue on no gpu",
        answer(kfd.create_queue(&mut q), |()| format!("id {}", q.queue_id)),
    );
    line(
        "destroy no queue",
        answer(kfd.destroy_queue(7), |()| String::new()),
    );
    line(
        "clock counters of no gpu",
        answer(kfd.clock_counters(NO_GPU), |c| {
            format!(
                "gpu {} cpu {} system {} freq {}",
                if c.gpu_clock_counter > 0 {
                    "some"
                } else {
                    "zero"
                },
                if c.cpu_clock_counter > 0 {
                    "some"
                } else {
                    "zero"
                },
                if c.system_clock_counter > 0 {
                    "some"
                } else {
                    "zero"
                },
                c.system_clock_freq
            )
        }),
    );
    line(
        "available memory of no gpu",
        answer(kfd.available_memory(NO_GPU), |m| m.to_string()),
    );
    line(
        "acquire vm of no gpu",
        answer(kfd.acquire_vm(NO_GPU, 128), |_| String::new()),
    );
    line(
        "runtime enable",
        answer(kfd.runtime_enable(), |()| String::new()),
    );
}
