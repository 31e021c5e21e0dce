//! Consumers of lost producers: work of one device that waits on the GPU for a point of
//! another device of the same connection (and GPU) is lost with that producer, unless the
//! producer reached the point before its loss. rigd's stop of a lost device writes its last
//! submitted value into its word, so the GPU's wait passes either way; the client tells
//! the two apart.

use std::time::{Duration, Instant};

use rig_amd::pm4;
use rig_client::{Buffer, Device, Error, Kernel, Launch, Memory, Point, Queue, Ref, Submission};
use rig_testkit::{Backend, Daemon};

/// COMPUTE:0 words that hold a queue back until the host writes 1 into `flag`.
fn held_on(flag: &Buffer) -> Vec<u32> {
    let mut w = vec![0u32; pm4::WaitRegMem::WORDS];
    pm4::WaitRegMem::memory_at_least(flag.address(), 1)
        .encode(&mut w)
        .unwrap();
    w
}

fn set(flag: &Buffer, v: u64) {
    flag.write(|x| x.copy_from_slice(&v.to_le_bytes())).unwrap();
}

/// A launch of `add` whose `x` lies 1 TiB past `x`: the kernel reads unmapped memory.
fn faulting(add: &Kernel, x: &Buffer, y: &Buffer) -> Submission {
    let mut p = [0u8; 16];
    p[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    Submission::new().launch(
        Launch::new(add, [1, 1, 1], [256, 1, 1])
            .params(&p)
            .refs(&[Ref::read(x, 0), Ref::write(y, 8)]),
    )
}

/// The producer's value that runs once `flag` is set, then faults.
fn held_fault(producer: &Device, flag: &Buffer) -> Point {
    let add = producer
        .load_image(&Backend::Sim.code("add"))
        .unwrap()
        .resolve("add")
        .unwrap();
    let x = producer.buffer(1024, Memory::Pinned).unwrap();
    let y = producer.buffer(1024, Memory::Pinned).unwrap();
    set(flag, 0);
    let s = faulting(&add, &x, &y);
    let held = Submission::new().words(Queue::Compute, &held_on(flag));
    producer.submit(&held).unwrap();
    producer.submit(&s).unwrap()
}

/// The reason the producer's wait for `p` gives once it faulted.
fn lost_reason(p: &Point) -> String {
    match p.wait() {
        Err(Error::Lost { fault, .. }) => fault.to_string(),
        r => panic!("the faulting value's wait returned {r:?}"),
    }
}

fn two_devices(d: &Daemon) -> (Device, Device) {
    let rig = d.rig();
    let producer = rig.open_device("0").unwrap();
    let consumer = rig.open_device("0").unwrap();
    assert_eq!(
        (producer.name(), consumer.name()),
        ("AMD:0", "AMD:0"),
        "two devices of the one simulated GPU"
    );
    (producer, consumer)
}

#[test]
fn a_consumer_of_a_point_its_producer_never_reached_is_lost_naming_the_producer() {
    let d = Daemon::start(Backend::Sim, None);
    let (producer, consumer) = two_devices(&d);
    let flag = producer.buffer(8, Memory::Pinned).unwrap();
    let p = held_fault(&producer, &flag);
    let out = consumer.buffer(4096, Memory::Pinned).unwrap();
    // The producer's point is not reached: the consumer's GPU waits for it.
    let q = consumer
        .submit(&Submission::new().fill(&out, 0, 4096, 7).wait(&p))
        .unwrap();
    // A later value of the consumer that waits for nothing itself runs after q.
    let later = consumer.buffer(4096, Memory::Pinned).unwrap();
    let q_later = consumer
        .submit(&Submission::new().fill(&later, 0, 4096, 8))
        .unwrap();
    assert!(!p.signaled() && !q.signaled());
    set(&flag, 1);
    let why = lost_reason(&p);
    // The later value is lost through q, and so is q itself.
    match q_later.wait() {
        Err(r @ Error::Lost { .. }) => {
            assert_eq!(r.to_string(), format!("AMD:0 lost: AMD:0 lost: {why}"))
        }
        r => panic!("the consumer's later wait returned {r:?} after its producer was lost"),
    }
    match q.wait() {
        Err(r @ Error::Lost { .. }) => {
            assert_eq!(r.to_string(), format!("AMD:0 lost: AMD:0 lost: {why}"))
        }
        r => panic!("the consumer's wait returned {r:?} after its producer was lost"),
    }
    assert!(!q.signaled() && !q_later.signaled());
    assert!(matches!(later.read(|_| ()), Err(Error::Lost { .. })));
    // The consumer stays lost, with the same reason.
    match consumer.submit(&Submission::new()) {
        Err(r @ Error::Lost { .. }) => {
            assert!(r.to_string().starts_with("AMD:0 lost: AMD:0 lost: "), "{r}")
        }
        r => panic!("a later submit returned {r:?}"),
    }
}

#[test]
fn a_consumer_of_points_reached_before_the_loss_is_not_lost() {
    let d = Daemon::start(Backend::Sim, None);
    let (producer, consumer) = two_devices(&d);
    let first = producer.buffer(8, Memory::Pinned).unwrap();
    let second = producer.buffer(8, Memory::Pinned).unwrap();
    set(&first, 0);
    let fill = producer.buffer(4096, Memory::Pinned).unwrap();
    // p1: held on `first`, then fills; the faulting value after it is held on `second`.
    let p1 = producer
        .submit(
            &Submission::new()
                .words(Queue::Compute, &held_on(&first))
                .fill(&fill, 0, 4096, 3),
        )
        .unwrap();
    let p2 = held_fault(&producer, &second);
    let a = consumer.buffer(4096, Memory::Pinned).unwrap();
    let b = consumer.buffer(4096, Memory::Pinned).unwrap();
    let q1 = consumer
        .submit(&Submission::new().fill(&a, 0, 4096, 5).wait(&p1))
        .unwrap();
    let q2 = consumer
        .submit(&Submission::new().fill(&b, 0, 4096, 6).wait(&p2))
        .unwrap();
    assert!(!consumer.last().signaled());
    // p1 is reached, and the consumer's GPU saw it, before the producer is lost.
    set(&first, 1);
    let start = Instant::now();
    while consumer.signaled() < q1.value() {
        assert!(start.elapsed() < Duration::from_secs(20), "q1 never ran");
        std::thread::sleep(Duration::from_millis(1));
    }
    // No wait of the host sees p1: only the consumer's GPU does, before the loss.
    set(&second, 1);
    let why = lost_reason(&p2);
    // q1 waited only for p1, which the producer reached before its loss.
    q1.wait().unwrap();
    assert!(a.read(|x| x.iter().all(|&v| v == 5)).unwrap());
    // q2 waited for the point the producer never reached.
    match q2.wait() {
        Err(r @ Error::Lost { .. }) => {
            assert_eq!(r.to_string(), format!("AMD:0 lost: AMD:0 lost: {why}"))
        }
        r => panic!("the consumer's wait returned {r:?} after its producer was lost"),
    }
    // What the consumer reached before is still reached.
    q1.wait().unwrap();
    assert!(q1.signaled() && !q2.signaled());
}
