//! Every request's happy path and its errors, against the real rigd binary serving a
//! simulated gfx1100.

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rig_proto::messages::{
    DeviceId, ErrorCode, Generations, ImageId, MemoryKind, PathKind, QueueKind, RegionId, Request,
    Response, Shortage,
};
use rig_shm::SharedRegion;
use rig_testkit::rigd::{Rigd, SIM, code, holds_within};

#[test]
fn gpus_open_facts_and_shares() {
    let d = Rigd::start(SIM);
    let mut c = d.client("t");
    let Response::Gpus(g) = c.call(Request::ListGpus) else {
        panic!()
    };
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].arch, "gfx1100");
    assert_eq!(g[0].path, PathKind::Sim);
    assert!(g[0].simulated);

    assert_eq!(
        code(&c.call(Request::OpenDevice { gpu: 7 })),
        Some(ErrorCode::NoSuchGpu)
    );

    let o = c.open();
    let m = &o.msg;
    assert_eq!(m.facts.arch, "gfx1100");
    assert_eq!(m.facts.queues, ["COMPUTE:0", "COPY:0"]);
    assert_eq!(m.facts.copy_engine, Some(1));
    assert_eq!(m.facts.alignment, 4096);
    assert!(!m.facts.may_block && !m.facts.host_addresses && m.facts.maps_host);
    assert_eq!(m.facts.hang_ms, Some(300));
    assert_eq!(m.compute.kind, QueueKind::Pm4);
    assert_eq!(m.copy.kind, QueueKind::Sdma);
    assert_eq!(m.facts.word, m.word.memory.gpu_address);
    assert!(o.fds.len() <= rig_proto::MAX_FDS);
    // Every share lies inside its descriptor.
    for s in [
        m.compute.ring.host,
        m.compute.read.host,
        m.compute.write.host,
        m.copy.ring.host,
        m.args.memory.host,
        m.word.memory.host,
        m.submitted,
    ] {
        let r = o.region(s.fd);
        assert!(
            r.contains(s.offset, s.bytes),
            "{s:?} outside a {}-byte region",
            r.len()
        );
    }
    let word = o.region(m.word.memory.host.fd);
    assert_eq!(
        word.load_u64(m.word.memory.host.offset as usize, Ordering::Acquire),
        0
    );

    let Response::Facts(f) = c.call(Request::Facts { device: o.id() }) else {
        panic!()
    };
    assert_eq!(f.arch, "gfx1100");
    let Response::Clock(k1) = c.call(Request::SampleClock { device: o.id() }) else {
        panic!()
    };
    let Response::Clock(k2) = c.call(Request::SampleClock { device: o.id() }) else {
        panic!()
    };
    assert!(k2.gpu >= k1.gpu && k1.host_before_ns <= k1.host_after_ns);
    let Response::Status(s) = c.call(Request::DeviceStatus { device: o.id() }) else {
        panic!()
    };
    assert!(s.lost.is_none() && !s.stopped && s.reached == 0);
}

#[test]
fn a_ping_is_answered_with_a_pong_touching_no_device() {
    let d = Rigd::start(SIM);
    let mut c = d.client("t");
    assert_eq!(c.call(Request::Ping), Response::Pong);
    let _o = c.open();
    // A device open changes nothing, and the connection still answers in order.
    assert_eq!(c.call(Request::Ping), Response::Pong);
    assert!(matches!(c.call(Request::ListGpus), Response::Gpus(_)));
    assert_eq!(c.call(Request::Ping), Response::Pong);
}

#[test]
fn memory_requests_and_errors() {
    let d = Rigd::start(SIM);
    let mut c = d.client("t");
    let o = c.open();
    let dev = o.id();
    for (kind, host) in [
        (MemoryKind::Device, false),
        (MemoryKind::Pinned, true),
        (MemoryKind::Mapped, true),
    ] {
        let (r, fds) = c.call_fds(
            Request::Alloc {
                device: dev,
                memory: kind,
                bytes: 10000,
            },
            &[],
        );
        let Response::Allocated {
            region,
            gpu_address,
            host: h,
        } = r
        else {
            panic!("{r:?}")
        };
        assert_eq!(gpu_address % 4096, 0);
        assert_eq!(h.is_some(), host);
        assert_eq!(fds.len(), usize::from(host));
        if let Some(h) = h {
            let m = SharedRegion::from_fd(fds.into_iter().next().unwrap()).unwrap();
            assert!(m.contains(h.offset, 10000));
            m.store_u64(0, 42, Ordering::Release);
        }
        assert_eq!(
            c.call(Request::Free {
                device: dev,
                region
            }),
            Response::Done
        );
        assert_eq!(
            code(&c.call(Request::Free {
                device: dev,
                region
            })),
            Some(ErrorCode::NoSuchRegion)
        );
    }
    for bytes in [0, 3] {
        let r = c.call(Request::Alloc {
            device: dev,
            memory: MemoryKind::Device,
            bytes,
        });
        assert_eq!(code(&r), Some(ErrorCode::InvalidArgument), "{bytes}");
    }
    let r = c.call(Request::Alloc {
        device: DeviceId(999),
        memory: MemoryKind::Device,
        bytes: 4096,
    });
    assert_eq!(code(&r), Some(ErrorCode::NoSuchDevice));
    // More than the simulated GPU has.
    let r = c.call(Request::Alloc {
        device: dev,
        memory: MemoryKind::Device,
        bytes: 4 << 30,
    });
    assert!(matches!(r, Response::NoMemory { .. }), "{r:?}");

    // Host memory: a memfd of the client's.
    let host = SharedRegion::create("client", 3 * 4096).unwrap();
    let fd = host.dup_fd().unwrap();
    let (r, _) = c.call_fds(
        Request::MapHost {
            device: dev,
            bytes: 4096,
            offset: 4096,
        },
        &[fd.as_fd()],
    );
    let Response::Mapped {
        region,
        gpu_address,
    } = r
    else {
        panic!("{r:?}")
    };
    assert_eq!(gpu_address % 4096, 0);
    let (r, _) = c.call_fds(
        Request::MapHost {
            device: dev,
            bytes: 4096,
            offset: 100,
        },
        &[fd.as_fd()],
    );
    assert_eq!(code(&r), Some(ErrorCode::InvalidArgument));
    let (r, _) = c.call_fds(
        Request::MapHost {
            device: dev,
            bytes: 8192,
            offset: 8192,
        },
        &[fd.as_fd()],
    );
    assert!(matches!(r, Response::Never { .. }), "{r:?}");
    assert_eq!(
        c.call(Request::Free {
            device: dev,
            region
        }),
        Response::Done
    );
    // A descriptor missing where one is needed breaks nothing: a typed error answers.
    let r = c.try_call(Request::MapHost {
        device: dev,
        bytes: 4096,
        offset: 0,
    });
    assert!(r.is_err() || code(r.as_ref().unwrap()).is_some());
}

#[test]
fn grow_stop_close_and_status() {
    let d = Rigd::start(SIM);
    let mut c = d.client("t");
    let o = c.open();
    let dev = o.id();
    let installed = Generations::default();
    // Fits: nothing grows.
    let (r, fds) = c.call_fds(
        Request::Grow {
            device: dev,
            compute_bytes: 100,
            copy_bytes: 100,
            segment_bytes: 100,
            installed,
        },
        &[],
    );
    let Response::Grown(g) = r else {
        panic!("{r:?}")
    };
    assert!(g.compute.is_none() && g.copy.is_none() && g.args.is_none() && fds.is_empty());
    // Too big for the first rings: new queues on new rings and a new segment.
    let (r, fds) = c.call_fds(
        Request::Grow {
            device: dev,
            compute_bytes: 100_000,
            copy_bytes: 40_000,
            segment_bytes: 40_000,
            installed,
        },
        &[],
    );
    let Response::Grown(g) = r else {
        panic!("{r:?}")
    };
    let q = g.compute.expect("compute grew");
    assert_eq!(q.generation, 1);
    assert_eq!(q.ring.host.bytes, 256 << 10);
    assert_eq!(g.copy.expect("copy grew").generation, 1);
    assert_eq!(g.args.expect("segment grew").generation, 1);
    assert!(!fds.is_empty());
    // Past the largest ring: never.
    let r = c.call(Request::Grow {
        device: dev,
        compute_bytes: 0,
        copy_bytes: 1 << 40,
        segment_bytes: 0,
        installed,
    });
    assert!(matches!(r, Response::Never { .. }), "{r:?}");
    // Installing generation 1 retires generation 0.
    let installed = Generations {
        compute: 1,
        copy: 1,
        args: 1,
    };
    let Response::Grown(_) = c.call(Request::Grow {
        device: dev,
        compute_bytes: 0,
        copy_bytes: 0,
        segment_bytes: 0,
        installed,
    }) else {
        panic!()
    };
    let Response::Device(rep) = c.call(Request::ShowDevice { device: dev }) else {
        panic!()
    };
    assert!(
        rep.rings.iter().all(|r| r.generation == 1),
        "{:?}",
        rep.rings
    );

    // Stop: the word reads the last value; later work requests are refused.
    assert_eq!(
        c.call(Request::StopDevice {
            device: dev,
            last: 17,
            fault: None
        }),
        Response::Done
    );
    let word = o.region(o.msg.word.memory.host.fd);
    assert_eq!(
        word.load_u64(o.msg.word.memory.host.offset as usize, Ordering::Acquire),
        17
    );
    let r = c.call(Request::Alloc {
        device: dev,
        memory: MemoryKind::Device,
        bytes: 4096,
    });
    assert_eq!(code(&r), Some(ErrorCode::Stopped));
    assert_eq!(
        code(&c.call(Request::StopDevice {
            device: dev,
            last: 17,
            fault: None
        })),
        Some(ErrorCode::Stopped)
    );
    let Response::Status(s) = c.call(Request::DeviceStatus { device: dev }) else {
        panic!()
    };
    assert!(s.stopped && s.lost.is_none() && s.reached == 17);
    assert_eq!(c.call(Request::CloseDevice { device: dev }), Response::Done);
    assert_eq!(
        code(&c.call(Request::CloseDevice { device: dev })),
        Some(ErrorCode::NoSuchDevice)
    );
    assert_eq!(
        code(&c.call(Request::Facts { device: dev })),
        Some(ErrorCode::NoSuchDevice)
    );
}

/// A stop with a reason is the client's verdict that it lost the device (a consumer of a lost
/// producer): rigd shows the device lost with that reason, raises its lost flag and writes
/// the last value.
#[test]
fn a_stop_with_a_reason_loses_the_device_with_it() {
    let d = Rigd::start(SIM);
    let mut c = d.client("consumer");
    let o = c.open();
    let why = "AMD:0 lost: AMD:0 lost: memory fault";
    assert_eq!(
        c.call(Request::StopDevice {
            device: o.id(),
            last: 5,
            fault: Some(why.into()),
        }),
        Response::Done
    );
    let Response::Status(s) = c.call(Request::DeviceStatus { device: o.id() }) else {
        panic!()
    };
    let lost = s.lost.clone().unwrap();
    assert_eq!(lost.kind, rig_proto::FaultKind::StoppedByClient);
    assert_eq!(lost.detail, why);
    assert!(s.stopped && s.reached == 5, "{s:?}");
    let lost = o.region(o.msg.lost.fd);
    assert_ne!(
        lost.load_u32(o.msg.lost.offset as usize, Ordering::Acquire),
        0
    );
    let Response::Device(rep) = c.call(Request::ShowDevice { device: o.id() }) else {
        panic!()
    };
    assert_eq!(rep.info.lost.map(|f| f.detail).as_deref(), Some(why));

    // A reason past its bound is refused, naming it, before anything is done: rigd would
    // hold it uncharged as long as the device.
    let o = c.open();
    let Response::Error(e) = c.call(Request::StopDevice {
        device: o.id(),
        last: 1,
        fault: Some("é".repeat(4 << 20)),
    }) else {
        panic!("a frame-sized reason was taken")
    };
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(e.message.contains("MOST_STOP_REASON"), "{}", e.message);
    let Response::Status(s) = c.call(Request::DeviceStatus { device: o.id() }) else {
        panic!()
    };
    assert!(!s.stopped && s.lost.is_none(), "{s:?}");
}

#[test]
fn inspection_queries() {
    let d = Rigd::start(SIM);
    let mut a = d.client("alpha");
    let o = a.open();
    let Response::Allocated { .. } = a.call(Request::Alloc {
        device: o.id(),
        memory: MemoryKind::Device,
        bytes: 1 << 20,
    }) else {
        panic!()
    };
    let mut ctl = d.client("rigctl");
    let Response::Clients(cs) = ctl.call(Request::ListClients) else {
        panic!()
    };
    let alpha = cs
        .iter()
        .find(|c| c.program == "alpha")
        .expect("alpha listed");
    assert_eq!(alpha.pid, std::process::id());
    assert_eq!(alpha.devices, [o.id()]);
    assert!(alpha.bytes >= 1 << 20);
    let Response::Devices(ds) = ctl.call(Request::ListDevices) else {
        panic!()
    };
    assert_eq!(ds.len(), 1);
    assert_eq!(ds[0].memory.device, 1 << 20);
    assert!(
        ds[0].memory.pinned > 0,
        "rings, segment and control page are pinned"
    );
    let Response::Device(r) = ctl.call(Request::ShowDevice { device: o.id() }) else {
        panic!()
    };
    assert_eq!(r.rings.len(), 2);
    assert_eq!(r.regions, 1);
    assert_eq!(
        code(&ctl.call(Request::ShowDevice {
            device: DeviceId(12345)
        })),
        Some(ErrorCode::NoSuchDevice)
    );
}

#[test]
fn quotas() {
    let d = Rigd::start(&format!(
        "[limits]\ndevices = 2\nmemory_bytes = 2097152\nobjects = 3\n\n{SIM}"
    ));
    let mut c = d.client("t");
    let o = c.open();
    let _o2 = c.open();
    let r = c.call(Request::OpenDevice { gpu: 0 });
    assert_eq!(code(&r), Some(ErrorCode::Quota), "{r:?}");
    let r = c.call(Request::Alloc {
        device: o.id(),
        memory: MemoryKind::Device,
        bytes: 4 << 20,
    });
    assert!(
        matches!(
            r,
            Response::NoMemory {
                shortage: Shortage::Quota,
                ..
            }
        ),
        "{r:?}"
    );
    for _ in 0..3 {
        let r = c.call(Request::Alloc {
            device: o.id(),
            memory: MemoryKind::Device,
            bytes: 4096,
        });
        assert!(matches!(r, Response::Allocated { .. }), "{r:?}");
    }
    let r = c.call(Request::Alloc {
        device: o.id(),
        memory: MemoryKind::Device,
        bytes: 4096,
    });
    assert_eq!(code(&r), Some(ErrorCode::Quota), "{r:?}");
}

#[test]
fn images_and_entries() {
    let d = Rigd::start(SIM);
    let mut c = d.client("t");
    let o = c.open();
    let dev = o.id();
    let r = c.call(Request::LoadImage {
        device: dev,
        code_object: b"not elf".to_vec(),
    });
    let Response::Error(e) = r else {
        panic!("{r:?}")
    };
    assert_eq!(e.code, ErrorCode::ImageRefused);
    assert!(e.message.starts_with("not a code object"), "{}", e.message);
    assert_eq!(
        code(&c.call(Request::ResolveEntry {
            device: dev,
            image: ImageId(5),
            name: "x".into()
        })),
        Some(ErrorCode::NoSuchImage)
    );

    let src = "__kernel void add(__global int* a, int b) { a[__builtin_amdgcn_workitem_id_x()] += b; }\n\
               __kernel void deep(__global int* a, int n) { volatile int t[64]; for (int i = 0; i < 64; i++) t[i] = a[i] + n; a[0] = t[n & 63]; }\n";
    let Some(co) = rig_testkit::kernels::compile("kernel", src, "gfx1100") else {
        return;
    };
    let r = c.call(Request::LoadImage {
        device: dev,
        code_object: co,
    });
    let Response::ImageLoaded {
        image,
        region,
        gpu_address,
        size,
        kernels,
    } = r
    else {
        panic!("{r:?}")
    };
    assert_eq!(gpu_address % 4096, 0);
    assert!(size >= 4096);
    assert!(kernels.contains(&"add".to_string()));
    let Response::Entry(e) = c.call(Request::ResolveEntry {
        device: dev,
        image,
        name: "add".into(),
    }) else {
        panic!()
    };
    assert!(e.code >= gpu_address && e.code < gpu_address + size);
    assert_eq!(e.params, 12);
    assert!(!e.wave64);
    assert!(e.scratch.is_none());
    let Response::Entry(e) = c.call(Request::ResolveEntry {
        device: dev,
        image,
        name: "deep".into(),
    }) else {
        panic!()
    };
    if e.private_segment > 0 {
        let s = e.scratch.expect("a PM4 dispatch names the grown scratch");
        assert!(s.bytes >= u64::from(s.wave_bytes) * u64::from(s.waves));
    }
    assert_eq!(
        c.call(Request::ResolveEntry {
            device: dev,
            image,
            name: "nope".into()
        }),
        Response::Absent
    );
    assert_eq!(
        c.call(Request::Prepare {
            device: dev,
            image,
            name: "nope".into()
        }),
        Response::Done
    );
    assert_eq!(
        c.call(Request::Unload { device: dev, image }),
        Response::Done
    );
    assert_eq!(
        code(&c.call(Request::Unload { device: dev, image })),
        Some(ErrorCode::NoSuchImage)
    );
    assert_eq!(
        c.call(Request::Free {
            device: dev,
            region
        }),
        Response::Done
    );

    // Another processor's code object is refused with rigd's message.
    if let Some(other) = rig_testkit::kernels::compile("kernel", src, "gfx942") {
        let Response::Error(e) = c.call(Request::LoadImage {
            device: dev,
            code_object: other,
        }) else {
            panic!()
        };
        assert_eq!(e.code, ErrorCode::ImageRefused);
        assert_eq!(e.message, "a code object for gfx942; the GPU is gfx1100");
    }
    // Too much LDS cannot be built here: clang itself refuses more LDS than the GPU has, so
    // that refusal is covered by rig_amd::code_object's own tests of `check`.
}

#[test]
fn unknown_ids_of_every_kind() {
    let d = Rigd::start(SIM);
    let mut c = d.client("t");
    let o = c.open();
    assert_eq!(
        code(&c.call(Request::Free {
            device: o.id(),
            region: RegionId(77)
        })),
        Some(ErrorCode::NoSuchRegion)
    );
    assert_eq!(
        code(&c.call(Request::Unload {
            device: o.id(),
            image: ImageId(77)
        })),
        Some(ErrorCode::NoSuchImage)
    );
    assert_eq!(
        code(&c.call(Request::SampleClock {
            device: DeviceId(77)
        })),
        Some(ErrorCode::NoSuchDevice)
    );
    assert_eq!(
        code(&c.call(Request::DeviceStatus {
            device: DeviceId(77)
        })),
        Some(ErrorCode::NoSuchDevice)
    );
    assert!(holds_within(Duration::from_millis(10), || true));
}

#[test]
fn a_gpu_of_several_dies_gets_an_aql_queue() {
    let d = Rigd::start(
        "[access]\nany = true\n[[sim]]\nprocessor = \"gfx942\"\nmemory_bytes = 1073741824\n[[sim]]\nprocessor = \"gfx1201\"\n",
    );
    let mut c = d.client("t");
    let Response::Gpus(g) = c.call(Request::ListGpus) else {
        panic!()
    };
    assert_eq!(
        g.iter().map(|g| g.arch.as_str()).collect::<Vec<_>>(),
        ["gfx942", "gfx1201"]
    );
    let o = c.open();
    assert_eq!(o.msg.compute.kind, QueueKind::Aql);
    assert_eq!(o.msg.facts.dies, 8);
    assert_eq!(o.msg.facts.wave_size, 64);
    assert_eq!(o.msg.facts.most_ring.copy, 16 << 20);
    let (r, _) = c.call_fds(Request::OpenDevice { gpu: 1 }, &[]);
    let Response::DeviceOpened(o2) = r else {
        panic!("{r:?}")
    };
    assert_eq!(o2.compute.kind, QueueKind::Pm4);
    assert_eq!(o2.facts.arch, "gfx1201");
}
