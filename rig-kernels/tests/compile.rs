//! Sources built for each processor rig knows, checked by rig_amd's parser; and the errors
//! a program author meets when the toolchain is missing, too old, or refuses the source.

use std::os::unix::fs::PermissionsExt;

use rig_amd::code_object::CodeObject;
use rig_kernels::{Compiler, Error, Options, Source};

const ADD_CL: &str = "kernel void add(global const float *x, global float *y, local float *t) {
    size_t i = get_global_id(0);
    t[get_local_id(0)] = x[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    y[i] += t[get_local_id(0)] + get_num_groups(0) * get_local_size(0) - get_global_size(0);
}";

const ADD_HIP: &str = r#"extern "C" __global__ void add(const float *x, float *y) {
    __shared__ float t[256];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    t[threadIdx.x] = x[i];
    __syncthreads();
    y[i] += t[threadIdx.x] + gridDim.x - gridDim.x;
}"#;

#[test]
fn opencl_and_hip_build_for_every_processor_without_rocm() {
    let c = Compiler::find().expect("clang-19 and ld.lld-19, as CI installs");
    assert!(c.version().0 >= rig_kernels::MIN_LLVM);
    for p in [
        "gfx1100",
        "gfx1201",
        "gfx942",
        "gfx11-generic",
        "gfx90a:xnack+",
    ] {
        let cl = c
            .compile(&Source::opencl("add.cl", ADD_CL), p, &Options::default())
            .unwrap();
        let co = CodeObject::parse(&cl).unwrap();
        assert_eq!(co.processor().name(), p.split(':').next().unwrap(), "{p}");
        assert_eq!(co.undefined().count(), 0);
        let add = co.kernel("add").unwrap();
        let kinds: Vec<_> = add.explicit_args().map(|a| a.kind.value_kind()).collect();
        assert_eq!(
            kinds,
            ["global_buffer", "global_buffer", "dynamic_shared_pointer"]
        );

        let hip = c
            .compile(&Source::hip("add.hip", ADD_HIP), p, &Options::default())
            .unwrap();
        let co = CodeObject::parse(&hip).unwrap();
        let add = co.kernel("add").expect("extern \"C\" keeps the name");
        assert_eq!(add.group_segment_size(), 1024, "{p}: __shared__ float[256]");
        assert_eq!(add.explicit_args().count(), 2);
    }
}

#[test]
fn options_reach_the_compiler() {
    let c = Compiler::find().unwrap();
    let src = Source::opencl("n.cl", "kernel void k(global int *y) { y[0] = N; }");
    // Without the macro the source does not build, and the diagnostics say why.
    match c.compile(&src, "gfx1100", &Options::default()) {
        Err(Error::Failed {
            program,
            diagnostics,
            processor,
            ..
        }) => {
            assert_eq!(program, "clang");
            assert_eq!(processor, "gfx1100");
            assert!(
                diagnostics.contains("use of undeclared identifier 'N'"),
                "{diagnostics}"
            );
        }
        r => panic!("{r:?}"),
    }
    let v4 = c
        .compile(
            &src,
            "gfx1100",
            &Options::default().define("N", 7).code_object_version(4),
        )
        .unwrap();
    assert_eq!(CodeObject::parse(&v4).unwrap().version(), 4);
    // Without the prelude get_global_id is not declared.
    let add = Source::opencl("add.cl", ADD_CL);
    let err = c
        .compile(&add, "gfx1100", &Options::default().without_prelude())
        .unwrap_err();
    assert!(err.to_string().contains("get_global_id"), "{err}");
}

#[test]
fn sources_from_files_include_their_neighbours_and_the_prelude_by_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("scale.h"), "#define SCALE 3.0f\n").unwrap();
    let cl = dir.path().join("scale.cl");
    std::fs::write(
        &cl,
        "#include \"rig.h\"\n#include \"scale.h\"\nkernel void scale(global float *y) { y[rig_global_id(0)] *= SCALE; }\n",
    )
    .unwrap();
    let c = Compiler::find().unwrap();
    let code = c
        .compile(
            &Source::file(&cl).unwrap(),
            "gfx1100",
            &Options::default().without_prelude(),
        )
        .unwrap();
    assert!(CodeObject::parse(&code).unwrap().kernel("scale").is_some());
    let built = rig_kernels::build::compile_into(
        &cl,
        &["gfx1100", "gfx942"],
        &Options::default(),
        dir.path(),
    )
    .unwrap();
    assert_eq!(
        built,
        [
            dir.path().join("scale.gfx1100.co"),
            dir.path().join("scale.gfx942.co")
        ]
    );
    assert!(matches!(
        Source::file(dir.path().join("scale.h")),
        Err(Error::Language(_))
    ));
}

#[test]
fn a_missing_or_old_toolchain_says_what_to_install() {
    let err = Compiler::with("/nonexistent/clang-19", "ld.lld-19").unwrap_err();
    assert!(matches!(err, Error::ClangMissing { .. }), "{err:?}");
    assert!(
        err.to_string().contains("apt install clang-19 lld-19"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let fake = |name: &str, said: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\necho '{said}'\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    };
    let old = fake("clang-15", "Ubuntu clang version 15.0.7");
    match Compiler::with(&old, "ld.lld-19") {
        Err(e @ Error::TooOld { .. }) => assert!(e.to_string().contains("15.0.7"), "{e}"),
        r => panic!("{r:?}"),
    }
    let gcc = fake("gcc", "gcc (Debian 12.2.0-14) 12.2.0");
    assert!(matches!(
        Compiler::with(&gcc, "ld.lld-19"),
        Err(Error::NotClang { .. })
    ));
    let err = Compiler::with("clang-19", "/nonexistent/ld.lld").unwrap_err();
    assert!(matches!(err, Error::LldMissing { .. }), "{err:?}");
    let c = Compiler::find().unwrap();
    let src = Source::opencl("a.cl", ADD_CL);
    assert!(matches!(
        c.compile(&src, "gfx1100 -o /tmp/x", &Options::default()),
        Err(Error::Processor(_))
    ));
}

#[test]
fn diagnostics_name_the_authors_file_not_a_temporary_copy() {
    let c = Compiler::find().unwrap();
    let text = "kernel void saxpy(global float *y) {\n  size_t i = get_global_id(0);\n  y[i] = a * y[i];\n}\n";
    let err = c
        .compile(
            &Source::opencl("saxpy.cl", text),
            "gfx1100",
            &Options::default(),
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("saxpy.cl:3:10"), "{err}");
    assert!(
        !err.contains("source.cl") && !err.contains("rig-kernels-"),
        "{err}"
    );
    // A file keeps its path.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("saxpy.cl");
    std::fs::write(&path, text).unwrap();
    let err = c
        .compile(
            &Source::file(&path).unwrap(),
            "gfx1100",
            &Options::default(),
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("{}:3:10", path.display())), "{err}");
}

#[test]
fn a_linker_that_is_not_lld_is_refused_up_front() {
    let err = Compiler::with("clang-19", "/bin/true").unwrap_err();
    assert!(matches!(err, Error::NotLld { .. }), "{err:?}");
    assert!(err.to_string().contains("RIG_LLD"), "{err}");
}

#[test]
fn a_function_the_preludes_lack_fails_the_build_saying_what_to_install() {
    let c = Compiler::find().unwrap();
    let src = Source::opencl(
        "atan.cl",
        "kernel void k(global float *y) { y[0] = atan(y[0]); }",
    );
    match c.compile(&src, "gfx1100", &Options::default()) {
        Err(
            e @ Error::Failed {
                program: "ld.lld", ..
            },
        ) => {
            let text = e.to_string();
            assert!(
                text.contains("atan") && text.contains("Options::rocm"),
                "{text}"
            );
        }
        r => panic!("{r:?}"),
    }
}
