//! Waiting on and waking a 32-bit word, across processes.
//!
//! These are Linux futexes without `FUTEX_PRIVATE_FLAG`: the kernel keys a shared futex by
//! the page it lies in, so a waiter in one process is woken by a waker in another that maps
//! the same memfd page. They work on process-private memory too, a little slower.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` holds `expected`, for at most `timeout` (for ever if `None`).
///
/// Returns early if the word differs when the kernel looks, on a wake, on a signal, or
/// spuriously: callers re-check their condition in a loop.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(t.subsec_nanos()),
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned u32 for the whole call; `ts_ptr` is null or points to
    // a timespec on this stack frame. FUTEX_WAIT only reads both.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            0u32,
        );
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
