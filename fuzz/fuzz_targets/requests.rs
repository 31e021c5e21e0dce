//! Arbitrary sequences of requests, with arbitrary numbers and arbitrary descriptors (memfds
//! of any size, sealed or not, huge sparse ones, pipes), from several clients, straight into
//! rigd's request handler over a simulated GPU: every request answered, never a panic, a
//! request whose strings pass their bounds refused, no client listed with a name past its
//! bound, and once every client is gone rigd holds no memory and no device.
#![no_main]

use std::os::fd::OwnedFd;
use std::sync::{Arc, mpsc};

use libfuzzer_sys::fuzz_target;
use rig_proto::messages::{
    DeviceId, ErrorCode, Generations, GpuInfo, ImageId, MemoryKind, PathKind, RegionId, Request,
    Response,
};
use rig_proto::{MOST_ENTRY_NAME, MOST_PROGRAM, MOST_STOP_REASON};
use rigd::config::{Limits, Peer, SimGpuConfig};
use rigd::gpus::GpuEntry;
use rigd::path::Backend;
use rigd::path::sim::SimBackend;
use rigd::state::{Handler, State};

/// A real code object (clang-19's, checked in), so images load and entries resolve.
const ADD: &[u8] = include_bytes!("../../kernels/out/gfx1100/add.co");

/// The input read as little-endian numbers; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        b
    }

    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |v, i| v | u64::from(self.byte()) << (8 * i))
    }

    /// A string of a length around `bound` (a client string's bound): short, at it, one
    /// past it, or far past it.
    fn text(&mut self, bound: usize) -> String {
        let n = match self.byte() % 4 {
            0 => usize::from(self.byte()),
            1 => bound,
            2 => bound + 1,
            _ => usize::from(self.byte()) << 14,
        };
        // Two-byte characters now and then, so cuts meet character boundaries.
        if self.byte().is_multiple_of(2) {
            "é".repeat(n / 2)
        } else {
            "k".repeat(n)
        }
    }

    /// Small numbers most of the time, any number sometimes.
    fn size(&mut self) -> u64 {
        match self.byte() % 4 {
            0 => self.u64(),
            1 => u64::from(self.byte()) << 12,
            2 => u64::from(self.byte()) * 4,
            _ => u64::from(self.byte()) << 20,
        }
    }
}

fn state() -> State {
    let backend = SimBackend::new(&SimGpuConfig {
        processor: "gfx1100".into(),
        memory_bytes: 64 << 20,
        hang_ms: 50,
        ..SimGpuConfig::embedded_default()
    })
    .expect("a simulated gpu");
    let info = GpuInfo {
        index: 0,
        name: "AMD:0".into(),
        arch: "gfx1100".into(),
        path: PathKind::Sim,
        bus: None,
        budget: backend.description().budget,
        simulated: true,
        unavailable: None,
    };
    let (tx, _rx) = mpsc::channel();
    let gpus = vec![GpuEntry {
        info,
        backend: Some(Arc::new(backend)),
        why_not: None,
        firmware: None,
    }];
    let limits = Limits {
        memory_bytes: 32 << 20,
        devices: 3,
        objects: 32,
        ..Limits::default()
    };
    State::new(gpus, limits, None, tx)
}

/// A descriptor of a kind the input picks.
fn descriptor(input: &mut Input) -> Option<OwnedFd> {
    match input.byte() % 5 {
        0 => rig_shm::SharedRegion::create("fuzz", 1 << 16)
            .and_then(|r| r.dup_fd())
            .ok(),
        1 => {
            // A huge sparse memfd, which costs nothing to make.
            let fd = nix::sys::memfd::memfd_create(
                c"fuzz-sparse",
                nix::sys::memfd::MemFdCreateFlag::MFD_ALLOW_SEALING,
            )
            .ok()?;
            nix::unistd::ftruncate(&fd, 1 << 46).ok()?;
            Some(fd)
        }
        2 => {
            // A memfd that cannot be sealed.
            let fd = nix::sys::memfd::memfd_create(
                c"fuzz-unsealable",
                nix::sys::memfd::MemFdCreateFlag::empty(),
            )
            .ok()?;
            nix::unistd::ftruncate(&fd, 1 << 16).ok()?;
            Some(fd)
        }
        3 => nix::unistd::pipe().ok().map(|(r, _w)| r),
        _ => None,
    }
}

fn peer(pid: i32) -> Peer {
    Peer {
        pid,
        uid: 1000 + pid as u32 % 2,
        gid: 1000,
        groups: Vec::new(),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let s = state();
    let clients = [
        s.connect(peer(1), "a".into()),
        s.connect(peer(2), "b".into()),
        s.connect(peer(3), "c".into()),
        // A name past the bound, which the server refuses: the state keeps it cut.
        s.connect(peer(4), "p".repeat(3 * MOST_PROGRAM).into()),
    ];
    let mut devices = vec![DeviceId(0)];
    let mut regions = vec![RegionId(0)];
    let mut images = vec![ImageId(0)];
    let mut steps = 0;
    while !input.0.is_empty() && steps < 64 {
        steps += 1;
        let client = clients[usize::from(input.byte()) % clients.len()];
        let device = devices[usize::from(input.byte()) % devices.len()];
        let op = input.byte() % 19;
        let request = match op {
            0 => Request::OpenDevice {
                gpu: u32::from(input.byte() % 3),
            },
            1 => Request::Alloc {
                device,
                memory: [MemoryKind::Device, MemoryKind::Pinned, MemoryKind::Mapped]
                    [usize::from(input.byte()) % 3],
                bytes: input.size(),
            },
            2 => Request::Free {
                device,
                region: regions[usize::from(input.byte()) % regions.len()],
            },
            3 => Request::MapHost {
                device,
                bytes: input.size(),
                offset: input.size(),
            },
            4 => Request::Grow {
                device,
                compute_bytes: input.size(),
                copy_bytes: input.size(),
                segment_bytes: input.size(),
                installed: Generations {
                    compute: u32::from(input.byte() % 3),
                    copy: u32::from(input.byte() % 3),
                    args: u32::from(input.byte() % 3),
                },
            },
            5 => Request::StopDevice {
                device,
                last: input.u64(),
                fault: (input.byte() % 2 == 0).then(|| input.text(MOST_STOP_REASON)),
            },
            6 if input.byte() % 2 == 0 => Request::LoadImage {
                device,
                code_object: ADD.to_vec(),
            },
            6 => {
                let n = usize::from(input.byte()) * 4;
                let take = n.min(input.0.len());
                let (code, rest) = input.0.split_at(take);
                input.0 = rest;
                Request::LoadImage {
                    device,
                    code_object: code.to_vec(),
                }
            }
            7 => Request::ResolveEntry {
                device,
                image: images[usize::from(input.byte()) % images.len()],
                name: if input.byte() % 2 == 0 {
                    "add".into()
                } else {
                    input.text(MOST_ENTRY_NAME)
                },
            },
            17 => Request::Prepare {
                device,
                image: images[usize::from(input.byte()) % images.len()],
                name: input.text(MOST_ENTRY_NAME),
            },
            8 => Request::Unload {
                device,
                image: images[usize::from(input.byte()) % images.len()],
            },
            9 => Request::CloseDevice { device },
            10 => Request::ShowDevice { device },
            11 => Request::MapPeerWord {
                device,
                peer: devices[usize::from(input.byte()) % devices.len()],
            },
            12 => Request::Facts { device },
            13 => Request::DeviceStatus { device },
            14 => Request::SampleClock { device },
            15 => Request::ListDevices,
            16 => Request::ListClients,
            _ => Request::ListGpus,
        };
        // Usually the descriptors the request needs, sometimes others.
        let mut fds = Vec::new();
        let count = if input.byte() % 8 == 0 {
            usize::from(input.byte() % 3)
        } else {
            request.fds_needed()
        };
        for _ in 0..count {
            fds.extend(descriptor(&mut input));
        }
        let within = request.check_bounds().is_ok();
        match s.handle(client, request, fds).0 {
            // Past its bounds, refused whatever else it asked.
            Response::Error(e) if !within => {
                assert_eq!(e.code, ErrorCode::BadRequest, "{e:?}");
            }
            _ if !within => panic!("a request past its bounds was answered"),
            Response::Clients(cs) => {
                assert!(cs.iter().all(|c| c.program.len() <= MOST_PROGRAM));
            }
            Response::DeviceOpened(d) => devices.push(d.device),
            Response::Allocated { region, .. } | Response::Mapped { region, .. } => {
                regions.push(region)
            }
            Response::ImageLoaded { image, .. } => images.push(image),
            _ => {}
        }
    }
    for c in clients {
        s.disconnect(c);
    }
    assert_eq!(s.held_bytes(), 0, "memory left after every client left");
});
