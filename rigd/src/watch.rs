//! The watch thread: fault reports from the GPUs' paths and the hang watchdog.
//!
//! Paths report faults as messages ([`Msg`]), so no path waits for a device's lock. The
//! thread takes each report to its device, and looks at every device on a tick
//! ([`State::watchdog`]), losing one whose work stalled past its hang bound and freeing
//! quarantined memory once no work can touch it. It skips a device a request holds until
//! its next tick, so a long stop holds up no other device's watch, and the thread never
//! waits for a request.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use rig_proto::messages::DeviceId;

use crate::device::Footprint;
use crate::state::{Shared, State};
use crate::table::{Held, Mode, Try, Wait};

/// What the watch thread receives.
#[derive(Debug)]
pub enum Msg {
    /// A path reported a fault of a device's work.
    Fault {
        /// The device.
        device: DeviceId,
        /// The fault, as the path's GPU reported it.
        fault: rig_proto::Fault,
    },
    /// Look now: something changed that the next tick must not wait for (memory went into
    /// quarantine).
    Wake,
    /// Stop everything and end the watch.
    Shutdown,
}

/// The detail of the loss of every device still open when rigd stops.
pub const SHUTTING_DOWN: &str = "rigd is shutting down";

/// The fault of a device lost because rigd stops. A client waiting on work that will never
/// run must see a loss, not a completion; rigd stops only when its administrator (or the
/// system) tells it to.
pub(crate) fn shutting_down() -> rig_proto::Fault {
    rig_proto::Fault::new(rig_proto::FaultKind::StoppedByAdministrator, SHUTTING_DOWN)
}

/// How often the watchdog looks while some device has outstanding work.
const BUSY_TICK: Duration = Duration::from_millis(10);
/// How often it looks otherwise, at first: work is submitted with plain stores rigd does not
/// see, so it must look. Each idle look doubles the next tick, up to [`IDLE_TICK_MOST`] or a
/// quarter of the shortest hang bound, so that a daemon whose clients all sit idle (256 of
/// them holding 8 devices each, 2048 devices) spends no measurable CPU looking at them; a
/// look that finds work outstanding brings the tick back to [`BUSY_TICK`]. The first look at
/// work submitted after a long idle may come that late, but a hang bound counts from when
/// the stall began as far as the path can tell ([`crate::device::Device::watch`]), not from
/// that look.
const IDLE_TICK: Duration = Duration::from_millis(200);
/// The longest idle tick.
const IDLE_TICK_MOST: Duration = Duration::from_millis(1600);

/// The longest idle tick for hang bounds as short as `shortest`: a quarter of it, so that a
/// stall seen first after an idle spell is lost at most a quarter of its bound late.
fn idle_tick_most(shortest: Option<Duration>) -> Duration {
    shortest.map_or(IDLE_TICK_MOST, |b| (b / 4).clamp(BUSY_TICK, IDLE_TICK_MOST))
}

impl State {
    /// A fault reported by device `id`'s path: the device is lost. With [`Try`], gives `why`
    /// back if a request holds the device.
    fn fault_in<M: Mode>(
        &self,
        id: DeviceId,
        why: rig_proto::Fault,
    ) -> Result<(), rig_proto::Fault> {
        let Some(slot) = self.book().devices.get(&id).cloned() else {
            return Ok(());
        };
        let Ok(mut h) = Held::new::<M>(&slot) else {
            return Err(why);
        };
        h.d.lose(why);
        // The stop gave back its queues' threads and what it had quarantined.
        self.settle(&mut h);
        Ok(())
    }

    /// A fault reported by device `id`'s path: the device is lost.
    pub fn fault(&self, id: DeviceId, why: rig_proto::Fault) {
        let _ = self.fault_in::<Wait>(id, why);
    }

    /// The hang watchdog: one look at every device ([`crate::device::Device::watch`]), then
    /// its charges brought up to date where that changed them. A device a request holds is
    /// skipped until the next look (and counts as busy). Returns whether any device has
    /// outstanding work or quarantined memory (so the owner knows whether to keep
    /// ticking).
    pub fn watchdog(&self, now: Instant) -> bool {
        let mut busy = false;
        for (slot, _) in self.snapshot() {
            let Ok(mut h) = Held::new::<Try>(&slot) else {
                busy = true;
                continue;
            };
            let seen = h.d.watch(now);
            busy |= seen.busy;
            if seen.changed {
                self.settle(&mut h);
            }
        }
        busy
    }

    /// Loses every open device as rigd stops ([`SHUTTING_DOWN`]), keeping the devices and
    /// their clients, so that a client still connected reads that reason when it asks
    /// (the server does this before it closes any connection). Waits for each device's
    /// lock. Returns how many devices it lost.
    pub fn lose_all_at_shutdown(&self) -> usize {
        // From here on a device entering the table is lost as it enters, so none escapes
        // the look below.
        self.book().stopping = true;
        let mut n = 0;
        for (slot, _) in self.snapshot() {
            let mut h = Held::waited(&slot);
            if h.d.lost().is_none() {
                h.d.lose(shutting_down());
                n += 1;
            }
            // The stop gave back its queues' threads and what it had quarantined.
            self.settle(&mut h);
        }
        n
    }

    /// Stops every device and gives back everything (at shutdown).
    pub fn shutdown(&self) {
        let slots = {
            let mut book = self.book();
            book.clients.clear();
            book.tenants.clear();
            book.total = Footprint::default();
            std::mem::take(&mut book.devices)
        };
        let n = slots.len();
        for slot in slots.into_values() {
            let mut d = slot.wait();
            // Lost already where the server stopped ([`State::lose_all_at_shutdown`]); not
            // where the state stops without it.
            d.lose(shutting_down());
            d.close();
        }
        tracing::info!(
            devices = n,
            "every device stopped and its memory given back"
        );
    }
}

/// Runs the watch thread: fault reports from paths and the hang watchdog. A fault on a
/// device a request holds is handled at a later tick, so the thread never waits for a
/// request. `on_work` hears every look that found work outstanding (the metrics sampler
/// sleeps until then). It ends after [`Msg::Shutdown`] (stopping every device) or when
/// every sender is gone.
pub fn spawn_watch(
    shared: Shared,
    rx: mpsc::Receiver<Msg>,
    on_work: Box<dyn Fn() + Send>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("rigd-watch".into())
        .spawn(move || {
            let most = idle_tick_most(shared.shortest_hang_bound());
            let first = IDLE_TICK.min(most);
            let mut tick = first;
            let mut pending: Vec<(DeviceId, rig_proto::Fault)> = Vec::new();
            loop {
                match rx.recv_timeout(tick) {
                    Ok(Msg::Fault { device, fault }) => pending.push((device, fault)),
                    Ok(Msg::Shutdown) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    Ok(Msg::Wake) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                }
                pending = std::mem::take(&mut pending)
                    .into_iter()
                    .filter_map(|(device, why)| {
                        shared
                            .fault_in::<Try>(device, why)
                            .err()
                            .map(|why| (device, why))
                    })
                    .collect();
                let working = shared.watchdog(Instant::now());
                if working {
                    // Work the metrics sampler, asleep while all was idle, must time.
                    on_work();
                }
                let busy = working || !pending.is_empty();
                tick = match (busy, tick) {
                    (true, _) => BUSY_TICK,
                    (false, t) if t < first => first,
                    (false, t) => (t * 2).min(most),
                };
            }
            shared.shutdown();
        })
        // PANIC: spawning the one watch thread at start fails only if the system has no
        // threads left, when rigd cannot run at all.
        .expect("spawn the watch thread")
}
