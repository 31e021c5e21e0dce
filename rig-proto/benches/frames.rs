//! What the control plane costs: encoding and decoding the largest common answer, and one
//! request/answer round trip over a socketpair (framing, `sendmsg`/`recvmsg` and a thread
//! hop on each side; rigd's own work excluded).

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use rig_proto::frame::{decode, encode, read_frame, write_frame};
use rig_proto::*;

fn opened() -> DeviceOpened {
    let s = |fd, offset, bytes| Share {
        fd: FdIndex(fd),
        offset,
        bytes,
    };
    let g = |fd, offset, bytes| GpuShare {
        host: s(fd, offset, bytes),
        gpu_address: 0x1_0000_0000 + offset,
    };
    let q = |kind, fd| QueueShare {
        kind,
        generation: 0,
        ring: g(fd, 0, 1 << 20),
        read: g(fd, 1 << 20, 8),
        write: g(fd, (1 << 20) + 64, 8),
        doorbell: s(2, 0, 8),
    };
    DeviceOpened {
        device: DeviceId(1),
        facts: Facts {
            arch: "gfx1100".into(),
            budget: 24 << 30,
            queues: vec!["COMPUTE:0".into(), "COPY:0".into()],
            copy_engine: Some(1),
            completion: Completion::Store,
            waits: Waits {
                stores: true,
                hosts: true,
            },
            may_block: false,
            hang_ms: Some(10_000),
            maps_host: true,
            host_addresses: false,
            alignment: 4096,
            cache_bytes: Some(6 << 20),
            word: 0x2000_0000,
            bus: None,
            gc: IpVersion {
                major: 11,
                minor: 0,
                stepping: 0,
            },
            sdma: IpVersion {
                major: 6,
                minor: 0,
                stepping: 0,
            },
            mec: 2,
            compute: QueueKind::Pm4,
            lds_bytes: 65536,
            wave_size: 32,
            waves_per_cu: 32,
            dies: 1,
            wgps: vec![vec![0xff; 2]; 6],
            linear_copy_bytes: 1 << 30,
            clock_hz: 100_000_000,
            clock: ClockSource::Source { apart: false },
            most_ring: RingLimits {
                compute: 1 << 31,
                copy: 1 << 31,
            },
        },
        compute: q(QueueKind::Pm4, 0),
        copy: q(QueueKind::Sdma, 1),
        args: SegmentShare {
            generation: 0,
            memory: g(3, 0, 1 << 20),
        },
        word: WordShare {
            memory: g(4, 0, 8),
            first: 0,
        },
        submitted: s(4, 64, 8),
        interrupt: FdIndex(5),
        lost: s(4, 72, 4),
        context: 1,
    }
}

fn codec(c: &mut Criterion) {
    let answer = Response::DeviceOpened(Box::new(opened()));
    let bytes = encode(&answer).unwrap();
    c.bench_function("encode DeviceOpened", |b| {
        b.iter(|| encode(black_box(&answer)).unwrap())
    });
    c.bench_function("decode DeviceOpened", |b| {
        b.iter(|| decode::<Response>(black_box(&bytes)).unwrap())
    });
}

fn round_trip(c: &mut Criterion) {
    let (client, server) = UnixStream::pair().unwrap();
    let echo = std::thread::spawn(move || {
        let answer = encode(&Response::Mapped {
            region: RegionId(1),
            gpu_address: 0x1000,
        })
        .unwrap();
        while let Ok(Some(_)) = read_frame(server.as_fd()) {
            if write_frame(server.as_fd(), &answer, &[]).is_err() {
                break;
            }
        }
    });
    let request = Request::Free {
        device: DeviceId(1),
        region: RegionId(2),
    };
    c.bench_function("round trip over a socketpair", |b| {
        b.iter(|| {
            write_frame(client.as_fd(), &encode(&request).unwrap(), &[]).unwrap();
            let f = read_frame(client.as_fd()).unwrap().unwrap();
            decode::<Response>(&f.payload).unwrap()
        })
    });
    drop(client);
    echo.join().unwrap();
}

criterion_group!(benches, codec, round_trip);
criterion_main!(benches);
