//! A thread keeps its waves and LDS from one dispatch for the next: dispatches of other shapes
//! (wave64 after wave32, other VGPR counts, LDS after none) on the same thread run as if their
//! waves were new.

mod common;

use common::{Arg, Case, mem_for, prepare, read_back, run};

fn f32s(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|k| ((k as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 1000) as f32 * 0.01)
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn case(name: &'static str, opt: &'static str, a: &[f32], b: &[f32], n: u32) -> Case {
    let (grid, group) = if name == "matmul" {
        ([n, n, 1], [16, 16, 1])
    } else {
        ([n, 1, 1], [128, 1, 1])
    };
    Case {
        name,
        opt,
        grid,
        group,
        bufs: vec![bytes(a), bytes(b), vec![0; 4 * a.len()]],
        args: vec![
            Arg::Buf(0, ""),
            Arg::Buf(1, ""),
            Arg::Buf(2, ""),
            Arg::U32(n),
        ],
    }
}

#[test]
fn dispatches_of_other_shapes_on_one_thread_start_fresh() {
    let n = 32usize;
    let (a, b) = (f32s(n * n, 1), f32s(n * n, 2));
    let vadd: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    // The kernel's order: acc = fma(a[row][k], b[k][col], acc) for k upwards.
    let matmul: Vec<f32> = (0..n * n)
        .map(|i| {
            (0..n).fold(0f32, |acc, k| {
                a[i / n * n + k].mul_add(b[k * n + i % n], acc)
            })
        })
        .collect();
    // Wave size, VGPR count and LDS change from each dispatch to the next.
    let order = [
        ("vadd_f32", "O2"),
        ("vadd_f32", "W64"),
        ("matmul", "O2"),
        ("vadd_f32", "O2"),
        ("matmul", "W64"),
        ("vadd_f32", "W64"),
        ("matmul", "O2"),
        ("vadd_f32", "O0"),
    ];
    for (name, opt) in order {
        let (c, want) = if name == "matmul" {
            (case(name, opt, &a, &b, n as u32), &matmul)
        } else {
            (case(name, opt, &a, &b, (n * n) as u32), &vadd)
        };
        let mem = mem_for(&c);
        let (d, addrs) = prepare(&mem, &c);
        run(&d, &mem, 1);
        let got = &read_back(&mem, &c, &addrs)[2];
        assert!(
            got == &bytes(want),
            "{name}.{opt} after a dispatch of another shape differs from the host"
        );
    }
}
