//! Launches of the test kernels (kernels/out/<processor>) through a real rigd on every
//! backend, each result checked against the same computation on the host.

use std::time::{Duration, Instant};

use rig_client::{Buffer, Device, Error, Launch, Memory, Ref, Submission, f32s, put_f32s};
use rig_testkit::{Backend, Daemon};

fn floats(dev: &Device, v: &[f32]) -> Buffer {
    let b = dev.buffer(4 * v.len() as u64, Memory::Pinned).unwrap();
    b.write(|bytes| put_f32s(bytes, v.iter().copied())).unwrap();
    b
}

fn read_f32(b: &Buffer) -> Vec<f32> {
    b.read(|bytes| f32s(bytes).collect()).unwrap()
}

fn read_u32(b: &Buffer) -> Vec<u32> {
    b.read(|bytes| {
        bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    })
    .unwrap()
}

fn add_saxpy_and_two_kernels_of_one_image(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let n = 4096usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let ys: Vec<f32> = (0..n).map(|i| 3.0 - i as f32).collect();
    let (x, y) = (floats(&dev, &xs), floats(&dev, &ys));

    let add = dev
        .load_image(&b.code("add"))
        .unwrap()
        .resolve("add")
        .unwrap();
    assert_eq!(add.params(), 16);
    let s = Submission::new().launch(
        Launch::new(&add, [16, 1, 1], [256, 1, 1])
            .params(&[0; 16])
            .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
    );
    dev.submit(&s).unwrap();
    let want: Vec<f32> = xs.iter().zip(&ys).map(|(a, b)| a + b).collect();
    assert_eq!(read_f32(&y), want);

    // saxpy(float a, global const float *x, global float *y, uint n), over a partial group.
    let saxpy = dev
        .load_image(&b.code("saxpy"))
        .unwrap()
        .resolve("saxpy")
        .unwrap();
    let mut p = vec![0u8; 28];
    p[..4].copy_from_slice(&2.0f32.to_le_bytes());
    p[24..28].copy_from_slice(&((n - 100) as u32).to_le_bytes());
    let s = Submission::new().launch(
        Launch::new(&saxpy, [16, 1, 1], [256, 1, 1])
            .params(&p)
            .refs(&[Ref::read(&x, 8), Ref::write(&y, 16)]),
    );
    dev.submit(&s).unwrap();
    let want2: Vec<f32> = (0..n)
        .map(|i| {
            if i < n - 100 {
                2.0 * xs[i] + want[i]
            } else {
                want[i]
            }
        })
        .collect();
    assert_eq!(read_f32(&y), want2);

    // Two kernels of one image, prepared together, in one submission, in order.
    let multi = dev.load_image(&b.code("multi")).unwrap();
    multi.prepare(&["scale", "offset"]).unwrap();
    let (scale, offset) = (
        multi.resolve("scale").unwrap(),
        multi.resolve("offset").unwrap(),
    );
    let mut ps = vec![0u8; 12];
    ps[8..].copy_from_slice(&3.0f32.to_le_bytes());
    let mut po = vec![0u8; 12];
    po[8..].copy_from_slice(&(-1.0f32).to_le_bytes());
    let s = Submission::new()
        .launch(
            Launch::new(&scale, [16, 1, 1], [256, 1, 1])
                .params(&ps)
                .refs(&[Ref::write(&y, 0)]),
        )
        .launch(
            Launch::new(&offset, [16, 1, 1], [256, 1, 1])
                .params(&po)
                .refs(&[Ref::write(&y, 0)]),
        );
    dev.submit(&s).unwrap();
    let want3: Vec<f32> = want2.iter().map(|v| v * 3.0 - 1.0).collect();
    assert_eq!(read_f32(&y), want3);
    // An unknown name is refused naming the image's kernels, as an unknown parameter is.
    let Err(err) = multi.resolve("nothing") else {
        panic!("a kernel named nothing resolved");
    };
    assert!(matches!(err, Error::NoKernel { .. }), "{err}");
    let mut known = multi.kernels().to_vec();
    known.sort();
    assert_eq!(known, ["offset", "scale"]);
    assert_eq!(
        err.to_string(),
        format!(
            "the image has no kernel named \"nothing\"; its kernels: {}",
            multi.kernels().join(", ")
        )
    );
}

fn hidden_arguments_describe_the_grid(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let dims = dev
        .load_image(&b.code("dims"))
        .unwrap()
        .resolve("dims")
        .unwrap();
    let (g, t) = ([2u32, 3, 2], [4u32, 2, 2]);
    let items = (0..3).map(|i| g[i] * t[i]).product::<u32>() as u64;
    let out = dev.buffer(items * 32, Memory::Device).unwrap();
    let s = Submission::new().launch(
        Launch::new(&dims, g, t)
            .params(&[0; 8])
            .refs(&[Ref::write(&out, 0)]),
    );
    dev.submit(&s).unwrap();
    let o = read_u32(&out);
    let w = g[0] * t[0];
    for (k, rec) in o.chunks_exact(8).enumerate() {
        assert_eq!(&rec[..7], &[2, 3, 2, 4, 2, 2, 3], "work-item {k}");
        assert_eq!(rec[7], k as u32 % w, "work-item {k}");
    }
}

fn lds_barriers_and_scratch(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let n = 2048usize;
    let xs: Vec<f32> = (0..n).map(|i| (i % 17) as f32).collect();
    let x = floats(&dev, &xs);
    let sums = dev.buffer(4 * (n / 256) as u64, Memory::Pinned).unwrap();
    let reduce = dev
        .load_image(&b.code("reduce"))
        .unwrap()
        .resolve("reduce")
        .unwrap();
    let s = Submission::new().launch(
        Launch::new(&reduce, [8, 1, 1], [256, 1, 1])
            .params(&[0; 16])
            .refs(&[Ref::read(&x, 0), Ref::write(&sums, 8)]),
    );
    dev.submit(&s).unwrap();
    let want: Vec<f32> = xs.chunks(256).map(|c| c.iter().sum()).collect();
    assert_eq!(read_f32(&sums), want);

    let scratch = dev
        .load_image(&b.code("scratch"))
        .unwrap()
        .resolve("scratch")
        .unwrap();
    let m = 128u32;
    let input = dev.buffer(4 * m as u64, Memory::Pinned).unwrap();
    input
        .write(|b| {
            b.chunks_exact_mut(4)
                .enumerate()
                .for_each(|(i, c)| c.copy_from_slice(&(i as u32 * 7 + 1).to_le_bytes()))
        })
        .unwrap();
    let out = dev.buffer(4 * m as u64, Memory::Pinned).unwrap();
    let s = Submission::new().launch(
        Launch::new(&scratch, [2, 1, 1], [64, 1, 1])
            .params(&[0; 16])
            .refs(&[Ref::read(&input, 0), Ref::write(&out, 8)]),
    );
    dev.submit(&s).unwrap();
    let got = read_u32(&out);
    for i in 0..m {
        let seed = i * 7 + 1;
        let t: Vec<u32> = (0..320u32)
            .map(|k| seed.wrapping_mul(k).wrapping_add(i))
            .collect();
        let acc = (0..64u32).fold(0u32, |a, k| {
            a.wrapping_add(t[(seed.wrapping_add(k * 37) % 320) as usize])
        });
        assert_eq!(got[i as usize], acc, "work-item {i}");
    }
}

fn parts_on_two_queues_keep_their_after_order(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let n = 1024usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let x = floats(&dev, &xs);
    let x2 = dev.buffer(4 * n as u64, Memory::Device).unwrap();
    let y = floats(&dev, &vec![1.0; n]);
    let out = dev.buffer(4 * n as u64, Memory::Pinned).unwrap();
    let add = dev
        .load_image(&b.code("add"))
        .unwrap()
        .resolve("add")
        .unwrap();
    // COPY:0 copies x to x2; COMPUTE:0 adds x2 to y after it, twice; COPY:0 then copies y
    // out after the second launch. Without the order the launches would read zeros or the
    // copy would read y early.
    let s = Submission::new()
        .fill(&x2, 0, 4 * n as u64, 0)
        .copy(&x, 0, &x2, 0, 4 * n as u64)
        .launch(
            Launch::new(&add, [4, 1, 1], [256, 1, 1])
                .params(&[0; 16])
                .refs(&[Ref::read(&x2, 0), Ref::write(&y, 8)]),
        )
        .after(&[1])
        .launch(
            Launch::new(&add, [4, 1, 1], [256, 1, 1])
                .params(&[0; 16])
                .refs(&[Ref::read(&x2, 0), Ref::write(&y, 8)]),
        )
        .copy(&y, 0, &out, 0, 4 * n as u64)
        .after(&[3]);
    for round in 1..=3 {
        dev.submit(&s).unwrap();
        let want: Vec<f32> = xs.iter().map(|v| 1.0 + 2.0 * round as f32 * v).collect();
        assert_eq!(read_f32(&out), want, "round {round}");
    }
}

fn a_faulting_kernel_loses_its_device_alone(b: Backend) {
    let d = Daemon::start(b, None);
    let bad = d.device();
    let good = d.device();
    let add = bad
        .load_image(&b.code("add"))
        .unwrap()
        .resolve("add")
        .unwrap();
    let y = floats(&bad, &[0.0; 256]);
    let x = floats(&bad, &[0.0; 256]);
    let untouched = floats(&bad, &[4.5; 4]);
    // x's parameter holds an offset of 1 TiB: the kernel reads unmapped memory.
    let mut p = [0u8; 16];
    p[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let s = Submission::new().launch(
        Launch::new(&add, [1, 1, 1], [256, 1, 1])
            .params(&p)
            .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
    );
    let point = bad.submit(&s).unwrap();
    match point.wait() {
        Err(e @ Error::Lost { .. }) => assert!(!e.to_string().is_empty()),
        other => panic!("a faulting kernel's wait returned {other:?}"),
    }
    // The memory it last wrote answers Lost too, and so does a later submit.
    assert!(matches!(y.read(|_| ()), Err(Error::Lost { .. })));
    // Memory no work of it used stays readable; new memory is refused.
    assert_eq!(read_f32(&untouched), vec![4.5; 4]);
    assert!(matches!(
        bad.buffer(4, Memory::Pinned),
        Err(Error::Lost { .. })
    ));
    assert!(matches!(
        bad.submit(&Submission::new()),
        Err(Error::Lost { .. })
    ));
    // Another client's work runs on.
    let add2 = good
        .load_image(&b.code("add"))
        .unwrap()
        .resolve("add")
        .unwrap();
    let gx = floats(&good, &[2.0; 256]);
    let gy = floats(&good, &[5.0; 256]);
    let s = Submission::new().launch(
        Launch::new(&add2, [1, 1, 1], [256, 1, 1])
            .params(&[0; 16])
            .refs(&[Ref::read(&gx, 0), Ref::write(&gy, 8)]),
    );
    good.submit(&s).unwrap();
    assert_eq!(read_f32(&gy), vec![7.0; 256]);
}

fn a_kernel_that_never_ends_is_lost_after_hang_ms(b: Backend) {
    let Some(spin) = b.spin_kernel() else {
        return;
    };
    let d = Daemon::start(b, Some(300));
    let dev = d.device();
    let k = dev.load_image(&spin).unwrap().resolve("spin").unwrap();
    let flag = dev.buffer(4, Memory::Pinned).unwrap();
    flag.write(|b| b.fill(0)).unwrap();
    let s = Submission::new().launch(
        Launch::new(&k, [1, 1, 1], [1, 1, 1])
            .params(&[0; 8])
            .refs(&[Ref::write(&flag, 0)]),
    );
    let start = Instant::now();
    let r = dev.submit(&s).unwrap().wait();
    assert!(
        matches!(r, Err(Error::Lost { .. })),
        "{r:?} after {:?}",
        start.elapsed()
    );
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(10),
        "lost after {took:?}"
    );
}

fn a_burst_of_launches_grows_the_compute_ring_and_the_segment(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let n = 256usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let x = floats(&dev, &xs);
    let y = floats(&dev, &vec![1.0; n]);
    let add = dev
        .load_image(&b.code("add"))
        .unwrap()
        .resolve("add")
        .unwrap();
    // 600 launches: some 40,000 words of packets and 600 argument blocks, far past the
    // 64 KiB compute ring and segment a device opens with.
    let mut s = Submission::new();
    for _ in 0..600 {
        s = s.launch(
            Launch::new(&add, [1, 1, 1], [256, 1, 1])
                .params(&[0; 16])
                .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
        );
    }
    dev.submit(&s).unwrap();
    let want: Vec<f32> = xs.iter().map(|v| 1.0 + 600.0 * v).collect();
    assert_eq!(read_f32(&y), want);
    // And small submissions after it run on the grown queues.
    let one = Submission::new().launch(
        Launch::new(&add, [1, 1, 1], [256, 1, 1])
            .params(&[0; 16])
            .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
    );
    dev.submit(&one).unwrap();
    let want: Vec<f32> = xs.iter().map(|v| 1.0 + 601.0 * v).collect();
    assert_eq!(read_f32(&y), want);
}

fn words_parts_run_as_given(b: Backend) {
    use rig_amd::{pm4, sdma};
    let d = Daemon::start(b, None);
    let dev = d.device();
    let b = dev.buffer(64, Memory::Pinned).unwrap();
    b.write(|x| x.fill(0)).unwrap();
    // COMPUTE:0: a WRITE_DATA of two words; COPY:0: a FENCE of one word, after it.
    let data = [0x1111_2222u32, 0x3333_4444];
    let w = pm4::WriteData {
        dst_sel: 5,
        one_addr: false,
        wr_confirm: true,
        cache_policy: 0,
        engine_sel: 0,
        address: b.address(),
        data: &data,
    };
    let mut pm = vec![0u32; w.words()];
    w.encode(&mut pm).unwrap();
    // An AQL queue reads packets of 16 words: there the WRITE_DATA goes in an indirect
    // buffer that a PM4-IB packet calls.
    let (pm, _ib) = crate::compute_words::pm4_words(&dev, &pm);
    let mut fence = vec![0u32; sdma::Fence::WORDS];
    sdma::Fence {
        mtype: 0,
        address: b.address() + 8,
        value: 0x5555_6666,
    }
    .encode(&mut fence)
    .unwrap();
    let s = Submission::new()
        .words(rig_client::Queue::Compute, &pm)
        .words(rig_client::Queue::Copy, &fence)
        .after(&[0]);
    dev.submit(&s).unwrap().wait().unwrap();
    let got = read_u32(&b);
    assert_eq!(&got[..3], &[0x1111_2222, 0x3333_4444, 0x5555_6666]);
}

fn corpus(b: Backend, name: &str) -> Vec<u8> {
    let p = b.corpus_dir().join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn corpus_matmul_and_vadd_in_wave32_and_wave64(backend: Backend) {
    let d = Daemon::start(backend, None);
    let dev = d.device();
    let n = 48u32;
    let a: Vec<f32> = (0..n * n).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
    let b: Vec<f32> = (0..n * n).map(|i| ((i * 5) % 11) as f32 * 0.5).collect();
    let mut want = vec![0f32; (n * n) as usize];
    for r in 0..n as usize {
        for c in 0..n as usize {
            let mut acc = 0f32;
            for k in 0..n as usize {
                acc = a[r * n as usize + k].mul_add(b[k * n as usize + c], acc);
            }
            want[r * n as usize + c] = acc;
        }
    }
    let (ba, bb) = (floats(&dev, &a), floats(&dev, &b));
    // gfx942 runs waves of 64 only: its -O2 builds are its wave64 ones.
    let builds: &[&str] = if backend.processor() == "gfx942" {
        &["O2"]
    } else {
        &["O2", "W64"]
    };
    for file in builds.iter().map(|b| format!("matmul.{b}.co")) {
        let mm = dev
            .load_image(&corpus(backend, &file))
            .unwrap()
            .resolve("matmul")
            .unwrap();
        let c = dev.buffer(4 * u64::from(n * n), Memory::Pinned).unwrap();
        let mut p = vec![0u8; 28];
        p[24..].copy_from_slice(&n.to_le_bytes());
        let refs = [Ref::read(&ba, 0), Ref::read(&bb, 8), Ref::write(&c, 16)];
        let s = Submission::new().launch(
            Launch::new(&mm, [n / 16, n / 16, 1], [16, 16, 1])
                .params(&p)
                .refs(&refs),
        );
        dev.submit(&s).unwrap();
        assert_eq!(read_f32(&c), want, "{file}");
    }
    for file in builds.iter().map(|b| format!("vadd_f32.{b}.co")) {
        let vadd = dev
            .load_image(&corpus(backend, &file))
            .unwrap()
            .resolve("vadd_f32")
            .unwrap();
        let out = dev.buffer(4 * 300, Memory::Pinned).unwrap();
        let mut p = vec![0u8; 28];
        p[24..].copy_from_slice(&300u32.to_le_bytes());
        let refs = [Ref::read(&ba, 0), Ref::read(&bb, 8), Ref::write(&out, 16)];
        let s = Submission::new().launch(
            Launch::new(&vadd, [5, 1, 1], [64, 1, 1])
                .params(&p)
                .refs(&refs),
        );
        dev.submit(&s).unwrap();
        let want: Vec<f32> = (0..300).map(|i| a[i] + b[i]).collect();
        assert_eq!(read_f32(&out), want, "{file}");
    }
    // At -O0 the kernel reads implicit arguments that are a runtime's services: refused.
    let o0 = dev.load_image(&corpus(backend, "vadd_f32.O0.co")).unwrap();
    match o0.resolve("vadd_f32") {
        Err(Error::Refused { code, message }) => {
            assert_eq!(code, rig_client::Refusal::EntryRefused);
            assert!(message.contains("vadd_f32"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

/// The launches above run where the backend says: a simulated gfx1201, with gfx1201 code.
fn the_rigd_serves_a_simulated_gfx1201(b: Backend) {
    let d = Daemon::start(b, None);
    let gpus = d.rig().gpus().unwrap();
    assert_eq!(gpus[0].arch, "gfx1201");
    assert_eq!(gpus[0].path, rig_client::GpuPath::Sim);
    // A gfx1100 build is refused there, so every launch above ran a gfx1201 build.
    let dev = d.device();
    assert!(dev.load_image(&Backend::Sim.code("add")).is_err());
    assert!(dev.load_image(&b.code("add")).is_ok());
}

/// The tests run where the backend says: a gfx942 (simulated, or an emulated KFD's) whose
/// compute queue reads AQL packets, with gfx942 code. The client places each launch as a
/// kernel-dispatch packet and each value's waits and release as PM4-IB packets.
fn the_rigd_serves_a_gfx942_with_an_aql_queue(b: Backend) {
    let d = Daemon::start(b, None);
    let gpus = d.rig().gpus().unwrap();
    assert_eq!(gpus[0].arch, "gfx942");
    let path = if b.is_kfd() {
        rig_client::GpuPath::Kfd
    } else {
        rig_client::GpuPath::Sim
    };
    assert_eq!(gpus[0].path, path);
    let dev = d.device();
    assert_eq!(dev.facts().compute_packets, rig_client::Packets::Aql);
    // A gfx1100 build is refused there, so every launch ran a gfx942 build.
    assert!(dev.load_image(&Backend::Sim.code("add")).is_err());
    assert!(dev.load_image(&b.code("add")).is_ok());
}

rig_testkit::on_backends!(sim, kfd, gfx1201, gfx942, kfd_gfx942 =>
    add_saxpy_and_two_kernels_of_one_image,
    hidden_arguments_describe_the_grid,
    lds_barriers_and_scratch,
    parts_on_two_queues_keep_their_after_order,
    a_faulting_kernel_loses_its_device_alone,
    a_kernel_that_never_ends_is_lost_after_hang_ms,
    a_burst_of_launches_grows_the_compute_ring_and_the_segment,
    words_parts_run_as_given,
    corpus_matmul_and_vadd_in_wave32_and_wave64,
);
rig_testkit::on_backends!(gfx1201 => the_rigd_serves_a_simulated_gfx1201);
rig_testkit::on_backends!(gfx942, kfd_gfx942 => the_rigd_serves_a_gfx942_with_an_aql_queue);
