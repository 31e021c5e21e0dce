//! The doorbell forwarder: a thread per queue that carries the client's doorbell (shared
//! memory, [`rig_shm::Doorbell`]) to the queue's hardware doorbell, for a path whose
//! queues are rung through a doorbell the client cannot be given (KFD's doorbell page, a
//! BAR's doorbell aperture over VFIO).
//!
//! The thread spins for [`FORWARD_SPIN`] after a forward (the ring that comes meanwhile,
//! work in flight, is forwarded without a wake-up) and otherwise sleeps on the client's
//! doorbell until it is rung, so an idle client costs nothing. Before each forward it calls
//! the path's [`Bell::rung`] and then [`Bell::ring`], which stores to the hardware (after
//! whatever flush the hardware needs first, such as the HDP's).
//!
//! An AQL queue's read and write dispatch ids are its `amd_queue_t`'s ([`AqlWords`]), as
//! ROCr gives them: the forwarder stores the client's write position in the first before
//! it rings (with the last packet's index, as ROCr does) and passes the second on to the
//! client's read position, at each ring and wake and every [`AQL_READ_POLL`] while packets
//! are in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rig_amd::aql::amd_queue;
use rig_shm::{Doorbell, SharedRegion};

/// How long a doorbell forwarder spins for the client's next ring after forwarding one,
/// before it sleeps on the doorbell's futex.
pub const FORWARD_SPIN: Duration = Duration::from_micros(50);
/// How often a doorbell forwarder passes an AQL queue's read position on to the client
/// while its packets are in flight (it does at each ring and wake besides).
pub const AQL_READ_POLL: Duration = Duration::from_millis(1);
/// How long an idle forwarder sleeps on the client's doorbell before it looks again.
const IDLE_WAIT: Duration = Duration::from_millis(500);

/// A queue's hardware doorbell, as its path rings it.
pub trait Bell: Send + 'static {
    /// Called before each forward (a path that counts runs from its last doorbell).
    fn rung(&self) {}

    /// Stores `value` into the hardware doorbell.
    fn ring(&self, value: u64);
}

/// An AQL queue's words the forwarder keeps: its `amd_queue_t` (memory of the path's, whose
/// dispatch ids are the hardware's read and write pointers) and the client's read position
/// (a region and the offset in it of the 8 bytes).
#[derive(Debug)]
pub struct AqlWords {
    /// The `amd_queue_t`'s page.
    pub queue: SharedRegion,
    /// The client's read position.
    pub read: (SharedRegion, usize),
}

impl AqlWords {
    /// Copies the queue's read dispatch id to the client's read position; returns it.
    fn publish_read(&self) -> u64 {
        let r = self
            .queue
            .load_u64(amd_queue::READ_DISPATCH_ID, Ordering::Acquire);
        self.read.0.store_u64(self.read.1, r, Ordering::Release);
        r
    }

    /// The client's write position `v` becomes the queue's write dispatch id; answers the
    /// doorbell's value: the last packet's index, as ROCr and tinygrad ring an AQL queue.
    fn wrote(&self, v: u64) -> u64 {
        self.queue
            .store_u64(amd_queue::WRITE_DISPATCH_ID, v, Ordering::Release);
        v.wrapping_sub(1)
    }
}

/// A running forwarder; dropping it (or [`Forwarder::stop`]) ends its thread.
#[derive(Debug)]
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    doorbell: Doorbell,
    thread: Option<JoinHandle<()>>,
}

impl Forwarder {
    /// Starts forwarding the client's `doorbell` to `bell`; `aql` for an AQL queue. The
    /// thread is named `name`.
    pub fn spawn(
        name: &str,
        doorbell: Doorbell,
        bell: impl Bell,
        aql: Option<AqlWords>,
    ) -> std::io::Result<Forwarder> {
        let stop = Arc::new(AtomicBool::new(false));
        let (client, flag) = (doorbell.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || forward(&client, &bell, aql.as_ref(), &flag))?;
        Ok(Forwarder {
            stop,
            doorbell,
            thread: Some(thread),
        })
    }

    /// Ends the thread and waits for it: once this returns, the hardware doorbell is rung
    /// no more.
    pub fn stop(mut self) {
        self.end();
    }

    fn end(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.doorbell.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.end();
    }
}

fn forward(client: &Doorbell, bell: &impl Bell, aql: Option<&AqlWords>, stop: &AtomicBool) {
    // A queue's write position starts at 0: any other value, even one rung before this
    // thread ran, is forwarded.
    let mut seen = 0;
    let mut forwarded: Option<Instant> = None;
    loop {
        // Spins a while after a forward: a client with work in flight rings again soon,
        // and the spin forwards that ring without a futex wake.
        let mut v = client.value();
        while let Some(at) = forwarded
            && v == seen
            && at.elapsed() < FORWARD_SPIN
            && !stop.load(Ordering::Relaxed)
        {
            std::hint::spin_loop();
            v = client.value();
        }
        forwarded = None;
        if v == seen {
            // An AQL queue's packets still in flight: its read position is passed on at
            // least every AQL_READ_POLL.
            let slice = match aql {
                Some(w) if w.publish_read() < seen => AQL_READ_POLL,
                _ => IDLE_WAIT,
            };
            v = client.wait(seen, Some(slice), || stop.load(Ordering::Acquire));
        }
        if stop.load(Ordering::Acquire) {
            return;
        }
        if let Some(w) = aql {
            w.publish_read();
        }
        if v != seen {
            bell.rung();
            let value = match aql {
                Some(w) => w.wrote(v),
                None => v,
            };
            bell.ring(value);
            seen = v;
            forwarded = Some(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<u64>>>);

    impl Bell for Seen {
        fn ring(&self, value: u64) {
            self.0.lock().unwrap().push(value);
        }
    }

    fn until(f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "timed out");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn each_ring_reaches_the_bell_and_none_after_the_stop() {
        let page = SharedRegion::create("bells", rig_shm::layout::DOORBELL_PAGE_BYTES).unwrap();
        let bell = Doorbell::new(page, 0).unwrap();
        let seen = Seen::default();
        let f = Forwarder::spawn("test-forwarder", bell.clone(), seen.clone(), None).unwrap();
        bell.ring(3);
        until(|| seen.0.lock().unwrap().last() == Some(&3));
        std::thread::sleep(FORWARD_SPIN * 4);
        bell.ring(7);
        until(|| seen.0.lock().unwrap().last() == Some(&7));
        f.stop();
        bell.ring(9);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(seen.0.lock().unwrap().last(), Some(&7));
    }

    #[test]
    fn an_aql_queue_is_rung_with_its_last_packet_and_its_read_position_passed_on() {
        let page = SharedRegion::create("bells", rig_shm::layout::DOORBELL_PAGE_BYTES).unwrap();
        let bell = Doorbell::new(page, 0).unwrap();
        let queue = SharedRegion::create("amd_queue", 4096).unwrap();
        let read = SharedRegion::create("read", 4096).unwrap();
        let seen = Seen::default();
        let words = AqlWords {
            queue: queue.clone(),
            read: (read.clone(), 64),
        };
        let _f =
            Forwarder::spawn("test-forwarder", bell.clone(), seen.clone(), Some(words)).unwrap();
        bell.ring(2);
        until(|| seen.0.lock().unwrap().last() == Some(&1));
        assert_eq!(
            queue.load_u64(amd_queue::WRITE_DISPATCH_ID, Ordering::Acquire),
            2
        );
        queue.store_u64(amd_queue::READ_DISPATCH_ID, 2, Ordering::Release);
        until(|| read.load_u64(64, Ordering::Acquire) == 2);
    }
}
