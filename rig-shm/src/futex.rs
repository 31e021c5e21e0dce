//! Waiting on and waking a 32-bit word, across processes.
//!
//! These are Linux futexes without `FUTEX_PRIVATE_FLAG`: the kernel keys a shared futex by
//! the page it lies in, so a waiter in one process is woken by a waker in another that maps
//! the same memfd page. They work on process-private memory too, a little slower.
//!
//! [`wait_any`] sleeps on several words at once (`futex_waitv`, Linux 5.16), so that a
//! waiter can sleep until either of two parties changes its own word: a device's timeline
//! word (its queues' releases) or its lost flag (rigd).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

/// Sleeps while `word` holds `expected`, for at most `timeout` (for ever if `None`).
///
/// Returns early if the word differs when the kernel looks, on a wake, on a signal, or
/// spuriously: callers re-check their condition in a loop.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let _ = wait_one(word, expected, timeout);
}

/// [`wait`], saying how it ended ([`WaitAny::Woken`], [`WaitAny::Changed`] or
/// [`WaitAny::Elapsed`]).
fn wait_one(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> WaitAny {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(t.subsec_nanos()),
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned u32 for the whole call; `ts_ptr` is null or points to
    // a timespec on this stack frame. FUTEX_WAIT only reads both.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if r >= 0 {
        return WaitAny::Woken;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => WaitAny::Changed,
        _ => WaitAny::Elapsed,
    }
}

/// Most words [`wait_any`] sleeps on at once (the kernel's bound is 128).
pub const WAIT_ANY_MOST: usize = 8;

/// `struct futex_waitv` of the kernel's ABI.
#[repr(C)]
struct WaitV {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

/// `FUTEX2_SIZE_U32`: the word is 32 bits (and, without `FUTEX2_PRIVATE`, shared).
const FUTEX2_SIZE_U32: u32 = 0x02;

/// Set once the kernel answered `ENOSYS` to `futex_waitv`.
static NO_WAITV: AtomicBool = AtomicBool::new(false);

/// How a [`wait_any`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitAny {
    /// A wake of one of the words ended the sleep (or, rarely, a spurious wake).
    Woken,
    /// A word differed from what was expected when the kernel looked: no sleep at all.
    Changed,
    /// The timeout passed, or a signal or a spurious wake ended the sleep.
    Elapsed,
    /// The kernel has no `futex_waitv` (or refuses it): the caller sleeps on one word with
    /// [`wait`].
    Unsupported,
}

/// Sleeps while every `(word, expected)` of `words` holds its expected value, for at most
/// `timeout` (for ever if `None`): a wake of any of them, or any of them differing when
/// the kernel looks, ends it. At most [`WAIT_ANY_MOST`] words.
///
/// Spurious returns happen: callers re-check their condition in a loop.
pub fn wait_any(words: &[(&AtomicU32, u32)], timeout: Option<Duration>) -> WaitAny {
    if NO_WAITV.load(Ordering::Relaxed) || words.is_empty() || words.len() > WAIT_ANY_MOST {
        return WaitAny::Unsupported;
    }
    let mut v: [WaitV; WAIT_ANY_MOST] = std::array::from_fn(|_| WaitV {
        val: 0,
        uaddr: 0,
        flags: 0,
        reserved: 0,
    });
    for (slot, (word, expected)) in v.iter_mut().zip(words) {
        slot.val = u64::from(*expected);
        slot.uaddr = word.as_ptr() as u64;
        slot.flags = FUTEX2_SIZE_U32;
    }
    // futex_waitv takes an absolute time on the clock it is given.
    let deadline = timeout.and_then(|t| {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the timespec on this stack frame.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        let ns = i128::from(now.tv_nsec) + t.as_nanos().min(i128::MAX as u128 / 2) as i128;
        let sec = i128::from(now.tv_sec) + ns / 1_000_000_000;
        Some(libc::timespec {
            tv_sec: libc::time_t::try_from(sec).ok()?,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        })
    });
    let ts = deadline
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    #[allow(
        clippy::cast_possible_truncation,
        reason = "words.len() is at most WAIT_ANY_MOST, checked on entry"
    )]
    // SAFETY: `v` holds `words.len()` entries naming live, aligned u32s (the references
    // outlive the call); `ts` is null or points to a timespec on this stack frame. The
    // kernel only reads both.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            v.as_ptr(),
            words.len() as libc::c_uint,
            0 as libc::c_uint,
            ts,
            libc::CLOCK_MONOTONIC,
        )
    };
    if r >= 0 {
        return WaitAny::Woken;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => WaitAny::Changed,
        Some(libc::ETIMEDOUT | libc::EINTR) => WaitAny::Elapsed,
        // ENOSYS (before Linux 5.16), EPERM (a seccomp filter that does not know it), or
        // anything else that returns without sleeping: never again, or a wait would spin.
        _ => {
            NO_WAITV.store(true, Ordering::Relaxed);
            WaitAny::Unsupported
        }
    }
}

/// Sleeps for at most `timeout` while `word` holds `seen` and `flag` holds 0: what a wait
/// for a device's timeline does (the word's low half, and the lost flag). The waiter reads
/// `seen` before it decides to sleep and the writers store before they wake, so neither a
/// release nor a loss between the read and the sleep is missed. On a kernel without
/// `futex_waitv` it sleeps on `word` alone: a raised flag is then seen after `timeout`.
/// Says how the sleep ended: [`WaitAny::Woken`], [`WaitAny::Changed`] or [`WaitAny::Elapsed`].
pub fn wait_word_or_flag(
    word: &AtomicU32,
    seen: u32,
    flag: &AtomicU32,
    timeout: Duration,
) -> WaitAny {
    match wait_any(&[(word, seen), (flag, 0)], Some(timeout)) {
        WaitAny::Unsupported => wait_one(word, seen, Some(timeout)),
        r => r,
    }
}

/// Wakes up to `n` waiters of `word`; returns how many woke.
pub fn wake(word: &AtomicU32, n: u32) -> u32 {
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE does not access the memory at all
    // beyond keying the waiters.
    let woke = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    u32::try_from(woke).unwrap_or(0)
}

/// Wakes every waiter of `word`.
pub fn wake_all(word: &AtomicU32) -> u32 {
    wake(word, u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    #[test]
    fn wait_times_out_and_returns_at_once_on_mismatch() {
        let w = AtomicU32::new(5);
        let t = Instant::now();
        wait(&w, 4, Some(Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_secs(1));
        let t = Instant::now();
        wait(&w, 5, Some(Duration::from_millis(20)));
        assert!(t.elapsed() >= Duration::from_millis(15));
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "futex_waitv: Miri implements FUTEX_WAIT, FUTEX_WAIT_BITSET and FUTEX_WAKE only"
    )]
    fn wait_any_returns_at_once_on_any_mismatch_and_times_out() {
        let (a, b) = (AtomicU32::new(1), AtomicU32::new(2));
        let t = Instant::now();
        let r = wait_any(&[(&a, 1), (&b, 3)], Some(Duration::from_secs(5)));
        if r == WaitAny::Unsupported {
            return; // A kernel older than 5.16.
        }
        assert_eq!(r, WaitAny::Changed);
        assert!(t.elapsed() < Duration::from_secs(1));
        let t = Instant::now();
        let r = wait_any(&[(&a, 1), (&b, 2)], Some(Duration::from_millis(20)));
        assert_eq!(r, WaitAny::Elapsed);
        assert!(t.elapsed() >= Duration::from_millis(15));
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "futex_waitv: Miri implements FUTEX_WAIT, FUTEX_WAIT_BITSET and FUTEX_WAKE only"
    )]
    fn a_wake_of_either_word_ends_wait_any() {
        for which in 0..2 {
            let w = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
            let w2 = w.clone();
            let h = std::thread::spawn(move || {
                let t = Instant::now();
                while w2[which].load(Ordering::Acquire) == 0 {
                    let r = wait_any(&[(&w2[0], 0), (&w2[1], 0)], Some(Duration::from_secs(10)));
                    if r == WaitAny::Unsupported {
                        return Duration::ZERO;
                    }
                }
                t.elapsed()
            });
            std::thread::sleep(Duration::from_millis(10));
            w[which].store(1, Ordering::Release);
            wake_all(&w[which]);
            assert!(h.join().unwrap() < Duration::from_secs(5), "word {which}");
        }
    }

    #[test]
    fn wake_ends_a_wait() {
        let w = Arc::new(AtomicU32::new(0));
        let w2 = w.clone();
        let h = std::thread::spawn(move || {
            while w2.load(Ordering::Acquire) == 0 {
                wait(&w2, 0, Some(Duration::from_secs(10)));
            }
        });
        std::thread::sleep(Duration::from_millis(10));
        let t = Instant::now();
        w.store(1, Ordering::Release);
        wake_all(&w);
        h.join().unwrap();
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
