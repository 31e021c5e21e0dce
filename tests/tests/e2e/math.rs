//! OpenCL C's and HIP's float math without ROCm: kernels built by rig-kernels with its
//! preludes alone call sin, cos, tan, exp, log, sqrt, pow, fabs and fma, run on the GPU, and
//! agree with the host within OpenCL's bounds (OpenCL C 2.0, section 7.4: sin, cos 4 ulp;
//! tan 5; exp, log, sqrt 3; pow 16; fabs and fma exact).

use rig_client::{Memory, Submission, f32s, put_f32s};
use rig_kernels::{Compiler, Options, Source};
use rig_testkit::{Backend, Daemon};

/// What each item computes, in its output's order, with OpenCL's bound in ulp.
const FUNCTIONS: [(&str, u32); 9] = [
    ("sin", 4),
    ("cos", 4),
    ("tan", 5),
    ("exp", 3),
    ("log", 3),
    ("sqrt", 3),
    ("pow", 16),
    ("fabs", 0),
    ("fma", 0),
];

const OPENCL: &str =
    "kernel void math(global const float *x, global const float *y, global float *out) {
    size_t i = get_global_id(0);
    float a = x[i], b = y[i];
    global float *o = out + 9 * i;
    o[0] = sin(a);
    o[1] = cos(a);
    o[2] = tan(a);
    o[3] = exp(b);
    o[4] = log(fabs(a));
    o[5] = sqrt(fabs(a));
    o[6] = pow(fabs(b) * 0.25f, b);
    o[7] = fabs(a);
    o[8] = fma(a, b, 0.5f);
}";

const HIP: &str = r#"extern "C" __global__ void math(const float *x, const float *y, float *out) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    float a = x[i], b = y[i];
    float *o = out + 9 * i;
    o[0] = sinf(a);
    o[1] = cos(a);
    o[2] = tanf(a);
    o[3] = expf(b);
    o[4] = log(fabsf(a));
    o[5] = sqrtf(fabs(a));
    o[6] = powf(fabsf(b) * 0.25f, b);
    o[7] = fabsf(a);
    o[8] = fmaf(a, b, 0.5f);
}"#;

/// The host's answers (in double, then rounded) for one item.
fn host(a: f32, b: f32) -> [f32; 9] {
    let (a64, b64) = (f64::from(a), f64::from(b));
    [
        a64.sin() as f32,
        a64.cos() as f32,
        a64.tan() as f32,
        b64.exp() as f32,
        a64.abs().ln() as f32,
        a64.abs().sqrt() as f32,
        (b64.abs() * 0.25).powf(b64) as f32,
        a.abs(),
        a.mul_add(b, 0.5),
    ]
}

/// How many ulp of `want` lie between `got` and `want`; NaN matches NaN, infinities match
/// themselves.
fn ulps(got: f32, want: f32) -> u32 {
    if got.is_nan() && want.is_nan() || got == want {
        return 0;
    }
    if !got.is_finite() || !want.is_finite() {
        return u32::MAX;
    }
    // The spacing of floats at `want` (at least the smallest subnormal's).
    let ulp = (f32::from_bits(want.abs().to_bits() + 1) - want.abs()).max(f32::from_bits(1));
    let diff = (f64::from(got) - f64::from(want)).abs() / f64::from(ulp);
    diff.ceil().min(f64::from(u32::MAX)) as u32
}

/// The inputs: arguments from tiny to the largest floats (sin's and cos's reduction), and
/// exponents over exp's and pow's range.
fn inputs(n: usize) -> (Vec<f32>, Vec<f32>) {
    let mut x = Vec::with_capacity(n);
    let fixed = [
        0.0f32,
        -0.0,
        1e-30,
        0.5,
        1.0,
        std::f32::consts::FRAC_PI_2,
        std::f32::consts::PI,
        -3.0,
        100.0,
        12345.678,
        16777216.0,
        1e9,
        -3.1e12,
        1e20,
        f32::MAX,
        -f32::MAX,
    ];
    x.extend_from_slice(&fixed);
    let mut state = 0x2545_f491_4f6c_dd1du64;
    while x.len() < n {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // Sign, exponent from 2^-20 to 2^120, any mantissa.
        let exp = (state >> 40) % 140;
        let bits =
            ((state >> 63) << 31) as u32 | ((exp as u32 + 107) << 23) | (state as u32 & 0x7f_ffff);
        x.push(f32::from_bits(bits));
    }
    let y = (0..n)
        .map(|i| (i as f32 / n as f32) * 160.0 - 80.0)
        .collect();
    (x, y)
}

fn check(language: &str, source: Source) {
    let Ok(compiler) = Compiler::find() else {
        eprintln!("skipped: clang and lld (17 or later) are needed to build the kernels");
        return;
    };
    let d = Daemon::start(Backend::Sim, None);
    let device = d.device();
    let code = compiler
        .compile(&source, device.arch(), &Options::default())
        .unwrap_or_else(|e| panic!("{language}: {e}"));
    let math = device.load_image(&code).unwrap().resolve("math").unwrap();

    const N: usize = 1024;
    let (xs, ys) = inputs(N);
    let x = device.buffer(4 * N as u64, Memory::Pinned).unwrap();
    let y = device.buffer(4 * N as u64, Memory::Pinned).unwrap();
    let out = device.buffer(4 * 9 * N as u64, Memory::Pinned).unwrap();
    x.write(|b| put_f32s(b, xs.iter().copied())).unwrap();
    y.write(|b| put_f32s(b, ys.iter().copied())).unwrap();
    let mut args = math.args();
    args.read(0, &x)
        .unwrap()
        .read(1, &y)
        .unwrap()
        .buffer(2, &out)
        .unwrap();
    let launch = Submission::new().launch(args.launch([N as u32 / 256, 1, 1], [256, 1, 1]));
    device.submit(&launch).unwrap().wait().unwrap();
    let got: Vec<f32> = out.read(|b| f32s(b).collect()).unwrap();

    let mut worst = [(0u32, 0.0f32, 0.0f32, 0.0f32, 0.0f32); 9];
    for i in 0..N {
        let want = host(xs[i], ys[i]);
        for (f, w) in want.iter().enumerate() {
            let g = got[9 * i + f];
            let u = ulps(g, *w);
            if u > worst[f].0 {
                worst[f] = (u, xs[i], ys[i], g, *w);
            }
        }
    }
    for (f, (name, bound)) in FUNCTIONS.iter().enumerate() {
        let (u, a, b, g, w) = worst[f];
        eprintln!("{language} {name}: at most {u} ulp from the host");
        assert!(
            u <= *bound,
            "{language} {name}: {u} ulp (bound {bound}) at x = {a:e}, y = {b:e}: got {g:e}, the host {w:e}"
        );
    }
    device.close().unwrap();
}

#[test]
fn opencl_math_runs_without_rocm_within_opencls_bounds() {
    check("OpenCL C", Source::opencl("math.cl", OPENCL));
}

#[test]
fn hip_math_runs_without_rocm_within_opencls_bounds() {
    check("HIP", Source::hip("math.hip", HIP));
}
