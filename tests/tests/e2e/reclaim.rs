//! The rounds of reclamation a request for memory runs before it fails, against a real rigd
//! on the simulated GPU: memory freed while work runs comes back once that work ends, and
//! the allocation that needs it waits for it instead of failing at once.

use rig_client::{Error, Memory, Queue, Submission};
use rig_testkit::{Backend, Daemon};

const CHUNK: u64 = 256 << 20;

/// Device memory in `CHUNK`s until the GPU has no more: what the device got, and the
/// refusal that ended it.
fn fill(dev: &rig_client::Device) -> (Vec<rig_client::Buffer>, Error) {
    let mut held = Vec::new();
    loop {
        match dev.buffer(CHUNK, Memory::Device) {
            Ok(b) => held.push(b),
            Err(e) => return (held, e),
        }
        assert!(held.len() < 64, "the simulated GPU never ran out of memory");
    }
}

/// Compute words that hold the queue until the word at `flag`'s byte 8 is at least 1.
fn wait_for(flag: &rig_client::Buffer) -> Vec<u32> {
    use rig_amd::pm4;
    let mut w = vec![0u32; pm4::WaitRegMem::WORDS];
    pm4::WaitRegMem::memory_at_least(flag.address() + 8, 1)
        .encode(&mut w)
        .unwrap();
    w
}

#[test]
fn an_allocation_waits_for_the_work_that_holds_freed_memory() {
    // A hang bound well past the work's own second.
    let d = Daemon::start(Backend::Sim, Some(30_000));
    let dev = d.device();
    let flag = dev.buffer(16, Memory::Pinned).unwrap();
    flag.write(|b| b.fill(0)).unwrap();
    let (mut held, refused) = fill(&dev);
    assert!(
        matches!(refused, Error::OutOfMemory { .. }),
        "the GPU ran out with {refused}"
    );
    assert!(!held.is_empty());
    // Work that runs until the flag is set, then writes the last chunk: freeing that chunk
    // now gives it back only once the work ended.
    let waiting = dev
        .submit(&Submission::new().words(Queue::Compute, &wait_for(&flag)))
        .unwrap();
    let last = held.pop().unwrap();
    let writing = dev
        .submit(&Submission::new().fill(&last, 0, 4096, 7))
        .unwrap();
    drop(last);
    assert!(!writing.signaled());
    let setter = {
        let flag = flag.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(500));
            flag.write(|b| b[8] = 1).unwrap();
        })
    };
    // The allocation finds no memory, waits for the work that holds the freed chunk, and
    // is granted it.
    let again = dev.buffer(CHUNK, Memory::Device);
    setter.join().unwrap();
    let again = again.expect("the freed chunk came back once the work that used it ended");
    assert!(waiting.signaled() && writing.signaled());
    drop(again);
    drop(held);
}

#[test]
fn an_allocation_past_what_the_gpu_holds_fails_after_its_rounds() {
    let d = Daemon::start(Backend::Sim, Some(30_000));
    let dev = d.device();
    let (held, _) = fill(&dev);
    // Nothing was freed, nothing runs: every round finds nothing, and the last refusal
    // names the bytes asked.
    match dev.buffer(CHUNK, Memory::Device) {
        Err(Error::OutOfMemory { asked, .. }) => assert!(asked >= CHUNK, "{asked}"),
        r => panic!("asked past the GPU's memory: {r:?}"),
    }
    drop(held);
}
