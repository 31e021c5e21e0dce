//! The bytes of one example of every request and every response, pinned: a change of any
//! message's order of variants or fields, or of a type it carries (rig-amd's among them,
//! through `rig_proto::wire`), changes bytes here and fails, so it is made on purpose,
//! with a bump of `VERSION`, and never by accident. `docs/protocol.md` describes the
//! encoding these bytes follow.

use rig_proto::frame::{decode, encode};
use rig_proto::*;

/// How many variants `Request` has; [`request_index`] names each.
const REQUESTS: usize = 28;
/// How many variants `Response` has; [`response_index`] names each.
const RESPONSES: usize = 26;

/// The variant's index, with no wildcard: a new variant fails to compile here until it has
/// an example below.
fn request_index(r: &Request) -> usize {
    match r {
        Request::ListGpus => 0,
        Request::OpenDevice { .. } => 1,
        Request::CloseDevice { .. } => 2,
        Request::Alloc { .. } => 3,
        Request::Free { .. } => 4,
        Request::MapHost { .. } => 5,
        Request::LoadImage { .. } => 6,
        Request::ResolveEntry { .. } => 7,
        Request::Prepare { .. } => 8,
        Request::Unload { .. } => 9,
        Request::Grow { .. } => 10,
        Request::Facts { .. } => 11,
        Request::SampleClock { .. } => 12,
        Request::StopDevice { .. } => 13,
        Request::DeviceStatus { .. } => 14,
        Request::ListClients => 15,
        Request::ListDevices => 16,
        Request::ShowDevice { .. } => 17,
        Request::MapPeerWord { .. } => 18,
        Request::DaemonStatus => 19,
        Request::GpuStatus => 20,
        Request::ListProcesses => 21,
        Request::AdminStop { .. } => 22,
        Request::Evict { .. } => 23,
        Request::Ping => 24,
        Request::Grant(_) => 25,
        Request::Revoke { .. } => 26,
        Request::Grants => 27,
    }
}

/// As [`request_index`], for responses.
fn response_index(r: &Response) -> usize {
    match r {
        Response::Done => 0,
        Response::Gpus(_) => 1,
        Response::DeviceOpened(_) => 2,
        Response::Allocated { .. } => 3,
        Response::Mapped { .. } => 4,
        Response::NoMemory { .. } => 5,
        Response::Never { .. } => 6,
        Response::ImageLoaded { .. } => 7,
        Response::Entry(_) => 8,
        Response::Absent => 9,
        Response::Grown(_) => 10,
        Response::Facts(_) => 11,
        Response::Clock(_) => 12,
        Response::Status(_) => 13,
        Response::Clients(_) => 14,
        Response::Devices(_) => 15,
        Response::Device(_) => 16,
        Response::Error(_) => 17,
        Response::PeerWord { .. } => 18,
        Response::Daemon(_) => 19,
        Response::GpuStatus(_) => 20,
        Response::Processes(_) => 21,
        Response::Evicted { .. } => 22,
        Response::Pong => 23,
        Response::Granted { .. } => 24,
        Response::Grants(_) => 25,
    }
}

fn grant_spec() -> GrantSpec {
    GrantSpec {
        id: "a".into(),
        gpus: vec![GrantGpu {
            gpu: 0,
            bytes: 4096,
        }],
        devices: 2,
        holder: Holder {
            resource: "r".into(),
            devices: vec!["d".into()],
            namespace: None,
            pod: Some("p".into()),
            container: None,
        },
    }
}

fn share(fd: u32, offset: u64, bytes: u64) -> Share {
    Share {
        fd: FdIndex(fd),
        offset,
        bytes,
    }
}

fn gpu_share(fd: u32, offset: u64, bytes: u64, gpu_address: u64) -> GpuShare {
    GpuShare {
        host: share(fd, offset, bytes),
        gpu_address,
    }
}

fn queue(kind: QueueKind, fd: u32) -> QueueShare {
    QueueShare {
        kind,
        generation: 1,
        ring: gpu_share(fd, 0, 4096, 0x1000),
        read: gpu_share(fd, 4096, 8, 0x2000),
        write: gpu_share(fd, 4104, 8, 0x2008),
        doorbell: share(fd + 1, 64, 64),
    }
}

fn facts() -> Facts {
    Facts {
        arch: "gfx1100".into(),
        budget: 1 << 30,
        queues: vec!["COMPUTE:0".into(), "COPY:0".into()],
        copy_engine: Some(1),
        completion: Completion::Store,
        waits: Waits {
            stores: true,
            hosts: false,
        },
        may_block: false,
        hang_ms: Some(2000),
        maps_host: true,
        host_addresses: false,
        alignment: 4096,
        cache_bytes: None,
        word: 0x3000,
        bus: None,
        gc: IpVersion::new(11, 0, 0),
        sdma: IpVersion::new(6, 0, 0),
        mec: 7,
        compute: QueueKind::Pm4,
        lds_bytes: 65536,
        wave_size: 32,
        waves_per_cu: 16,
        dies: 1,
        wgps: vec![vec![3]],
        linear_copy_bytes: 1 << 22,
        clock_hz: 100_000_000,
        clock: ClockSource::Source { apart: false },
        most_ring: RingLimits {
            compute: 1 << 20,
            copy: 1 << 21,
        },
    }
}

fn fault() -> Fault {
    Fault {
        queue: Some(QueueRef {
            kind: QueueKind::Sdma,
            index: 0,
        }),
        vmid: Some(1),
        address: Some(0x40),
        write: Some(true),
        pc: None,
        position: Some(2),
        ..Fault::new(FaultKind::MemoryFault, "f")
    }
}

fn device_info() -> DeviceInfo {
    DeviceInfo {
        device: DeviceId(3),
        gpu: 0,
        owner_pid: 9,
        memory: MemoryHeld {
            device: 1,
            pinned: 2,
            mapped: 3,
            host: 4,
        },
        lost: Some(Fault::new(FaultKind::Hang, "")),
    }
}

/// One example of each request, with its bytes in hex.
fn requests() -> Vec<(Request, &'static str)> {
    let d = DeviceId(2);
    vec![
        (Request::ListGpus, "00"),
        (Request::OpenDevice { gpu: 1 }, "0101"),
        (Request::CloseDevice { device: d }, "0202"),
        (
            Request::Alloc {
                device: d,
                memory: MemoryKind::Pinned,
                bytes: 300,
            },
            "030201fb2c01",
        ),
        (
            Request::Free {
                device: d,
                region: RegionId(5),
            },
            "040205",
        ),
        (
            Request::MapHost {
                device: d,
                bytes: 4096,
                offset: 8192,
            },
            "0502fb0010fb0020",
        ),
        (
            Request::LoadImage {
                device: d,
                code_object: vec![0x7f, b'E'],
            },
            "0602027f45",
        ),
        (
            Request::ResolveEntry {
                device: d,
                image: ImageId(4),
                name: "k".into(),
            },
            "070204016b",
        ),
        (
            Request::Prepare {
                device: d,
                image: ImageId(4),
                name: "k".into(),
            },
            "080204016b",
        ),
        (
            Request::Unload {
                device: d,
                image: ImageId(4),
            },
            "090204",
        ),
        (
            Request::Grow {
                device: d,
                compute_bytes: 1,
                copy_bytes: 2,
                segment_bytes: 3,
                installed: Generations {
                    compute: 4,
                    copy: 5,
                    args: 6,
                },
            },
            "0a02010203040506",
        ),
        (Request::Facts { device: d }, "0b02"),
        (Request::SampleClock { device: d }, "0c02"),
        (
            Request::StopDevice {
                device: d,
                last: 7,
                fault: Some("why".into()),
            },
            "0d02070103776879",
        ),
        (Request::DeviceStatus { device: d }, "0e02"),
        (Request::ListClients, "0f"),
        (Request::ListDevices, "10"),
        (Request::ShowDevice { device: d }, "1102"),
        (
            Request::MapPeerWord {
                device: d,
                peer: DeviceId(3),
            },
            "120203",
        ),
        (Request::DaemonStatus, "13"),
        (Request::GpuStatus, "14"),
        (Request::ListProcesses, "15"),
        (Request::AdminStop { device: d }, "1602"),
        (Request::Evict { pid: 300 }, "17fb2c01"),
        (Request::Ping, "18"),
        (
            Request::Grant(Box::new(grant_spec())),
            "1901610100fb00100201720101640001017000",
        ),
        (Request::Revoke { id: "a".into() }, "1a0161"),
        (Request::Grants, "1b"),
    ]
}

/// One example of each response, with its bytes in hex.
fn responses() -> Vec<(Response, &'static str)> {
    let hidden = wire::HiddenLayout {
        block_count: [Some(8), Some(12), None],
        dynamic_lds_size: Some(40),
        ..Default::default()
    };
    vec![
        (Response::Done, "00"),
        (
            Response::Gpus(vec![GpuInfo {
                index: 0,
                name: "AMD:0".into(),
                arch: "gfx1100".into(),
                path: PathKind::Kfd,
                bus: Some("0000:41:00.0".into()),
                budget: 1 << 30,
                simulated: false,
                unavailable: None,
            }]),
            "01010005414d443a30076766783131303001010c303030303a34313a30302e30fc000000400000",
        ),
        (
            Response::DeviceOpened(Box::new(DeviceOpened {
                device: DeviceId(2),
                facts: facts(),
                compute: queue(QueueKind::Pm4, 0),
                copy: queue(QueueKind::Sdma, 2),
                args: SegmentShare {
                    generation: 0,
                    memory: gpu_share(4, 0, 4096, 0x5000),
                },
                word: WordShare {
                    memory: gpu_share(5, 0, 8, 0x3000),
                    first: 1,
                },
                submitted: share(5, 8, 8),
                interrupt: FdIndex(6),
                lost: share(5, 16, 4),
                context: 1,
            })),
            "02020767667831313030fc000000400209434f4d505554453a3006434f50593a3001010001000001fbd0070100fb001000fb0030000b00000600000700fc00000100201001010103fc00004000fc00e1f5050000fc00001000fc0000200000010000fb0010fb001000fb001008fb002000fb081008fb082001404002010200fb0010fb001002fb001008fb002002fb081008fb0820034040000400fb0010fb0050050008fb0030010508080605100401",
        ),
        (
            Response::Allocated {
                region: RegionId(5),
                gpu_address: 0x10000,
                host: Some(share(0, 0, 4096)),
            },
            "0305fc00000100010000fb0010",
        ),
        (
            Response::Mapped {
                region: RegionId(6),
                gpu_address: 0x20000,
            },
            "0406fc00000200",
        ),
        (
            Response::NoMemory {
                bytes: 4096,
                shortage: Shortage::Quota,
                limit: Some(Limit {
                    name: "l".into(),
                    value: 8,
                    missing: 2,
                }),
            },
            "05fb00100201016c0802",
        ),
        (
            Response::Never {
                reason: "no".into(),
            },
            "06026e6f",
        ),
        (
            Response::ImageLoaded {
                image: ImageId(4),
                region: RegionId(7),
                gpu_address: 0x30000,
                size: 256,
                kernels: vec!["k".into()],
            },
            "070407fc00000300fb000101016b",
        ),
        (
            Response::Entry(Box::new(Entry {
                code: 0x30100,
                params: 16,
                max_threads: 1024,
                kernarg_size: 272,
                kernarg_align: 8,
                group_segment: 0,
                private_segment: 4,
                wave64: false,
                descriptor: Descriptor([1; 64]),
                hidden,
                scratch: Some(Scratch {
                    gpu_address: 0x40000,
                    bytes: 65536,
                    wave_bytes: 256,
                    waves: 32,
                }),
            })),
            "08fc0001030010fb0004fb10010800040040010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010101010108010c0000000000000000000000012801fc00000400fc00000100fb000120",
        ),
        (Response::Absent, "09"),
        (
            Response::Grown(Grown {
                compute: None,
                copy: Some(queue(QueueKind::Sdma, 0)),
                args: None,
            }),
            "0a000102010000fb0010fb001000fb001008fb002000fb081008fb082001404000",
        ),
        (
            Response::Facts(Box::new(facts())),
            "0b0767667831313030fc000000400209434f4d505554453a3006434f50593a3001010001000001fbd0070100fb001000fb0030000b00000600000700fc00000100201001010103fc00004000fc00e1f5050000fc00001000fc00002000",
        ),
        (
            Response::Clock(ClockSample {
                gpu: 1,
                host_before_ns: 2,
                host_after_ns: 3,
                gap_ns: 4,
            }),
            "0c01020304",
        ),
        (
            Response::Status(DeviceStatus {
                lost: Some(fault()),
                stopped: true,
                submitted: 5,
                reached: 4,
            }),
            "0d01000102000101014001010001020166010504",
        ),
        (
            Response::Clients(vec![ClientInfo {
                pid: 9,
                uid: 1000,
                gid: 1000,
                program: "p".into(),
                devices: vec![DeviceId(3)],
                bytes: 4096,
                grant: Some("g".into()),
                pod: Some(PodOf {
                    uid: "u".into(),
                    container: None,
                }),
            }]),
            "0e0109fbe803fbe80301700103fb001001016701017500",
        ),
        (
            Response::Devices(vec![device_info()]),
            "0f0103000901020304010500000000000000",
        ),
        (
            Response::Device(Box::new(DeviceReport {
                info: device_info(),
                facts: facts(),
                rings: vec![RingState {
                    queue: "COPY:0".into(),
                    kind: QueueKind::Sdma,
                    generation: 0,
                    bytes: 4096,
                    read: 1,
                    write: 2,
                }],
                images: 1,
                regions: 2,
                submitted: 3,
                reached: 3,
                faults: vec![fault()],
            })),
            "10030009010203040105000000000000000767667831313030fc000000400209434f4d505554453a3006434f50593a3001010001000001fbd0070100fb001000fb0030000b00000600000700fc00000100201001010103fc00004000fc00e1f5050000fc00001000fc000020000106434f50593a300200fb001001020102030301000102000101014001010001020166",
        ),
        (
            Response::Error(ErrorReply::new(ErrorCode::EntryRefused, "e")),
            "110a0165",
        ),
        (
            Response::PeerWord {
                gpu_address: 0x3000,
            },
            "12fb0030",
        ),
        (
            Response::Daemon(DaemonStatus {
                version: "rigd 0.1.0".into(),
                pid: 9,
                uptime_ms: 1000,
                config: None,
                socket: Some("/s".into()),
                gpus: 1,
                connections: 2,
                devices: 3,
            }),
            "130a7269676420302e312e3009fbe8030001022f73010203",
        ),
        (
            Response::GpuStatus(vec![GpuStatus {
                index: 0,
                product: Some("p".into()),
                pci_id: Some((0x1002, 0x744c, 0xc8)),
                firmware: None,
                client_cost: Some(ClientCost {
                    queue_bytes: 1,
                    at_once: 2,
                    queues_fit: 3,
                }),
                total_bytes: 4,
                used_bytes: 5,
                devices: 6,
                clients: 7,
                busy_permille: 500,
            }]),
            "14010001017001fb0210fb4c74c8000101020304050607fbf401",
        ),
        (
            Response::Processes(vec![ProcessInfo {
                pid: 9,
                uid: 1000,
                program: "p".into(),
                hello: vec!["h".into()],
                connections: 1,
                devices: vec![DeviceId(3)],
                bytes: 4096,
                grant: Some("g".into()),
                pod: Some(PodOf {
                    uid: "u".into(),
                    container: None,
                }),
            }]),
            "150109fbe8030170010168010103fb001001016701017500",
        ),
        (
            Response::Evicted {
                devices: vec![DeviceId(3), DeviceId(4)],
            },
            "16020304",
        ),
        (Response::Pong, "17"),
        (
            Response::Granted {
                socket: "/s".into(),
            },
            "18022f73",
        ),
        (
            Response::Grants(vec![GrantInfo {
                spec: grant_spec(),
                socket: "/s".into(),
                age_ms: 5,
                connections: 1,
                devices: 2,
                gpu_bytes: vec![4096],
            }]),
            "190101610100fb00100201720101640001017000022f7305010201fb0010",
        ),
    ]
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks each example's bytes against its pinned hex, and that it decodes back to itself;
/// every mismatch is listed at once, with the bytes the encoding gives now.
fn pinned<T>(what: &str, examples: Vec<(T, &str)>, index: fn(&T) -> usize, count: usize)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let mut seen: Vec<usize> = examples.iter().map(|(m, _)| index(m)).collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..count).collect::<Vec<_>>(),
        "one example of each {what} variant, in order"
    );
    let mut wrong = Vec::new();
    for (message, want) in examples {
        let bytes = encode(&message).unwrap();
        let back: T = decode(&bytes).unwrap();
        assert_eq!(back, message, "a {what} decodes to itself");
        if hex(&bytes) != want {
            wrong.push(format!("{what} {}: {:?}", index(&message), hex(&bytes)));
        }
    }
    assert!(
        wrong.is_empty(),
        "encodings differ from the pinned bytes (a protocol change: bump VERSION and pin \
         the new bytes):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_request_has_pinned_bytes() {
    pinned("request", requests(), request_index, REQUESTS);
}

#[test]
fn every_response_has_pinned_bytes() {
    pinned("response", responses(), response_index, RESPONSES);
}
