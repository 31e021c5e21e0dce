//! Kernels built from source with rig-kernels, launched with typed arguments: parameters
//! by name and position, checked against the code object's metadata, dynamic LDS for
//! `local` pointers placed after the static LDS.

use rig_client::{ArgError, Memory, ParamKind, Submission, f32s, put_f32s};
use rig_kernels::{Compiler, Options, Source};
use rig_testkit::{Backend, Daemon};

const SCALE: &str = "
kernel void scale(global const float *x, global float *y, float a, uint n, local float *tmp,
                  local uint *flags) {
    local float fixed[64];
    size_t i = get_global_id(0);
    uint l = get_local_id(0);
    fixed[l] = a;
    tmp[l] = x[i];
    flags[l] = (uint)(size_t)flags;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (i < n)
        y[i] = tmp[l] * fixed[l] + (float)flags[(l + 1) % get_local_size(0)];
}";

/// `src` built for the backend's processor.
fn build(b: Backend, src: Source) -> Vec<u8> {
    Compiler::find()
        .expect("clang-19 and ld.lld-19")
        .compile(&src, b.processor(), &Options::default())
        .expect("the kernel builds")
}

fn a_kernel_from_opencl_source_runs_with_arguments_by_name(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let image = dev
        .load_image(&build(b, Source::opencl("scale.cl", SCALE)))
        .unwrap();
    let k = image.resolve("scale").unwrap();

    let kinds: Vec<_> = k
        .arguments()
        .iter()
        .map(|p| (p.name.clone().unwrap(), p.kind.clone(), p.offset, p.size))
        .collect();
    assert_eq!(
        kinds,
        [
            ("x".into(), ParamKind::Buffer, 0, 8),
            ("y".into(), ParamKind::Buffer, 8, 8),
            ("a".into(), ParamKind::Value, 16, 4),
            ("n".into(), ParamKind::Value, 20, 4),
            ("tmp".into(), ParamKind::Local, 24, 4),
            ("flags".into(), ParamKind::Local, 28, 4),
        ]
    );
    assert_eq!(k.arguments()[0].address_space.as_deref(), Some("global"));
    assert_eq!(k.arguments()[4].address_space.as_deref(), Some("local"));
    assert_eq!(k.static_lds(), 256, "local float fixed[64]");
    assert_eq!(k.scratch(), 0);
    assert!(k.registers().vgprs > 0 && k.registers().sgprs > 0);

    const N: u32 = 200;
    let x = dev.buffer(4 * 256, Memory::Pinned).unwrap();
    let y = dev.buffer(4 * 256, Memory::Pinned).unwrap();
    x.write(|b| put_f32s(b, (0..256).map(|i| i as f32)))
        .unwrap();
    y.write(|b| put_f32s(b, std::iter::repeat(-1.0))).unwrap();
    let mut args = k.args();
    args.read("x", &x)
        .unwrap()
        .buffer("y", &y)
        .unwrap()
        .value("a", 2.0f32)
        .unwrap()
        .value(3, N)
        .unwrap()
        .local("tmp", 64 * 4)
        .unwrap()
        .local("flags", 64 * 4)
        .unwrap();
    // tmp after the 256 static bytes; flags after tmp, at the next 32-byte boundary.
    assert_eq!(&args.params()[24..32], &[0, 1, 0, 0, 0, 2, 0, 0]);
    assert_eq!(args.shared(), 512);
    let s = Submission::new().launch(args.launch([4, 1, 1], [64, 1, 1]));
    dev.submit(&s).unwrap().wait().unwrap();
    y.read(|b| {
        for (i, v) in f32s(b).enumerate() {
            let want = if i < N as usize {
                2.0 * i as f32 + 512.0
            } else {
                -1.0
            };
            assert_eq!(v, want, "y[{i}]");
        }
    })
    .unwrap();
}

fn a_hip_kernel_from_source_runs_with_arguments_by_position(b: Backend) {
    let src = r#"extern "C" __global__ void axpy(float a, const float *x, float *y) {
        unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        y[i] += a * x[i] + gridDim.x;
    }"#;
    let d = Daemon::start(b, None);
    let dev = d.device();
    let image = dev
        .load_image(&build(b, Source::hip("axpy.hip", src)))
        .unwrap();
    let k = image.resolve("axpy").unwrap();
    let x = dev.buffer(4 * 128, Memory::Pinned).unwrap();
    let y = dev.buffer(4 * 128, Memory::Pinned).unwrap();
    x.write(|b| put_f32s(b, (0..128).map(|i| i as f32)))
        .unwrap();
    y.write(|b| put_f32s(b, std::iter::repeat(1.0))).unwrap();
    let mut args = k.args();
    args.value(0, 3.0f32)
        .unwrap()
        .read(1, &x)
        .unwrap()
        .buffer(2, &y)
        .unwrap();
    let s = Submission::new().launch(args.launch([4, 1, 1], [32, 1, 1]));
    dev.submit(&s).unwrap().wait().unwrap();
    y.read(|b| {
        for (i, v) in f32s(b).enumerate() {
            assert_eq!(v, 1.0 + 3.0 * i as f32 + 4.0, "y[{i}]");
        }
    })
    .unwrap();
}

fn arguments_of_the_wrong_kind_or_size_or_unset_are_refused_by_name(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let image = dev
        .load_image(&build(b, Source::opencl("scale.cl", SCALE)))
        .unwrap();
    let k = image.resolve("scale").unwrap();
    let x = dev.buffer(64, Memory::Pinned).unwrap();
    let mut args = k.args();
    let err = args.value("x", 1u32).unwrap_err();
    assert!(
        matches!(
            err,
            ArgError::Kind {
                takes: ParamKind::Buffer,
                given: "a value",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "kernel scale's \"x\" (parameter 0) takes a global pointer (a buffer), not a value"
    );
    assert!(matches!(
        args.value("a", 1.0f64),
        Err(ArgError::Size {
            size: 4,
            given: 8,
            ..
        })
    ));
    assert!(matches!(
        args.buffer("a", &x),
        Err(ArgError::Kind {
            takes: ParamKind::Value,
            ..
        })
    ));
    assert!(matches!(
        args.bytes("x", &[0; 8]),
        Err(ArgError::Kind { .. })
    ));
    assert!(matches!(args.local("n", 4), Err(ArgError::Kind { .. })));
    assert!(matches!(
        args.buffer("tmp", &x),
        Err(ArgError::Kind {
            takes: ParamKind::Local,
            ..
        })
    ));
    let err = args.value("z", 1u32).unwrap_err();
    assert_eq!(
        err.to_string(),
        "kernel scale has no parameter named \"z\"; its parameters: x, y, a, n, tmp, flags"
    );
    assert!(matches!(
        args.value(6, 1u32),
        Err(ArgError::NoIndex {
            index: 6,
            count: 6,
            ..
        })
    ));
    assert!(matches!(
        args.buffer_at("x", &x, 65, rig_client::Access::Read),
        Err(ArgError::Offset {
            offset: 65,
            len: 64,
            ..
        })
    ));
    assert!(matches!(
        args.local_aligned("tmp", 4, 3),
        Err(ArgError::Local { .. })
    ));
    assert!(matches!(
        args.local("tmp", u32::MAX),
        Err(ArgError::Local { .. })
    ));
    args.buffer("x", &x)
        .unwrap()
        .buffer("y", &x)
        .unwrap()
        .value("a", 1.0f32)
        .unwrap();
    // The submission's one channel of refusals carries the argument error, and submit
    // returns it.
    let s = Submission::new().launch(args.launch([1; 3], [64, 1, 1]));
    let refused = s
        .refused()
        .cloned()
        .expect("an unset parameter refuses the launch");
    assert_eq!(
        refused.to_string(),
        "part 0: kernel scale's \"n\" (parameter 3) (a value) is not set"
    );
    assert!(matches!(
        refused,
        rig_client::Never::Args {
            part: 0,
            error: ArgError::Unset { .. }
        }
    ));
    assert!(matches!(
        dev.submit(&s),
        Err(rig_client::Error::Never(rig_client::Never::Args { .. }))
    ));
    // Dynamic LDS past the GPU's is the launch's refusal, as with the raw form.
    args.value("n", 1u32)
        .unwrap()
        .local("tmp", 4)
        .unwrap()
        .local("flags", 1 << 20)
        .unwrap();
    let s = Submission::new().launch(args.launch([1; 3], [64, 1, 1]));
    assert!(
        matches!(s.refused(), Some(rig_client::Never::TooMuchShared { .. })),
        "{:?}",
        s.refused()
    );
}

rig_testkit::on_backends!(sim, kfd, gfx942, kfd_gfx942 =>
    a_kernel_from_opencl_source_runs_with_arguments_by_name,
    a_hip_kernel_from_source_runs_with_arguments_by_position,
    arguments_of_the_wrong_kind_or_size_or_unset_are_refused_by_name,
);
