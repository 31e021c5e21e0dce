//! Shares of a dispatch's workgroups (`execute_workgroups`, one die's share on a GPU of several
//! dies): running every share of a round-robin partition at once computes exactly what one
//! `execute` of the whole dispatch computes, and each share runs its workgroups only.

mod common;

use std::sync::atomic::AtomicBool;

use common::{Arg, Case, mem_for, prepare, read_back, run};
use rig_isa::{Workgroups, execute_workgroups};

fn f32s(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|k| {
            ((k as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 1000) as f32 * 0.25 + 1.0
        })
        .flat_map(f32::to_le_bytes)
        .collect()
}

fn cases() -> Vec<Case> {
    let n = 48u32;
    let len = 5000u32;
    vec![
        Case {
            name: "matmul",
            opt: "O2",
            grid: [n, n, 1],
            group: [16, 16, 1],
            bufs: vec![
                f32s((n * n) as usize, 1),
                f32s((n * n) as usize, 2),
                vec![0; 4 * (n * n) as usize],
            ],
            args: vec![
                Arg::Buf(0, ""),
                Arg::Buf(1, ""),
                Arg::Buf(2, ""),
                Arg::U32(n),
            ],
        },
        Case {
            name: "vadd_f32",
            opt: "O2",
            grid: [len, 1, 1],
            group: [64, 1, 1],
            bufs: vec![
                f32s(len as usize, 3),
                f32s(len as usize, 4),
                vec![0; 4 * len as usize],
            ],
            args: vec![
                Arg::Buf(0, ""),
                Arg::Buf(1, ""),
                Arg::Buf(2, ""),
                Arg::U32(len),
            ],
        },
    ]
}

#[test]
fn round_robin_shares_run_at_once_compute_the_whole_dispatch() {
    for c in cases() {
        let whole = {
            let mem = mem_for(&c);
            let (d, addrs) = prepare(&mem, &c);
            run(&d, &mem, 1);
            read_back(&mem, &c, &addrs)
        };
        for dies in [1u32, 3, 8] {
            let mem = mem_for(&c);
            let (d, addrs) = prepare(&mem, &c);
            let total = d.workgroup_count();
            let stop = AtomicBool::new(false);
            let counts: Vec<u64> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..dies)
                    .map(|die| {
                        let (d, mem, stop) = (&d, &mem, &stop);
                        s.spawn(move || {
                            let share = Workgroups::round_robin(die, dies);
                            execute_workgroups(d, share, mem, stop, 2)
                                .unwrap_or_else(|e| panic!("{}: {e}", c.name))
                                .workgroups
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for (die, n) in counts.iter().enumerate() {
                assert_eq!(
                    *n,
                    Workgroups::round_robin(die as u32, dies).count(total),
                    "{}: die {die} of {dies}",
                    c.name
                );
            }
            assert_eq!(counts.iter().sum::<u64>(), total);
            assert_eq!(
                read_back(&mem, &c, &addrs),
                whole,
                "{} over {dies} dies",
                c.name
            );
        }
    }
}

#[test]
fn a_share_runs_only_its_workgroups() {
    let c = &cases()[1];
    let mem = mem_for(c);
    let (d, addrs) = prepare(&mem, c);
    let stop = AtomicBool::new(false);
    // Workgroups 1, 4, 7, ... of 64 items each: only their outputs are written.
    let share = Workgroups {
        first: 1,
        stride: 3,
    };
    execute_workgroups(&d, share, &mem, &stop, 2).unwrap();
    let out = &read_back(&mem, c, &addrs)[2];
    let ids: Vec<u64> = share.ids(d.workgroup_count()).collect();
    for (k, v) in out.chunks_exact(4).enumerate() {
        let mine = ids.contains(&(k as u64 / 64));
        assert_eq!(v != [0; 4], mine, "element {k}");
    }
    assert!(
        execute_workgroups(
            &d,
            Workgroups {
                first: 0,
                stride: 0
            },
            &mem,
            &stop,
            1
        )
        .is_err()
    );
}

#[test]
fn share_counts() {
    assert_eq!(Workgroups::ALL.count(10), 10);
    assert_eq!(Workgroups::round_robin(0, 8).count(96), 12);
    assert_eq!(Workgroups::round_robin(3, 8).count(4), 1);
    assert_eq!(Workgroups::round_robin(7, 8).count(4), 0);
    assert_eq!(
        Workgroups::round_robin(2, 3).ids(10).collect::<Vec<_>>(),
        vec![2, 5, 8]
    );
}
