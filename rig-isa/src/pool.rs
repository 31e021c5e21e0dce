//! A process-wide pool of helper threads that dispatches borrow instead of spawning threads.
//!
//! Owns the helper threads (started lazily, never more than asked for, parked on a condition
//! variable when idle so an idle process spends no CPU) and the queue of jobs waiting for
//! helpers. Does not own scheduling inside a job: a job is one closure that every participant
//! (the caller and each helper that joins) runs once, pulling its own work from shared counters.
//!
//! The caller always runs the job itself, so a job finishes even when every helper is busy with
//! other jobs: helpers only speed it up. When the caller is done it withdraws the job, so a
//! helper that had not yet picked it up never will, and waits only for the helpers that did.
//! That wait is what makes lending the caller's borrowed closure to other threads sound.

use std::cell::OnceCell;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

/// Helpers the pool will ever start.
const MAX_HELPERS: usize = 256;
/// How long a finished caller yields before sleeping until its helpers are done.
const SPIN: std::time::Duration = std::time::Duration::from_micros(200);
/// Idle helpers each waker wakes: the caller wakes this many, and each helper that joins a job
/// still wanting more wakes as many again, so 15 helpers are up after four rounds of wakes
/// that run side by side rather than after 15 in turn on the caller's thread.
const WAKE_FANOUT: usize = 2;

type Task = dyn Fn(&dyn Fn()) + Sync;

struct Job {
    /// The submitter's closure with its lifetime erased. Dereferenced only by a helper counted in
    /// `running`, and `run` does not return while `running` is above zero.
    task: *const Task,
    state: Mutex<JobState>,
    done: Condvar,
}

// SAFETY: `task` points to a `Sync` closure that outlives every use (see `Job::task`); the rest
// of `Job` is `Send + Sync` already.
unsafe impl Send for Job {}
// SAFETY: as above; the closure is only called through a shared reference.
unsafe impl Sync for Job {}

struct JobState {
    /// Helpers the job still wants.
    wanted: usize,
    /// Helpers running it now.
    running: usize,
}

struct Pool {
    queue: Mutex<Queue>,
    wake: Condvar,
}

struct Queue {
    jobs: VecDeque<Arc<Job>>,
    helpers: usize,
    idle: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Tasks run outside every lock of the pool, so a poisoned lock holds consistent state.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        queue: Mutex::new(Queue {
            jobs: VecDeque::new(),
            helpers: 0,
            idle: 0,
        }),
        wake: Condvar::new(),
    })
}

fn helper(pool: &'static Pool) {
    let mut q = lock(&pool.queue);
    loop {
        let Some(job) = q.jobs.front().cloned() else {
            q.idle += 1;
            q = pool.wake.wait(q).unwrap_or_else(|e| e.into_inner());
            q.idle -= 1;
            continue;
        };
        let wake = {
            let mut s = lock(&job.state);
            s.wanted -= 1;
            s.running += 1;
            if s.wanted == 0 {
                q.jobs.pop_front();
            }
            s.wanted.min(q.idle).min(WAKE_FANOUT)
        };
        drop(q);
        for _ in 0..wake {
            pool.wake.notify_one();
        }
        // SAFETY: this helper is counted in `running`, so the submitter is still blocked in
        // `run` and the closure is alive (see `Job::task`).
        let task = unsafe { &*job.task };
        // A panic is the task's business (execute reports it); the helper must survive it.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task(&|| {})));
        {
            let mut s = lock(&job.state);
            s.running -= 1;
            if s.running == 0 {
                job.done.notify_all();
            }
        }
        drop(job);
        q = lock(&pool.queue);
    }
}

/// Withdraws a job (if the caller invited helpers at all) and waits for the helpers running
/// it, also when the caller's task unwinds.
struct Withdraw<'a> {
    pool: &'static Pool,
    job: &'a OnceCell<Arc<Job>>,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        let Some(job) = self.job.get() else {
            return;
        };
        {
            let mut q = lock(&self.pool.queue);
            q.jobs.retain(|j| !Arc::ptr_eq(j, job));
            lock(&job.state).wanted = 0;
        }
        // Helpers usually finish within a workgroup: yield for a short while before sleeping,
        // which saves a wake-up through the scheduler (milliseconds on a loaded machine).
        let start = std::time::Instant::now();
        while lock(&job.state).running > 0 && start.elapsed() < SPIN {
            std::thread::yield_now();
        }
        let mut s = lock(&job.state);
        while s.running > 0 {
            s = job.done.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Runs `task` on the calling thread and, once the caller's run calls its `invite` argument,
/// on up to `width - 1` helpers at once; returns when every run has returned. Each participant
/// calls `task` once; `task` shares out the work. Helpers get an `invite` that does nothing.
///
/// Inviting late lets a caller finish small work alone: waking a helper costs more than a
/// short dispatch, and a run that never invites costs no allocation and no lock.
pub(crate) fn run(width: usize, task: &(dyn Fn(&dyn Fn()) + Sync)) {
    let helpers = width.saturating_sub(1).min(MAX_HELPERS);
    if helpers == 0 {
        task(&|| {});
        return;
    }
    let pool = pool();
    // SAFETY: only the lifetime is erased; `Withdraw` below keeps this call from returning (or
    // unwinding past `task`'s owner) until no helper runs the job, and helpers that had not
    // joined by then never will.
    let erased: *const Task = unsafe {
        std::mem::transmute::<*const (dyn Fn(&dyn Fn()) + Sync + '_), *const Task>(task as *const _)
    };
    let job: OnceCell<Arc<Job>> = OnceCell::new();
    let invite = || {
        if job.get().is_some() {
            return;
        }
        let job = job.get_or_init(|| {
            Arc::new(Job {
                task: erased,
                state: Mutex::new(JobState {
                    wanted: helpers,
                    running: 0,
                }),
                done: Condvar::new(),
            })
        });
        let wake = {
            let mut q = lock(&pool.queue);
            q.jobs.push_back(job.clone());
            // New helpers look at the queue as they start; idle ones need a wake.
            while q.helpers < helpers {
                let spawned = std::thread::Builder::new()
                    .name("rig-isa-helper".into())
                    .spawn(move || helper(pool));
                if spawned.is_err() {
                    break;
                }
                q.helpers += 1;
            }
            q.idle.min(helpers).min(WAKE_FANOUT)
        };
        for _ in 0..wake {
            pool.wake.notify_one();
        }
    };
    let _withdraw = Withdraw { pool, job: &job };
    task(&invite);
}

/// Runs `f(0)`, ..., `f(n - 1)`, each exactly once, on the calling thread and up to
/// `width - 1` helper threads of the process-wide pool; returns when all have returned.
///
/// A panic in `f` on a helper is caught there; one on the calling thread propagates after the
/// helpers are done.
pub fn parallel(n: usize, width: usize, f: &(dyn Fn(usize) + Sync)) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let task = |invite: &dyn Fn()| {
        // Every index may be long (a die's share): helpers are wanted at once.
        invite();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if i >= n {
                return;
            }
            f(i);
        }
    };
    run(width.min(n), &task);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_index_runs_once_and_borrows_stay_valid() {
        for width in [1, 2, 3, 8] {
            let hits: Vec<AtomicUsize> = (0..100).map(|_| AtomicUsize::new(0)).collect();
            parallel(100, width, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn concurrent_jobs_finish_even_with_few_helpers() {
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        let sum = AtomicUsize::new(0);
                        parallel(10, 3, &|i| {
                            sum.fetch_add(i, Ordering::Relaxed);
                        });
                        assert_eq!(sum.load(Ordering::Relaxed), 45);
                    }
                });
            }
        });
    }

    #[test]
    fn a_helper_panic_does_not_kill_the_pool() {
        parallel(4, 4, &|i| {
            if i == 3 && std::thread::current().name() == Some("rig-isa-helper") {
                panic!("test panic");
            }
        });
        let n = AtomicUsize::new(0);
        parallel(8, 4, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 8);
    }
}
