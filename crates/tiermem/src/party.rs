//! A party of workers on one node, threads or forked processes: starting
//! them pinned, their exit codes, a barrier, and stopping them all when one
//! fails. Team mode and the SVM's forked team run on it; neither owns it.
//!
//! The party's state is a few 64-bit words in memory every worker sees
//! ([`Party`]: the team's control block keeps them), so that forked workers
//! need nothing else to meet at a barrier or to notice a failure.

use crate::error::Error;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tiermem_sys::process::{self, ExitStatus, Forked};

/// Exit code of a worker that stopped because another member failed.
pub const EXIT_ABORTED: i32 = 86;

/// Set in a member's pid word once it finished cleanly.
pub(crate) const PID_FINISHED: u64 = 1 << 63;

/// How one worker ended.
#[derive(Clone, Debug, Serialize)]
pub struct WorkerExit {
    /// Rank.
    pub rank: usize,
    /// Process id (threads mode: this process).
    pub pid: u32,
    /// CPU it was pinned to.
    pub cpu: Option<usize>,
    /// Exit status (threads: 0, 1 for an error, 101 for a panic).
    #[serde(skip)]
    pub status: ExitStatus,
    /// `status` in words.
    pub how: String,
}

/// The shared words of a party.
#[derive(Clone, Copy)]
pub(crate) struct Party<'a> {
    /// 0, or 1 + the rank whose failure ended the party.
    pub(crate) abort: &'a AtomicU64,
    /// Arrivals at the current barrier, and barriers passed.
    pub(crate) arrived: &'a AtomicU64,
    pub(crate) generation: &'a AtomicU64,
    /// Members a barrier waits for.
    pub(crate) size: &'a AtomicU64,
    /// Each member's pid (0: none), with [`PID_FINISHED`] once it is done.
    pub(crate) pids: &'a [AtomicU64],
}

impl Party<'_> {
    /// Records that `rank` failed, unless a failure is recorded already.
    pub(crate) fn abort(&self, rank: usize) {
        let _ = self
            .abort
            .compare_exchange(0, rank as u64 + 1, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// The rank whose failure stopped the party, if one did.
    pub(crate) fn failed(&self) -> Option<usize> {
        let a = self.abort.load(Ordering::Acquire);
        (a != 0).then(|| a as usize - 1)
    }

    /// Starts a party of `workers`: no failure, no arrivals, no pids.
    pub(crate) fn reset(&self, workers: usize) {
        self.abort.store(0, Ordering::Release);
        self.arrived.store(0, Ordering::Release);
        self.size.store(workers as u64, Ordering::Release);
        for p in &self.pids[..workers] {
            p.store(0, Ordering::Release);
        }
    }

    /// Waits until every member arrived; an error if a member failed or
    /// died (a pid that no longer runs and did not finish).
    pub(crate) fn barrier(&self) -> Result<(), Error> {
        let generation = self.generation.load(Ordering::Acquire);
        let size = self.size.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == size {
            self.arrived.store(0, Ordering::Release);
            self.generation.fetch_add(1, Ordering::AcqRel);
            return Ok(());
        }
        let mut backoff = Backoff::new(Duration::from_micros(50));
        let mut last_check = Instant::now();
        loop {
            if self.generation.load(Ordering::Acquire) != generation {
                return Ok(());
            }
            if let Some(r) = self.failed() {
                return Err(Error::Team(format!("worker {r} failed; the team stopped")));
            }
            backoff.snooze();
            if last_check.elapsed() > Duration::from_millis(20) {
                last_check = Instant::now();
                for (r, p) in self.pids.iter().enumerate() {
                    let pid = p.load(Ordering::Acquire);
                    if pid != 0 && pid & PID_FINISHED == 0 && !process::running(pid as u32) {
                        self.abort(r);
                    }
                }
            }
        }
    }

    /// Runs `body(rank)` on `workers` threads of this process, pinned to
    /// `cpu(rank)`, and waits for them. `body` returns the worker's exit
    /// code; a panic is 101. A worker that ends with anything but 0 aborts
    /// the party.
    pub(crate) fn run_threads(
        &self,
        workers: usize,
        cpu: &(dyn Fn(usize) -> Option<usize> + Sync),
        body: &(dyn Fn(usize) -> Result<(), Error> + Sync),
    ) -> Vec<WorkerExit> {
        let pid = tiermem_sys::thread::getpid();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|r| {
                    s.spawn(move || {
                        pin(r, cpu(r));
                        let code = exit_code(
                            r,
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(r))),
                        );
                        if code != 0 {
                            self.abort(r);
                        }
                        code
                    })
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(r, h)| {
                    let status = ExitStatus::Exited(h.join().unwrap_or(101));
                    WorkerExit {
                        rank: r,
                        pid,
                        cpu: cpu(r),
                        status,
                        how: status.to_string(),
                    }
                })
                .collect()
        })
    }

    /// Forks `workers` processes that each run `child(rank)` (pinned to
    /// `cpu(rank)`) and leave with its exit code, and reaps them. The first that fails aborts the party; those still
    /// running 2 s later (workers that compute without ever waiting do not
    /// see the abort) are killed. A failed fork kills the workers forked
    /// so far.
    pub(crate) fn run_processes(
        &self,
        workers: usize,
        cpu: &dyn Fn(usize) -> Option<usize>,
        child: &dyn Fn(usize) -> i32,
    ) -> Result<Vec<WorkerExit>, Error> {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let mut pids = Vec::with_capacity(workers);
        for r in 0..workers {
            match process::fork(true) {
                Ok(Forked::Child) => {
                    // A forked worker never returns, panic or not: it would
                    // go on as a second copy of its parent.
                    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        pin(r, cpu(r));
                        child(r)
                    }))
                    .unwrap_or(101);
                    self.worker_exit(r, code)
                }
                Ok(Forked::Parent(pid)) => pids.push(pid),
                Err(errno) => {
                    self.abort(r);
                    for &p in &pids {
                        let _ = process::kill(p, libc::SIGKILL);
                        let _ = process::wait(p);
                    }
                    return Err(Error::Sys {
                        what: "forking a team worker",
                        errno,
                    });
                }
            }
        }
        let mut status: Vec<Option<ExitStatus>> = vec![None; pids.len()];
        let mut deadline: Option<Instant> = None;
        while status.iter().any(Option::is_none) {
            let pending: Vec<u32> = pids
                .iter()
                .zip(&status)
                .filter(|(_, s)| s.is_none())
                .map(|(&p, _)| p)
                .collect();
            let ended = match process::wait_any(&pending, Duration::from_millis(200)) {
                Ok(ended) => ended,
                Err(errno) => {
                    // Cannot watch the pidfds (out of descriptors?): poll
                    // at the same pace instead of spinning.
                    eprintln!("tiermem team: waiting for workers: {errno}; polling");
                    std::thread::sleep(Duration::from_millis(200));
                    pending
                        .iter()
                        .filter(|&&p| !process::running(p))
                        .copied()
                        .collect()
                }
            };
            for pid in ended {
                let r = pids.iter().position(|&p| p == pid).expect("our child");
                let st = process::wait(pid).unwrap_or(ExitStatus::Exited(-1));
                status[r] = Some(st);
                if !st.success() {
                    self.abort(r);
                    deadline.get_or_insert(Instant::now() + Duration::from_secs(2));
                }
            }
            if deadline.is_some_and(|d| Instant::now() > d) {
                for &p in &pending {
                    let _ = process::kill(p, libc::SIGKILL);
                }
            }
        }
        Ok(pids
            .iter()
            .zip(status)
            .enumerate()
            .map(|(r, (&pid, st))| {
                let st = st.expect("all reaped");
                WorkerExit {
                    rank: r,
                    pid,
                    cpu: cpu(r),
                    status: st,
                    how: st.to_string(),
                }
            })
            .collect())
    }

    /// Marks member `rank` finished: a barrier no longer takes its exit
    /// for a death.
    pub(crate) fn mark_finished(&self, rank: usize) {
        self.pids[rank].fetch_or(PID_FINISHED, Ordering::AcqRel);
    }

    /// A forked worker's end: finished, and `_exit(code)`.
    fn worker_exit(&self, rank: usize, code: i32) -> ! {
        self.mark_finished(rank);
        process::exit_now(code)
    }
}

/// A worker's exit code: 0, [`EXIT_ABORTED`] when it stopped because
/// another failed, 1 for an error (printed), 101 for a panic.
pub(crate) fn exit_code(rank: usize, r: std::thread::Result<Result<(), Error>>) -> i32 {
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(Error::Team(_))) => EXIT_ABORTED,
        Ok(Err(e)) => {
            eprintln!("tiermem team: worker {rank}: {e}");
            1
        }
        Err(_) => 101,
    }
}

/// Pins worker `rank` to `cpu`; a refusal (a cpuset without that CPU) is
/// reported, and the worker runs unpinned.
fn pin(rank: usize, cpu: Option<usize>) {
    if let Some(c) = cpu {
        if let Err(e) = tiermem_sys::thread::set_affinity(&[c]) {
            eprintln!("tiermem team: worker {rank} not pinned to CPU {c}: {e}");
        }
    }
}

/// How a process waits for another (a barrier, a lock): spin, then yield,
/// then sleep `sleep` per round. Polling, because a cross-CPU wake-up costs
/// about 50 us on these machines; the caller checks for dead members
/// between rounds.
pub(crate) struct Backoff {
    spins: u64,
    sleep: Duration,
}

impl Backoff {
    pub(crate) fn new(sleep: Duration) -> Backoff {
        Backoff { spins: 0, sleep }
    }

    pub(crate) fn snooze(&mut self) {
        self.spins += 1;
        if self.spins < 200 {
            std::hint::spin_loop();
        } else if self.spins < 2000 {
            std::thread::yield_now();
        } else {
            tiermem_sys::thread::sleep(self.sleep);
        }
    }
}
