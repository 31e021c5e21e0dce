//! Pins `rig_kfd::abi` to the system's `linux/kfd_ioctl.h`: a C program compiled against the
//! header prints every size, field offset, constant and request number the crate declares,
//! and each must equal the Rust definition. What the header lacks is allowed only where the
//! crate says it came in a later KFD version than the header's.
//!
//! Needs a C compiler (`$CC`, else `cc`) and the header (Debian: `linux-libc-dev`).

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::process::Command as Process;

use rig_kfd::abi::{self, *};
use rig_kfd::version::Version;

/// One struct: its C name, the Rust size, the version that has it, and (C field, Rust offset).
struct Layout {
    c: &'static str,
    size: usize,
    since: Version,
    fields: Vec<(&'static str, usize)>,
}

macro_rules! layout {
    ($c:literal, $ty:ty, $since:expr, { $($cf:literal => $rf:ident),* $(,)? }) => {
        Layout {
            c: $c,
            size: size_of::<$ty>(),
            since: $since,
            fields: vec![$(($cf, offset_of!($ty, $rf))),*],
        }
    };
}

const OLD: Version = Version { major: 1, minor: 1 };

fn layouts() -> Vec<Layout> {
    vec![
        layout!("kfd_ioctl_get_version_args", GetVersionArgs, OLD, {
            "major_version" => major_version, "minor_version" => minor_version }),
        layout!("kfd_ioctl_create_queue_args", CreateQueueArgs, OLD, {
            "ring_base_address" => ring_base_address,
            "write_pointer_address" => write_pointer_address,
            "read_pointer_address" => read_pointer_address,
            "doorbell_offset" => doorbell_offset, "ring_size" => ring_size, "gpu_id" => gpu_id,
            "queue_type" => queue_type, "queue_percentage" => queue_percentage,
            "queue_priority" => queue_priority, "queue_id" => queue_id,
            "eop_buffer_address" => eop_buffer_address, "eop_buffer_size" => eop_buffer_size,
            "ctx_save_restore_address" => ctx_save_restore_address,
            "ctx_save_restore_size" => ctx_save_restore_size, "ctl_stack_size" => ctl_stack_size }),
        layout!("kfd_ioctl_destroy_queue_args", DestroyQueueArgs, OLD, {
            "queue_id" => queue_id, "pad" => pad }),
        layout!("kfd_ioctl_get_clock_counters_args", GetClockCountersArgs, OLD, {
            "gpu_clock_counter" => gpu_clock_counter, "cpu_clock_counter" => cpu_clock_counter,
            "system_clock_counter" => system_clock_counter,
            "system_clock_freq" => system_clock_freq, "gpu_id" => gpu_id, "pad" => pad }),
        layout!("kfd_process_device_apertures", ProcessDeviceApertures, OLD, {
            "lds_base" => lds_base, "lds_limit" => lds_limit, "scratch_base" => scratch_base,
            "scratch_limit" => scratch_limit, "gpuvm_base" => gpuvm_base,
            "gpuvm_limit" => gpuvm_limit, "gpu_id" => gpu_id, "pad" => pad }),
        layout!("kfd_ioctl_get_process_apertures_new_args", GetProcessAperturesNewArgs, OLD, {
            "kfd_process_device_apertures_ptr" => kfd_process_device_apertures_ptr,
            "num_of_nodes" => num_of_nodes, "pad" => pad }),
        layout!("kfd_ioctl_create_event_args", CreateEventArgs, OLD, {
            "event_page_offset" => event_page_offset, "event_trigger_data" => event_trigger_data,
            "event_type" => event_type, "auto_reset" => auto_reset, "node_id" => node_id,
            "event_id" => event_id, "event_slot_index" => event_slot_index }),
        layout!("kfd_ioctl_destroy_event_args", DestroyEventArgs, OLD, {
            "event_id" => event_id, "pad" => pad }),
        layout!("kfd_ioctl_set_event_args", SetEventArgs, OLD, {
            "event_id" => event_id, "pad" => pad }),
        layout!("kfd_memory_exception_failure", MemoryExceptionFailure, OLD, {
            "NotPresent" => not_present, "ReadOnly" => read_only, "NoExecute" => no_execute,
            "imprecise" => imprecise }),
        layout!("kfd_hsa_memory_exception_data", MemoryExceptionData, OLD, {
            "failure" => failure, "va" => va, "gpu_id" => gpu_id, "ErrorType" => error_type }),
        layout!("kfd_hsa_hw_exception_data", HwExceptionData, OLD, {
            "reset_type" => reset_type, "reset_cause" => reset_cause,
            "memory_lost" => memory_lost, "gpu_id" => gpu_id }),
        layout!("kfd_event_data", EventData, OLD, {
            "memory_exception_data" => payload, "hw_exception_data" => payload,
            "kfd_event_data_ext" => kfd_event_data_ext, "event_id" => event_id, "pad" => pad }),
        layout!("kfd_ioctl_wait_events_args", WaitEventsArgs, OLD, {
            "events_ptr" => events_ptr, "num_events" => num_events,
            "wait_for_all" => wait_for_all, "timeout" => timeout, "wait_result" => wait_result }),
        layout!("kfd_ioctl_acquire_vm_args", AcquireVmArgs, OLD, {
            "drm_fd" => drm_fd, "gpu_id" => gpu_id }),
        layout!("kfd_ioctl_alloc_memory_of_gpu_args", AllocMemoryOfGpuArgs, OLD, {
            "va_addr" => va_addr, "size" => size, "handle" => handle,
            "mmap_offset" => mmap_offset, "gpu_id" => gpu_id, "flags" => flags }),
        layout!("kfd_ioctl_free_memory_of_gpu_args", FreeMemoryOfGpuArgs, OLD, {
            "handle" => handle }),
        layout!("kfd_ioctl_map_memory_to_gpu_args", MapMemoryToGpuArgs, OLD, {
            "handle" => handle, "device_ids_array_ptr" => device_ids_array_ptr,
            "n_devices" => n_devices, "n_success" => n_success }),
        layout!("kfd_ioctl_unmap_memory_from_gpu_args", UnmapMemoryFromGpuArgs, OLD, {
            "handle" => handle, "device_ids_array_ptr" => device_ids_array_ptr,
            "n_devices" => n_devices, "n_success" => n_success }),
        layout!("kfd_ioctl_get_available_memory_args", GetAvailableMemoryArgs, AVAILABLE_MEMORY.since, {
            "available" => available, "gpu_id" => gpu_id, "pad" => pad }),
        layout!("kfd_ioctl_export_dmabuf_args", ExportDmabufArgs, EXPORT_DMABUF.since, {
            "handle" => handle, "flags" => flags, "dmabuf_fd" => dmabuf_fd }),
        layout!("kfd_ioctl_runtime_enable_args", RuntimeEnableArgs, RUNTIME_ENABLE.since, {
            "r_debug" => r_debug, "mode_mask" => mode_mask,
            "capabilities_mask" => capabilities_mask }),
    ]
}

/// (C macro, Rust value, version that has it).
fn constants() -> Vec<(&'static str, u64, Version)> {
    let old = |name, value: u32| (name, u64::from(value), OLD);
    vec![
        old("KFD_IOC_QUEUE_TYPE_COMPUTE", QUEUE_TYPE_COMPUTE),
        old("KFD_IOC_QUEUE_TYPE_SDMA", QUEUE_TYPE_SDMA),
        old("KFD_IOC_QUEUE_TYPE_COMPUTE_AQL", QUEUE_TYPE_COMPUTE_AQL),
        old("KFD_MAX_QUEUE_PERCENTAGE", MAX_QUEUE_PERCENTAGE),
        old("KFD_MAX_QUEUE_PRIORITY", MAX_QUEUE_PRIORITY),
        (
            "KFD_MIN_QUEUE_RING_SIZE",
            u64::from(MIN_QUEUE_RING_SIZE),
            Version {
                major: 1,
                minor: 11,
            },
        ),
        old("KFD_IOC_EVENT_SIGNAL", EVENT_SIGNAL),
        old("KFD_IOC_EVENT_NODECHANGE", EVENT_NODECHANGE),
        old("KFD_IOC_EVENT_DEVICESTATECHANGE", EVENT_DEVICESTATECHANGE),
        old("KFD_IOC_EVENT_HW_EXCEPTION", EVENT_HW_EXCEPTION),
        old("KFD_IOC_EVENT_SYSTEM_EVENT", EVENT_SYSTEM_EVENT),
        old("KFD_IOC_EVENT_DEBUG_EVENT", EVENT_DEBUG_EVENT),
        old("KFD_IOC_EVENT_PROFILE_EVENT", EVENT_PROFILE_EVENT),
        old("KFD_IOC_EVENT_QUEUE_EVENT", EVENT_QUEUE_EVENT),
        old("KFD_IOC_EVENT_MEMORY", EVENT_MEMORY),
        old("KFD_IOC_WAIT_RESULT_COMPLETE", WAIT_RESULT_COMPLETE),
        old("KFD_IOC_WAIT_RESULT_TIMEOUT", WAIT_RESULT_TIMEOUT),
        old("KFD_IOC_WAIT_RESULT_FAIL", WAIT_RESULT_FAIL),
        old("KFD_SIGNAL_EVENT_LIMIT", SIGNAL_EVENT_LIMIT),
        old(
            "KFD_HW_EXCEPTION_WHOLE_GPU_RESET",
            HW_EXCEPTION_WHOLE_GPU_RESET,
        ),
        old(
            "KFD_HW_EXCEPTION_PER_ENGINE_RESET",
            HW_EXCEPTION_PER_ENGINE_RESET,
        ),
        old("KFD_HW_EXCEPTION_GPU_HANG", HW_EXCEPTION_GPU_HANG),
        old("KFD_HW_EXCEPTION_ECC", HW_EXCEPTION_ECC),
        old("KFD_MEM_ERR_NO_RAS", MEM_ERR_NO_RAS),
        old("KFD_MEM_ERR_SRAM_ECC", MEM_ERR_SRAM_ECC),
        old("KFD_MEM_ERR_POISON_CONSUMED", MEM_ERR_POISON_CONSUMED),
        old("KFD_MEM_ERR_GPU_HANG", MEM_ERR_GPU_HANG),
        old("KFD_IOC_ALLOC_MEM_FLAGS_VRAM", ALLOC_MEM_FLAGS_VRAM),
        old("KFD_IOC_ALLOC_MEM_FLAGS_GTT", ALLOC_MEM_FLAGS_GTT),
        old("KFD_IOC_ALLOC_MEM_FLAGS_USERPTR", ALLOC_MEM_FLAGS_USERPTR),
        old("KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL", ALLOC_MEM_FLAGS_DOORBELL),
        old(
            "KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP",
            ALLOC_MEM_FLAGS_MMIO_REMAP,
        ),
        old("KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE", ALLOC_MEM_FLAGS_WRITABLE),
        old(
            "KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE",
            ALLOC_MEM_FLAGS_EXECUTABLE,
        ),
        old("KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC", ALLOC_MEM_FLAGS_PUBLIC),
        old(
            "KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE",
            ALLOC_MEM_FLAGS_NO_SUBSTITUTE,
        ),
        old(
            "KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM",
            ALLOC_MEM_FLAGS_AQL_QUEUE_MEM,
        ),
        old("KFD_IOC_ALLOC_MEM_FLAGS_COHERENT", ALLOC_MEM_FLAGS_COHERENT),
        old("KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED", ALLOC_MEM_FLAGS_UNCACHED),
        (
            "KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK",
            u64::from(RUNTIME_ENABLE_MODE_ENABLE_MASK),
            RUNTIME_ENABLE.since,
        ),
        (
            "KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK",
            u64::from(RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK),
            RUNTIME_ENABLE.since,
        ),
        ("AMDKFD_IOCTL_BASE", u64::from(IOCTL_BASE), OLD),
    ]
}

/// The C program: one line per fact, `absent NAME` where the header lacks it.
fn program() -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <linux/kfd_ioctl.h>\n\
         int main(void) {\n\
         printf(\"version %u %u\\n\", KFD_IOCTL_MAJOR_VERSION, KFD_IOCTL_MINOR_VERSION);\n",
    );
    for i in abi::ALL {
        let m = format!("AMDKFD_IOC_{}", i.name);
        c += &format!(
            "#ifdef {m}\nprintf(\"{m} %llu\\n\", (unsigned long long){m});\n#else\n\
             printf(\"absent {m}\\n\");\n#endif\n"
        );
    }
    // Every constant is a 32-bit field's value: `(1 << 31)` is an int in C, so compare as
    // the u32 the field holds.
    for (m, _, _) in constants() {
        c += &format!(
            "#ifdef {m}\nprintf(\"{m} %llu\\n\", (unsigned long long)(__u32)({m}));\n#else\n\
             printf(\"absent {m}\\n\");\n#endif\n"
        );
    }
    for l in layouts() {
        // A struct the header lacks has no macro to test; its ioctl's guard stands for it.
        let guard = match l.c {
            "kfd_ioctl_export_dmabuf_args" => Some("AMDKFD_IOC_EXPORT_DMABUF"),
            "kfd_ioctl_runtime_enable_args" => Some("AMDKFD_IOC_RUNTIME_ENABLE"),
            "kfd_ioctl_get_available_memory_args" => Some("AMDKFD_IOC_AVAILABLE_MEMORY"),
            _ => None,
        };
        if let Some(g) = guard {
            c += &format!("#ifdef {g}\n");
        }
        c += &format!("printf(\"sizeof {0} %zu\\n\", sizeof(struct {0}));\n", l.c);
        for (f, _) in &l.fields {
            c += &format!(
                "printf(\"offsetof {0}.{1} %zu\\n\", offsetof(struct {0}, {1}));\n",
                l.c, f
            );
        }
        if guard.is_some() {
            c += &format!("#else\nprintf(\"absent sizeof {}\\n\");\n#endif\n", l.c);
        }
    }
    c + "return 0;\n}\n"
}

struct Header {
    version: Version,
    values: BTreeMap<String, u64>,
    absent: Vec<String>,
}

fn run_header_program() -> Header {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("kfd_layout.c");
    let bin = dir.path().join("kfd_layout");
    std::fs::write(&src, program()).unwrap();
    // kfd_ioctl.h includes <drm/drm.h> for the kernel's __u32 types only. Debian ships that
    // header in no package at that path (libdrm-dev puts it under libdrm/), so a stand-in
    // that gives the same types is found after the system's include paths (-idirafter): a
    // real drm/drm.h, where installed, wins.
    std::fs::create_dir(dir.path().join("drm")).unwrap();
    std::fs::write(dir.path().join("drm/drm.h"), "#include <linux/types.h>\n").unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Process::new(&cc)
        .arg("-std=c11")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-idirafter")
        .arg(dir.path())
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler {cc:?}: {e}"));
    assert!(
        out.status.success(),
        "compiling against linux/kfd_ioctl.h failed (install linux-libc-dev):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Process::new(&bin).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut version = None;
    let mut values = BTreeMap::new();
    let mut absent = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["version", major, minor] => {
                version = Some(Version {
                    major: major.parse().unwrap(),
                    minor: minor.parse().unwrap(),
                })
            }
            ["absent", rest @ ..] => absent.push(rest.join(" ")),
            [key @ .., value] => {
                values.insert(key.join(" "), value.parse().unwrap());
            }
            [] => {}
        }
    }
    Header {
        version: version.expect("the program prints the header's version"),
        values,
        absent,
    }
}

/// Checks one fact: equal where the header has it; absent only if newer than the header.
fn check(h: &Header, key: &str, rust: u64, since: Version, errors: &mut Vec<String>) {
    match h.values.get(key) {
        Some(&c) if c == rust => {}
        Some(&c) => errors.push(format!("{key}: header {c:#x}, rig-kfd {rust:#x}")),
        None => {
            let absent = h.absent.iter().any(|a| a == key);
            if !absent {
                errors.push(format!("{key}: not printed by the program"));
            } else if since <= h.version {
                errors.push(format!(
                    "{key}: missing from the KFD {} header, but rig-kfd says KFD {since} has it",
                    h.version
                ));
            }
        }
    }
}

#[test]
fn abi_matches_the_system_header() {
    let h = run_header_program();
    let mut errors = Vec::new();
    for i in abi::ALL {
        let key = format!("AMDKFD_IOC_{}", i.name);
        check(&h, &key, i.request(), i.since, &mut errors);
    }
    for (m, value, since) in constants() {
        check(&h, m, value, since, &mut errors);
    }
    for l in layouts() {
        let key = format!("sizeof {}", l.c);
        if h.absent.iter().any(|a| a == &key) {
            if l.since <= h.version {
                errors.push(format!("{key}: missing from KFD {} header", h.version));
            }
            continue;
        }
        check(&h, &key, l.size as u64, l.since, &mut errors);
        for (f, off) in &l.fields {
            check(
                &h,
                &format!("offsetof {}.{f}", l.c),
                *off as u64,
                l.since,
                &mut errors,
            );
        }
    }
    assert!(
        errors.is_empty(),
        "rig-kfd disagrees with linux/kfd_ioctl.h (KFD {}):\n{}",
        h.version,
        errors.join("\n")
    );
    // The header here must cover at least what rig drives, or the pin proves little.
    assert!(
        h.version >= rig_kfd::version::MINIMUM,
        "header is KFD {}",
        h.version
    );
}

#[test]
fn every_ioctl_has_a_unique_number_and_its_block_size() {
    let mut seen = std::collections::HashSet::new();
    for i in abi::ALL {
        assert!(seen.insert(i.nr), "{} reuses number {:#x}", i.name, i.nr);
        assert_eq!(
            ((i.request() >> 16) & 0x3fff) as usize,
            i.size,
            "{}",
            i.name
        );
    }
    assert_eq!(CreateQueueArgs::IOCTL, CREATE_QUEUE);
    assert_eq!(size_of::<EventData>(), 48);
}
