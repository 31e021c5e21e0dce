//! Points: a value of a device's timeline, which its work reaches once it completed.
//!
//! This module owns [`Point`] and its reads and waits; the spinning and sleeping itself
//! lives with the device ([`crate::device`]), which owns the word and its interrupt.

use std::sync::Arc;

use crate::device::{DeviceShared, WaitPolicy};
use crate::error::Result;

/// A device and one value of its timeline: the value a submission releases once its work
/// (and every earlier value's) has completed.
#[derive(Clone)]
pub struct Point {
    pub(crate) device: Arc<DeviceShared>,
    pub(crate) value: u64,
}

impl std::fmt::Debug for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Point")
            .field("device", &self.device.name)
            .field("value", &self.value)
            .finish()
    }
}

impl Point {
    /// The value.
    pub fn value(&self) -> u64 {
        self.value
    }

    /// True iff the device reached the value before any loss, without waiting (two acquire
    /// loads, no system call; it never sleeps or spins). False once the value's work is
    /// known lost: a value the device had not reached when rigd lost it, or whose work
    /// waited on the GPU for a point of another device that was lost before it reached it
    /// (the device is lost then, as [`Point::wait`] says); the first call that finds the
    /// value's work lost with a producer tells rigd to stop the device.
    pub fn signaled(&self) -> bool {
        self.device.reached(self.value)
    }

    /// Waits until the value is reached: spins briefly ([`WaitPolicy::default`]), then
    /// sleeps until the release of a later value or a loss wakes it. Returns
    /// [`crate::Error::Lost`] with rigd's reason if the device is lost first. A value the
    /// device reached before a loss is reached. [`Point::wait_with`] waits otherwise.
    ///
    /// Where the value's work (or an earlier value's) waited on the GPU for a point of
    /// another device that was lost before it reached the point, this device is lost too:
    /// the wait returns `Lost` with a reason naming the other device ("AMD:0 lost: AMD:0
    /// lost: why", the consumer's name first), and rigd is told to stop it with that
    /// reason.
    pub fn wait(&self) -> Result<()> {
        self.wait_with(WaitPolicy::default()).map(drop)
    }

    /// Waits as [`Point::wait`] does, spending its time as `policy` says: how long it
    /// spins, how politely, and for how long in all. `Ok(true)` once the value is reached,
    /// `Ok(false)` if the policy's timeout passed first (the work goes on), `Err(Lost)` as
    /// [`Point::wait`] says:
    ///
    /// ```no_run
    /// # fn demo(point: &rig_client::Point) -> rig_client::Result<()> {
    /// use std::time::Duration;
    /// use rig_client::WaitPolicy;
    ///
    /// point.wait_with(WaitPolicy::sleeping())?; // no spin
    /// if !point.wait_with(WaitPolicy::default().with_timeout(Duration::from_secs(1)))? {
    ///     eprintln!("not done after a second");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait_with(&self, policy: WaitPolicy) -> Result<bool> {
        self.device.wait_with(self.value, policy)
    }
}
