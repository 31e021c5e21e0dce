//! Every message survives encode then decode unchanged, and every variant is exercised.

use proptest::collection::vec;
use proptest::option::of;
use proptest::prelude::*;
use rig_proto::frame::{decode, encode};
use rig_proto::*;

fn text() -> impl Strategy<Value = String> {
    // Short strings with non-ASCII, as program names and messages may hold.
    "[a-zA-Z0-9 :._é\u{1F600}-]{0,24}"
}

fn share() -> impl Strategy<Value = Share> {
    (0u32..8, any::<u64>(), any::<u64>()).prop_map(|(fd, offset, bytes)| Share {
        fd: FdIndex(fd),
        offset,
        bytes,
    })
}

fn gpu_share() -> impl Strategy<Value = GpuShare> {
    (share(), any::<u64>()).prop_map(|(host, gpu_address)| GpuShare { host, gpu_address })
}

fn queue_kind() -> impl Strategy<Value = QueueKind> {
    prop_oneof![
        Just(QueueKind::Pm4),
        Just(QueueKind::Aql),
        Just(QueueKind::Sdma)
    ]
}

fn fault_kind() -> impl Strategy<Value = FaultKind> {
    prop_oneof![
        Just(FaultKind::MemoryFault),
        Just(FaultKind::IllegalInstruction),
        Just(FaultKind::UnsupportedInstruction),
        Just(FaultKind::Trap),
        Just(FaultKind::BadPacket),
        Just(FaultKind::Hang),
        Just(FaultKind::Reset),
        Just(FaultKind::StoppedByClient),
        Just(FaultKind::StoppedByAdministrator),
        Just(FaultKind::Internal),
        Just(FaultKind::Producer),
        Just(FaultKind::Disconnected),
        Just(FaultKind::Unstamped),
    ]
}

fn fault() -> impl Strategy<Value = Fault> {
    (
        fault_kind(),
        of((queue_kind(), any::<u32>())),
        of(any::<u32>()),
        of(any::<u64>()),
        of(any::<bool>()),
        of(any::<u64>()),
        of(any::<u64>()),
        text(),
    )
        .prop_map(
            |(kind, queue, vmid, address, write, pc, position, detail)| Fault {
                kind,
                queue: queue.map(|(kind, index)| QueueRef { kind, index }),
                vmid,
                address,
                write,
                pc,
                position,
                detail,
            },
        )
}

fn queue() -> impl Strategy<Value = QueueShare> {
    (
        queue_kind(),
        any::<u32>(),
        gpu_share(),
        gpu_share(),
        gpu_share(),
        share(),
    )
        .prop_map(
            |(kind, generation, ring, read, write, doorbell)| QueueShare {
                kind,
                generation,
                ring,
                read,
                write,
                doorbell,
            },
        )
}

fn segment() -> impl Strategy<Value = SegmentShare> {
    (any::<u32>(), gpu_share()).prop_map(|(generation, memory)| SegmentShare { generation, memory })
}

fn version() -> impl Strategy<Value = IpVersion> {
    any::<(u8, u8, u8)>().prop_map(|(major, minor, stepping)| IpVersion {
        major,
        minor,
        stepping,
    })
}

fn facts() -> impl Strategy<Value = Facts> {
    let a = (
        text(),
        any::<u64>(),
        vec(text(), 0..3),
        of(any::<u32>()),
        any::<(bool, bool, bool)>(),
        of(any::<u64>()),
        any::<(bool, bool)>(),
        any::<u64>(),
        of(any::<u64>()),
        any::<u64>(),
        of(text()),
    );
    let b = (
        version(),
        version(),
        any::<u32>(),
        queue_kind(),
        any::<(u32, u32, u32, u32)>(),
        vec(vec(any::<u32>(), 0..3), 0..3),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            of(any::<bool>()),
        ),
    );
    (a, b).prop_map(
        |(
            (
                arch,
                budget,
                queues,
                copy_engine,
                (stores, hosts, may_block),
                hang_ms,
                (maps_host, host_addresses),
                alignment,
                cache_bytes,
                word,
                bus,
            ),
            (
                gc,
                sdma,
                mec,
                compute,
                (lds_bytes, wave_size, waves_per_cu, dies),
                wgps,
                (linear_copy_bytes, clock_hz, rc, rk, apart),
            ),
        )| Facts {
            arch,
            budget,
            queues,
            copy_engine,
            completion: Completion::Store,
            waits: Waits { stores, hosts },
            may_block,
            hang_ms,
            maps_host,
            host_addresses,
            alignment,
            cache_bytes,
            word,
            bus,
            gc,
            sdma,
            mec,
            compute,
            lds_bytes,
            wave_size,
            waves_per_cu,
            dies,
            wgps,
            linear_copy_bytes,
            clock_hz,
            clock: match apart {
                Some(apart) => ClockSource::Source { apart },
                None => ClockSource::RoundTrip,
            },
            most_ring: RingLimits {
                compute: rc,
                copy: rk,
            },
        },
    )
}

fn device_opened() -> impl Strategy<Value = DeviceOpened> {
    (
        any::<u64>(),
        facts(),
        queue(),
        queue(),
        segment(),
        (gpu_share(), any::<u64>()),
        share(),
        (0u32..8, 1u32..),
        share(),
    )
        .prop_map(
            |(d, facts, compute, copy, args, (word, first), submitted, (irq, context), lost)| {
                DeviceOpened {
                    device: DeviceId(d),
                    facts,
                    compute,
                    copy,
                    args,
                    word: WordShare {
                        memory: word,
                        first,
                    },
                    submitted,
                    interrupt: FdIndex(irq),
                    lost,
                    context,
                }
            },
        )
}

fn hidden_layout() -> impl Strategy<Value = rig_amd::kernarg::HiddenLayout> {
    let three = || any::<[Option<u32>; 3]>();
    (
        three(),
        three(),
        three(),
        three(),
        of(any::<u32>()),
        of(any::<u32>()),
    )
        .prop_map(
            |(block_count, group_size, remainder, global_offset, grid_dims, dynamic_lds_size)| {
                rig_amd::kernarg::HiddenLayout {
                    block_count,
                    group_size,
                    remainder,
                    global_offset,
                    grid_dims,
                    dynamic_lds_size,
                }
            },
        )
}

fn entry() -> impl Strategy<Value = Entry> {
    let hidden = hidden_layout();
    let scratch = of(any::<(u64, u64, u32, u32)>().prop_map(
        |(gpu_address, bytes, wave_bytes, waves)| Scratch {
            gpu_address,
            bytes,
            wave_bytes,
            waves,
        },
    ));
    (
        any::<u64>(),
        any::<(u32, u32, u32, u32, u32, u32)>(),
        any::<bool>(),
        vec(any::<u8>(), 64),
        hidden,
        scratch,
    )
        .prop_map(
            |(
                code,
                (params, max_threads, kernarg_size, kernarg_align, group_segment, private_segment),
                wave64,
                d,
                hidden,
                scratch,
            )| Entry {
                code,
                params,
                max_threads,
                kernarg_size,
                kernarg_align,
                group_segment,
                private_segment,
                wave64,
                descriptor: Descriptor(d.try_into().unwrap()),
                hidden,
                scratch,
            },
        )
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    use ErrorCode::*;
    prop_oneof![
        Just(BadRequest),
        Just(VersionMismatch),
        Just(PermissionDenied),
        Just(NoSuchGpu),
        Just(NoSuchDevice),
        Just(NoSuchRegion),
        Just(NoSuchImage),
        Just(InvalidArgument),
        Just(Quota),
        Just(ImageRefused),
        Just(EntryRefused),
        Just(Lost),
        Just(Stopped),
        Just(Fault),
        Just(Internal),
    ]
}

fn error_reply() -> impl Strategy<Value = ErrorReply> {
    (error_code(), text()).prop_map(|(code, message)| ErrorReply { code, message })
}

fn memory_kind() -> impl Strategy<Value = MemoryKind> {
    prop_oneof![
        Just(MemoryKind::Device),
        Just(MemoryKind::Pinned),
        Just(MemoryKind::Mapped)
    ]
}

fn memory_held() -> impl Strategy<Value = MemoryHeld> {
    any::<(u64, u64, u64, u64)>().prop_map(|(device, pinned, mapped, host)| MemoryHeld {
        device,
        pinned,
        mapped,
        host,
    })
}

fn device_info() -> impl Strategy<Value = DeviceInfo> {
    (
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        memory_held(),
        of(fault()),
    )
        .prop_map(|(d, gpu, owner_pid, memory, lost)| DeviceInfo {
            device: DeviceId(d),
            gpu,
            owner_pid,
            memory,
            lost,
        })
}

fn gpu_info() -> impl Strategy<Value = GpuInfo> {
    let path = prop_oneof![
        Just(PathKind::Sim),
        Just(PathKind::Kfd),
        Just(PathKind::Vfio)
    ];
    (
        any::<u32>(),
        text(),
        text(),
        path,
        of(text()),
        any::<u64>(),
        any::<bool>(),
        of(text()),
    )
        .prop_map(
            |(index, name, arch, path, bus, budget, simulated, unavailable)| GpuInfo {
                index,
                name,
                arch,
                path,
                bus,
                budget,
                simulated,
                unavailable,
            },
        )
}

fn request() -> impl Strategy<Value = Request> {
    let dev = any::<u64>().prop_map(DeviceId);
    let img = any::<u64>().prop_map(ImageId);
    let gens = any::<(u32, u32, u32)>().prop_map(|(compute, copy, args)| Generations {
        compute,
        copy,
        args,
    });
    prop_oneof![
        Just(Request::ListGpus),
        any::<u32>().prop_map(|gpu| Request::OpenDevice { gpu }),
        dev.clone()
            .prop_map(|device| Request::CloseDevice { device }),
        (dev.clone(), memory_kind(), any::<u64>()).prop_map(|(device, memory, bytes)| {
            Request::Alloc {
                device,
                memory,
                bytes,
            }
        }),
        (dev.clone(), any::<u64>()).prop_map(|(device, r)| Request::Free {
            device,
            region: RegionId(r)
        }),
        (dev.clone(), any::<u64>(), any::<u64>()).prop_map(|(device, bytes, offset)| {
            Request::MapHost {
                device,
                bytes,
                offset,
            }
        }),
        (dev.clone(), vec(any::<u8>(), 0..300)).prop_map(|(device, code_object)| {
            Request::LoadImage {
                device,
                code_object,
            }
        }),
        (dev.clone(), img.clone(), text()).prop_map(|(device, image, name)| {
            Request::ResolveEntry {
                device,
                image,
                name,
            }
        }),
        (dev.clone(), img.clone(), text()).prop_map(|(device, image, name)| Request::Prepare {
            device,
            image,
            name
        }),
        (dev.clone(), img).prop_map(|(device, image)| Request::Unload { device, image }),
        (dev.clone(), any::<(u64, u64, u64)>(), gens).prop_map(|(device, (c, k, s), installed)| {
            Request::Grow {
                device,
                compute_bytes: c,
                copy_bytes: k,
                segment_bytes: s,
                installed,
            }
        }),
        dev.clone().prop_map(|device| Request::Facts { device }),
        dev.clone()
            .prop_map(|device| Request::SampleClock { device }),
        (dev.clone(), any::<u64>(), of(text())).prop_map(|(device, last, fault)| {
            Request::StopDevice {
                device,
                last,
                fault,
            }
        }),
        dev.clone()
            .prop_map(|device| Request::DeviceStatus { device }),
        Just(Request::ListClients),
        Just(Request::ListDevices),
        dev.clone()
            .prop_map(|device| Request::ShowDevice { device }),
        (dev.clone(), dev).prop_map(|(device, peer)| Request::MapPeerWord { device, peer }),
        Just(Request::Ping),
        grant_spec().prop_map(|s| Request::Grant(Box::new(s))),
        text().prop_map(|id| Request::Revoke { id }),
        Just(Request::Grants),
    ]
}

fn grant_spec() -> impl Strategy<Value = GrantSpec> {
    (
        text(),
        vec(any::<(u32, u64)>(), 0..3),
        any::<u32>(),
        (
            text(),
            vec(text(), 0..3),
            of(text()),
            of(text()),
            of(text()),
        ),
    )
        .prop_map(
            |(id, gpus, devices, (resource, ids, namespace, pod, container))| GrantSpec {
                id,
                gpus: gpus
                    .into_iter()
                    .map(|(gpu, bytes)| GrantGpu { gpu, bytes })
                    .collect(),
                devices,
                holder: Holder {
                    resource,
                    devices: ids,
                    namespace,
                    pod,
                    container,
                },
            },
        )
}

fn response() -> impl Strategy<Value = Response> {
    let shortage = prop_oneof![
        Just(Shortage::Gpu),
        Just(Shortage::Host),
        Just(Shortage::Quota)
    ];
    let grown = (of(queue()), of(queue()), of(segment())).prop_map(|(compute, copy, args)| Grown {
        compute,
        copy,
        args,
    });
    let client = (
        any::<(u32, u32, u32)>(),
        text(),
        vec(any::<u64>(), 0..3),
        any::<u64>(),
        of(text()),
        of((text(), of(text()))),
    )
        .prop_map(
            |((pid, uid, gid), program, devices, bytes, grant, pod)| ClientInfo {
                pid,
                uid,
                gid,
                program,
                devices: devices.into_iter().map(DeviceId).collect(),
                bytes,
                grant,
                pod: pod.map(|(uid, container)| PodOf { uid, container }),
            },
        );
    let ring = (text(), queue_kind(), any::<u32>(), any::<(u64, u64, u64)>()).prop_map(
        |(queue, kind, generation, (bytes, read, write))| RingState {
            queue,
            kind,
            generation,
            bytes,
            read,
            write,
        },
    );
    let report = (
        device_info(),
        facts(),
        vec(ring, 0..3),
        any::<(u32, u32, u64, u64)>(),
        vec(fault(), 0..3),
    )
        .prop_map(
            |(info, facts, rings, (images, regions, submitted, reached), faults)| DeviceReport {
                info,
                facts,
                rings,
                images,
                regions,
                submitted,
                reached,
                faults,
            },
        );
    prop_oneof![
        Just(Response::Done),
        vec(gpu_info(), 0..3).prop_map(Response::Gpus),
        device_opened().prop_map(|d| Response::DeviceOpened(Box::new(d))),
        (any::<u64>(), any::<u64>(), of(share())).prop_map(|(r, gpu_address, host)| {
            Response::Allocated {
                region: RegionId(r),
                gpu_address,
                host,
            }
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(r, gpu_address)| Response::Mapped {
            region: RegionId(r),
            gpu_address
        }),
        (
            any::<u64>(),
            shortage,
            of((text(), any::<u64>(), any::<u64>()))
        )
            .prop_map(|(bytes, shortage, limit)| Response::NoMemory {
                bytes,
                shortage,
                limit: limit.map(|(name, value, missing)| Limit {
                    name,
                    value,
                    missing
                }),
            }),
        text().prop_map(|reason| Response::Never { reason }),
        (any::<(u64, u64, u64, u64)>(), vec(text(), 0..4)).prop_map(
            |((i, r, gpu_address, size), kernels)| Response::ImageLoaded {
                image: ImageId(i),
                region: RegionId(r),
                gpu_address,
                size,
                kernels,
            }
        ),
        entry().prop_map(|e| Response::Entry(Box::new(e))),
        Just(Response::Absent),
        grown.prop_map(Response::Grown),
        facts().prop_map(|f| Response::Facts(Box::new(f))),
        any::<(u64, u64, u64, u64)>().prop_map(|(gpu, host_before_ns, host_after_ns, gap_ns)| {
            Response::Clock(ClockSample {
                gpu,
                host_before_ns,
                host_after_ns,
                gap_ns,
            })
        }),
        (of(fault()), any::<bool>(), any::<u64>(), any::<u64>()).prop_map(
            |(lost, stopped, submitted, reached)| Response::Status(DeviceStatus {
                lost,
                stopped,
                submitted,
                reached
            })
        ),
        vec(client, 0..3).prop_map(Response::Clients),
        vec(device_info(), 0..3).prop_map(Response::Devices),
        report.prop_map(|r| Response::Device(Box::new(r))),
        error_reply().prop_map(Response::Error),
        any::<u64>().prop_map(|gpu_address| Response::PeerWord { gpu_address }),
        Just(Response::Pong),
        text().prop_map(|socket| Response::Granted { socket }),
        vec(
            (
                grant_spec(),
                text(),
                any::<(u64, u32, u32)>(),
                vec(any::<u64>(), 0..3)
            ),
            0..3
        )
        .prop_map(|gs| Response::Grants(
            gs.into_iter()
                .map(
                    |(spec, socket, (age_ms, connections, devices), gpu_bytes)| GrantInfo {
                        spec,
                        socket,
                        age_ms,
                        connections,
                        devices,
                        gpu_bytes,
                    }
                )
                .collect()
        )),
    ]
}

fn hello_reply() -> impl Strategy<Value = HelloReply> {
    prop_oneof![
        (any::<u32>(), text(), any::<u32>()).prop_map(
            |(version, daemon, pid)| HelloReply::Welcome(Welcome {
                version,
                daemon,
                pid
            })
        ),
        (any::<u32>(), error_reply())
            .prop_map(|(daemon, error)| HelloReply::Refused { daemon, error }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn request_round_trips(r in request()) {
        let back: Request = decode(&encode(&r).unwrap()).unwrap();
        prop_assert_eq!(back, r);
    }

    #[test]
    fn response_round_trips(r in response()) {
        let bytes = encode(&r).unwrap();
        let back: Response = decode(&bytes).unwrap();
        prop_assert_eq!(&back, &r);
        prop_assert_eq!(back.fds_needed(), r.fds_needed());
    }

    #[test]
    fn hello_round_trips(magic in any::<u64>(), version in any::<u32>(), program in text()) {
        let h = Hello { magic, version, program };
        let back: Hello = decode(&encode(&h).unwrap()).unwrap();
        prop_assert_eq!(back, h);
    }

    #[test]
    fn hello_reply_round_trips(r in hello_reply()) {
        let back: HelloReply = decode(&encode(&r).unwrap()).unwrap();
        prop_assert_eq!(back, r);
    }

    /// A strict prefix of a message never decodes as the message.
    #[test]
    fn truncated_messages_are_errors(r in response(), cut in any::<prop::sample::Index>()) {
        let bytes = encode(&r).unwrap();
        let cut = cut.index(bytes.len());
        prop_assert!(decode::<Response>(&bytes[..cut]).is_err());
    }
}

/// One example of each variant, so an added variant without a round-trip case fails to
/// compile here (the matches are exhaustive).
#[test]
fn every_variant_has_a_name_and_round_trips() {
    let requests = [
        Request::ListGpus,
        Request::OpenDevice { gpu: 0 },
        Request::CloseDevice {
            device: DeviceId(1),
        },
        Request::Alloc {
            device: DeviceId(1),
            memory: MemoryKind::Pinned,
            bytes: 4096,
        },
        Request::Free {
            device: DeviceId(1),
            region: RegionId(2),
        },
        Request::MapHost {
            device: DeviceId(1),
            bytes: 100,
            offset: 4096,
        },
        Request::LoadImage {
            device: DeviceId(1),
            code_object: vec![0x7f, b'E', b'L', b'F'],
        },
        Request::ResolveEntry {
            device: DeviceId(1),
            image: ImageId(3),
            name: "add".into(),
        },
        Request::Prepare {
            device: DeviceId(1),
            image: ImageId(3),
            name: "add".into(),
        },
        Request::Unload {
            device: DeviceId(1),
            image: ImageId(3),
        },
        Request::Grow {
            device: DeviceId(1),
            compute_bytes: 1 << 20,
            copy_bytes: 0,
            segment_bytes: 0,
            installed: Generations::default(),
        },
        Request::Facts {
            device: DeviceId(1),
        },
        Request::SampleClock {
            device: DeviceId(1),
        },
        Request::StopDevice {
            device: DeviceId(1),
            last: 7,
            fault: Some("page fault".into()),
        },
        Request::DeviceStatus {
            device: DeviceId(1),
        },
        Request::ListClients,
        Request::ListDevices,
        Request::ShowDevice {
            device: DeviceId(1),
        },
        Request::MapPeerWord {
            device: DeviceId(1),
            peer: DeviceId(2),
        },
        Request::DaemonStatus,
        Request::GpuStatus,
        Request::ListProcesses,
        Request::AdminStop {
            device: DeviceId(1),
        },
        Request::Evict { pid: 7 },
        Request::Ping,
        Request::Grant(Box::new(GrantSpec {
            id: "a".into(),
            gpus: Vec::new(),
            devices: 1,
            holder: Holder::default(),
        })),
        Request::Revoke { id: "a".into() },
        Request::Grants,
    ];
    let mut names = std::collections::BTreeSet::new();
    for r in &requests {
        let seen = match r {
            Request::ListGpus
            | Request::OpenDevice { .. }
            | Request::CloseDevice { .. }
            | Request::Alloc { .. }
            | Request::Free { .. }
            | Request::LoadImage { .. }
            | Request::ResolveEntry { .. }
            | Request::Prepare { .. }
            | Request::Unload { .. }
            | Request::Grow { .. }
            | Request::Facts { .. }
            | Request::SampleClock { .. }
            | Request::StopDevice { .. }
            | Request::DeviceStatus { .. }
            | Request::ListClients
            | Request::ListDevices
            | Request::ShowDevice { .. }
            | Request::MapPeerWord { .. }
            | Request::DaemonStatus
            | Request::GpuStatus
            | Request::ListProcesses
            | Request::AdminStop { .. }
            | Request::Evict { .. }
            | Request::Ping
            | Request::Grant(_)
            | Request::Revoke { .. }
            | Request::Grants => 0,
            Request::MapHost { .. } => 1,
        };
        assert_eq!(r.fds_needed(), seen, "{}", r.name());
        assert!(names.insert(r.name()), "duplicate name {}", r.name());
        let back: Request = decode(&encode(r).unwrap()).unwrap();
        assert_eq!(&back, r);
    }
    assert_eq!(names.len(), requests.len());
}

#[test]
fn a_route_names_the_device_a_request_acts_on_and_admins_block() {
    let d = DeviceId(9);
    let on = |r: Request| r.route().device;
    assert_eq!(
        on(Request::Alloc {
            device: d,
            memory: MemoryKind::Device,
            bytes: 4
        }),
        Some(d)
    );
    assert_eq!(
        on(Request::MapPeerWord {
            device: d,
            peer: DeviceId(1)
        }),
        Some(d)
    );
    assert_eq!(on(Request::ShowDevice { device: d }), None);
    assert_eq!(on(Request::CloseDevice { device: d }), None);
    let ping = Request::Ping.route();
    assert!(!ping.blocks && !ping.admin && ping.device.is_none() && ping.fds == 0);
    for r in [
        Request::Evict { pid: 1 },
        Request::DaemonStatus,
        Request::Grants,
        Request::Revoke { id: "a".into() },
    ] {
        let route = r.route();
        assert!(route.admin && route.blocks, "{route:?}");
    }
    let load = Request::LoadImage {
        device: d,
        code_object: Vec::new(),
    };
    assert!(load.route().blocks && !Request::ListGpus.route().blocks);
}

#[test]
fn fds_needed_counts_the_highest_index() {
    let s = |fd| Share {
        fd: FdIndex(fd),
        offset: 0,
        bytes: 8,
    };
    let r = Response::Allocated {
        region: RegionId(1),
        gpu_address: 0,
        host: Some(s(0)),
    };
    assert_eq!(r.fds_needed(), 1);
    let r = Response::Allocated {
        region: RegionId(1),
        gpu_address: 0,
        host: None,
    };
    assert_eq!(r.fds_needed(), 0);
    let g = |fd| GpuShare {
        host: s(fd),
        gpu_address: 0,
    };
    let q = QueueShare {
        kind: QueueKind::Sdma,
        generation: 1,
        ring: g(0),
        read: g(0),
        write: g(0),
        doorbell: s(2),
    };
    let r = Response::Grown(Grown {
        compute: None,
        copy: Some(q),
        args: None,
    });
    assert_eq!(r.fds_needed(), 3);
    assert_eq!(Response::Done.fds_needed(), 0);
}

#[test]
fn page_span_covers_the_share() {
    let s = Share {
        fd: FdIndex(0),
        offset: 4096 + 40,
        bytes: 8,
    };
    assert_eq!(s.page_span(), Some((4096, 4096, 40)));
    let s = Share {
        fd: FdIndex(0),
        offset: 4090,
        bytes: 10,
    };
    assert_eq!(s.page_span(), Some((0, 8192, 4090)));
    let s = Share {
        fd: FdIndex(0),
        offset: u64::MAX - 3,
        bytes: 8,
    };
    assert_eq!(s.page_span(), None);
}

#[test]
fn a_descriptor_must_be_64_bytes() {
    // A Descriptor is encoded as a length-prefixed byte sequence; 63 bytes must not decode.
    let short = encode(&vec![0u8; 63]).unwrap();
    assert!(decode::<Descriptor>(&short).is_err());
    let right = encode(&vec![7u8; 64]).unwrap();
    assert_eq!(decode::<Descriptor>(&right).unwrap(), Descriptor([7; 64]));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Valid messages with a few bytes changed: reaches decoder states random bytes do not.
    /// Each either fails cleanly or decodes to a message that round-trips (bytes may differ:
    /// bincode accepts non-canonical varints).
    #[test]
    fn mutated_messages_never_panic(
        r in response(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut bytes = encode(&r).unwrap();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        if let Ok(back) = decode::<Response>(&bytes) {
            prop_assert_eq!(decode::<Response>(&encode(&back).unwrap()).unwrap(), back);
        }
    }
}

#[test]
fn a_huge_length_inside_a_payload_does_not_allocate() {
    // LoadImage { device: 1, code_object: <claims u64::MAX bytes> }: the variant index, the
    // device, then a varint length of 0xfb + u64. bincode's limit refuses it before any
    // allocation of that size.
    let mut bytes = encode(&Request::LoadImage {
        device: DeviceId(1),
        code_object: vec![],
    })
    .unwrap();
    bytes.pop(); // the empty length
    bytes.push(0xfd); // a u64 follows
    bytes.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(decode::<Request>(&bytes).is_err());
    // A claim just past the cap fails the same way.
    let mut bytes = encode(&Request::LoadImage {
        device: DeviceId(1),
        code_object: vec![],
    })
    .unwrap();
    bytes.pop();
    bytes.push(0xfc); // a u32 follows
    bytes.extend_from_slice(&(rig_proto::MAX_FRAME as u32 + 1).to_le_bytes());
    assert!(decode::<Request>(&bytes).is_err());
}

fn sample_queue() -> QueueShare {
    let s = |offset, bytes| Share {
        fd: FdIndex(0),
        offset,
        bytes,
    };
    let g = |offset, bytes| GpuShare {
        host: s(offset, bytes),
        gpu_address: 0x10_0000 + offset,
    };
    QueueShare {
        kind: QueueKind::Pm4,
        generation: 0,
        ring: g(8192, 65536),
        read: g(0, 8),
        write: g(64, 8),
        doorbell: s(128, 8),
    }
}

#[test]
fn a_doorbell_must_start_a_slot() {
    let mut q = sample_queue();
    q.doorbell.offset = 136;
    assert!(q.check().is_err());
    q.doorbell.offset = 4096 + 64;
    assert_eq!(q.check(), Ok(()));
}

#[test]
fn layout_checks_catch_what_a_client_cannot_use() {
    let q = sample_queue();
    assert_eq!(q.check(), Ok(()));
    let mut bad = q;
    bad.ring.host.bytes = 65536 + 4096;
    assert!(bad.check().is_err(), "ring not a power of two");
    let mut bad = q;
    bad.ring.host.bytes = 128;
    assert!(bad.check().is_err(), "ring under 256 bytes");
    let mut bad = q;
    bad.read.host.offset = 4;
    assert!(bad.check().is_err(), "unaligned position word");
    let mut bad = q;
    bad.doorbell.bytes = 4;
    assert!(bad.check().is_err(), "short doorbell");
    let mut bad = q;
    bad.write.host.offset = u64::MAX - 7;
    assert!(bad.check().is_err(), "overflowing share");
    let g = Grown {
        compute: Some(q),
        copy: Some(bad),
        args: None,
    };
    let e = g.check().unwrap_err();
    assert!(
        e.to_string().starts_with("rigd shared a write position"),
        "{e}"
    );
}

#[test]
fn entry_checks_hidden_arguments_stay_inside_the_segment() {
    let mut e = Entry {
        code: 0x1000,
        params: 16,
        max_threads: 256,
        kernarg_size: 272,
        kernarg_align: 8,
        group_segment: 0,
        private_segment: 0,
        wave64: false,
        descriptor: Descriptor([0; 64]),
        hidden: rig_amd::kernarg::HiddenLayout {
            block_count: [Some(16), None, None],
            group_size: [Some(28), None, None],
            grid_dims: Some(64),
            ..Default::default()
        },
        scratch: None,
    };
    assert_eq!(e.check(), Ok(()));
    e.hidden.global_offset[0] = Some(272);
    assert!(e.check().is_err(), "past the segment");
    e.hidden.global_offset[0] = None;
    e.hidden.dynamic_lds_size = Some(30);
    assert!(e.check().is_err(), "misaligned");
    e.hidden.dynamic_lds_size = None;
    e.params = 300;
    assert!(e.check().is_err(), "explicit arguments past the segment");
}

/// The bytes docs/protocol.md promises a client author in another language: the magic,
/// variant indices, varint integers. A reorder of fields or variants fails here.
#[test]
fn wire_format_is_pinned() {
    let hello = Hello {
        magic: MAGIC,
        version: 1,
        program: "x".into(),
    };
    let mut want = vec![253];
    want.extend_from_slice(b"rigproto");
    want.extend_from_slice(&[1, 1, b'x']);
    assert_eq!(encode(&hello).unwrap(), want);

    assert_eq!(encode(&Request::ListGpus).unwrap(), [0]);
    assert_eq!(
        encode(&Request::ShowDevice {
            device: DeviceId(5)
        })
        .unwrap(),
        [17, 5]
    );
    assert_eq!(
        encode(&Request::Alloc {
            device: DeviceId(300),
            memory: MemoryKind::Mapped,
            bytes: 4096
        })
        .unwrap(),
        [3, 251, 0x2c, 0x01, 2, 251, 0x00, 0x10]
    );
    assert_eq!(
        encode(&Request::MapHost {
            device: DeviceId(1),
            bytes: 70000,
            offset: 0
        })
        .unwrap(),
        [5, 1, 252, 0x70, 0x11, 0x01, 0x00, 0]
    );
    assert_eq!(encode(&Request::Ping).unwrap(), [24]);
    assert_eq!(encode(&Response::Done).unwrap(), [0]);
    assert_eq!(encode(&Response::Pong).unwrap(), [23]);
    assert_eq!(
        encode(&Response::Error(ErrorReply::new(ErrorCode::Internal, "x"))).unwrap(),
        [17, 14, 1, b'x']
    );
    assert_eq!(
        encode(&Response::NoMemory {
            bytes: 8,
            shortage: Shortage::Quota,
            limit: None
        })
        .unwrap(),
        [5, 8, 2, 0]
    );
    let refused = HelloReply::Refused {
        daemon: 1,
        error: ErrorReply::new(ErrorCode::VersionMismatch, ""),
    };
    assert_eq!(encode(&refused).unwrap(), [1, 1, 1, 0]);
    let welcome = HelloReply::Welcome(Welcome {
        version: 1,
        daemon: "d".into(),
        pid: 7,
    });
    assert_eq!(encode(&welcome).unwrap(), [0, 1, 1, b'd', 7]);
    // Option: 0 for none, 1 then the value.
    let stop = Request::StopDevice {
        device: DeviceId(1),
        last: 2,
        fault: Some("f".into()),
    };
    assert_eq!(encode(&stop).unwrap(), [13, 1, 2, 1, 1, b'f']);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A fault survives the wire whole, and its sentence names its kind's facts.
    #[test]
    fn fault_round_trips_and_reads_as_a_sentence(f in fault()) {
        let back: Fault = decode(&encode(&f).unwrap()).unwrap();
        prop_assert_eq!(&back, &f);
        let said = f.to_string();
        if let (FaultKind::MemoryFault, Some(a)) = (f.kind, f.address) {
            prop_assert!(said.starts_with(&format!("memory fault at {a:#x}")), "{}", said);
        }
        if let (FaultKind::MemoryFault, Some(pc)) = (f.kind, f.pc) {
            prop_assert!(said.contains(&format!("by the instruction at {pc:#x}")), "{}", said);
        }
        // A consumer's fault is its producer's sentence, which names the queue if any.
        if let (Some(q), false) = (f.queue, f.kind == FaultKind::Producer) {
            prop_assert!(said.contains(&q.to_string()), "{}", said);
        }
    }

    /// However long a detail, the bounded fault keeps at most MOST_FAULT_DETAIL bytes of it,
    /// cut at a character boundary; a short one stays as it was.
    #[test]
    fn a_bounded_fault_keeps_at_most_the_stated_detail(n in 0usize..3000) {
        let f = Fault::new(FaultKind::StoppedByClient, "é".repeat(n)).bounded();
        if 2 * n <= MOST_FAULT_DETAIL {
            prop_assert_eq!(f.detail.len(), 2 * n);
        } else {
            prop_assert!(f.detail.ends_with(" (cut)"));
            prop_assert!(f.detail.len() <= MOST_FAULT_DETAIL + " (cut)".len());
        }
    }
}

/// The sentence the client's `Error::Lost` prints after the device's name.
#[test]
fn a_kernel_memory_fault_reads_as_the_issue_says() {
    let f = Fault {
        kind: FaultKind::MemoryFault,
        queue: Some(QueueRef {
            kind: QueueKind::Pm4,
            index: 0,
        }),
        vmid: Some(1),
        address: Some(0),
        write: Some(true),
        pc: Some(0x1a2c),
        position: None,
        detail: String::new(),
    };
    assert_eq!(
        f.to_string(),
        "memory fault at 0x0 (write) by the instruction at 0x1a2c on COMPUTE:0 (vmid 1)"
    );
    let bad = Fault {
        position: Some(0x40),
        queue: Some(QueueRef {
            kind: QueueKind::Sdma,
            index: 0,
        }),
        ..Fault::new(FaultKind::BadPacket, "opcode 0xff is not an SDMA packet")
    };
    assert_eq!(
        bad.to_string(),
        "bad packet at read position 0x40 on COPY:0: opcode 0xff is not an SDMA packet"
    );
    assert_eq!(
        Fault::new(FaultKind::Hang, "the timeline stayed at 1").to_string(),
        "hang: the timeline stayed at 1"
    );
}

/// rig-amd's own queue kinds and IP versions are what the wire carries, encoded as the
/// mirrors of protocol 3 were (variant index; three bytes), and a fault's fields go in order.
#[test]
fn rig_amd_types_and_faults_have_a_pinned_encoding() {
    assert_eq!(encode(&rig_amd::gpu::QueueKind::Sdma).unwrap(), [2]);
    assert_eq!(
        encode(&rig_amd::gpu::IpVersion::new(11, 0, 3)).unwrap(),
        [11, 0, 3]
    );
    let f = Fault {
        queue: Some(QueueRef {
            kind: QueueKind::Aql,
            index: 0,
        }),
        write: Some(false),
        ..Fault::new(FaultKind::Trap, "t")
    };
    // kind 3; queue Some(Aql=1, 0); vmid None; address None; write Some(false); pc None;
    // position None; detail "t".
    assert_eq!(encode(&f).unwrap(), [3, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1, b't']);
}

proptest! {
    /// A code object travels as its length then its bytes, exactly as a plain byte vector
    /// would: the one-copy decode changed nothing on the wire.
    #[test]
    fn a_code_object_is_encoded_as_any_byte_vector(bytes in vec(any::<u8>(), 0..4096), device in any::<u64>()) {
        #[derive(serde::Serialize)]
        enum Plain {
            _ListGpus, _OpenDevice { _gpu: u32 }, _CloseDevice { _device: u64 }, _Alloc { _a: u64, _b: u8, _c: u64 },
            _Free { _a: u64, _b: u64 }, _MapHost { _a: u64 },
            LoadImage { device: u64, code_object: Vec<u8> },
        }
        let ours = encode(&Request::LoadImage { device: DeviceId(device), code_object: bytes.clone() }).unwrap();
        let plain = bincode::serde::encode_to_vec(
            Plain::LoadImage { device, code_object: bytes.clone() },
            rig_proto::frame::config(),
        )
        .unwrap();
        prop_assert_eq!(&ours, &plain);
        let back: Request = decode(&plain).unwrap();
        prop_assert_eq!(back, Request::LoadImage { device: DeviceId(device), code_object: bytes });
    }
}
