//! Running workers: as threads or forked processes, pinned, with their
//! exit codes.

use super::*;

impl TeamRegion {
    /// Runs `f` on `workers` workers (processes or threads), pinned to the
    /// configured CPUs, and waits for all of them. A worker that fails
    /// (error, panic, crash, kill) stops the others at their next barrier
    /// or page wait, and the run returns an error naming it.
    pub fn run<F>(&self, kind: TeamKind, f: F) -> Result<TeamReport, Error>
    where
        F: Fn(&Worker<'_>) -> Result<(), Error> + Sync,
    {
        if self.in_party {
            return Err(Error::Usage(
                "run() belongs to a region made by TeamRegion::new".into(),
            ));
        }
        let ctl = self.member.view.ctl();
        ctl.set(ctl::H_ABORT, 0);
        ctl.set(ctl::H_BAR_COUNT, 0);
        // No worker runs between runs, so a held list lock or a busy page
        // is left over from a worker of the last run that died holding it:
        // the next run's workers would wait for it forever (their owner
        // checks look at this run's pids). The list is released; a busy
        // page's contents are unknown, so it is lost (SIGBUS on access),
        // as when a waiter notices a dead owner during a run.
        ctl.set(ctl::H_LOCK, 0);
        for i in 0..ctl.get(ctl::H_NPAGES) as usize {
            let w = ctl.page(i).load(Ordering::Acquire);
            if w & ctl::BUSY != 0 {
                ctl.page(i)
                    .store(ctl::with_where(0, ctl::Where::Lost), Ordering::Release);
            }
        }
        ctl.set(ctl::H_PARTY, self.config.workers as u64);
        for r in 0..self.config.workers {
            ctl.pid(r).store(0, Ordering::Release);
        }
        let cpu =
            |r: usize| (!self.config.cpus.is_empty()).then(|| self.config.cpus[r % self.config.cpus.len()]);
        let start = Instant::now();
        let workers = match kind {
            TeamKind::Threads => self.run_threads(&f, &cpu),
            TeamKind::Processes => self.run_processes(&f, &cpu)?,
        };
        let report = TeamReport {
            workers,
            seconds: start.elapsed().as_secs_f64(),
        };
        if let Some(bad) = report
            .workers
            .iter()
            .find(|w| !w.status.success() && w.status != ExitStatus::Exited(EXIT_ABORTED))
        {
            return Err(Error::Team(format!(
                "worker {} (pid {}) failed: {}",
                bad.rank, bad.pid, bad.how
            )));
        }
        if let Some(bad) = report.workers.iter().find(|w| !w.status.success()) {
            return Err(Error::Team(format!("worker {} stopped: {}", bad.rank, bad.how)));
        }
        Ok(report)
    }

    fn run_threads<F>(&self, f: &F, cpu: &(dyn Fn(usize) -> Option<usize> + Sync)) -> Vec<WorkerExit>
    where
        F: Fn(&Worker<'_>) -> Result<(), Error> + Sync,
    {
        let ctl = self.member.view.ctl();
        let pid = tiermem_sys::thread::getpid();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..self.config.workers)
                .map(|r| {
                    let ctl = &ctl;
                    s.spawn(move || {
                        pin(r, cpu(r));
                        set_thread_rank(r);
                        let w = Worker {
                            member: &self.member,
                            rank: r,
                            workers: self.config.workers,
                            user: &self.user,
                        };
                        let code = exit_code(
                            r,
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&w))),
                        );
                        if code != 0 {
                            ctl.abort(r);
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

    fn run_processes<F>(
        &self,
        f: &F,
        cpu: &(dyn Fn(usize) -> Option<usize> + Sync),
    ) -> Result<Vec<WorkerExit>, Error>
    where
        F: Fn(&Worker<'_>) -> Result<(), Error> + Sync,
    {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let ctl = self.member.view.ctl();
        let mut pids = Vec::with_capacity(self.config.workers);
        for r in 0..self.config.workers {
            match process::fork(true) {
                Ok(Forked::Child) => self.worker_main(r, f, cpu(r)),
                Ok(Forked::Parent(pid)) => pids.push(pid),
                Err(errno) => {
                    ctl.set(ctl::H_ABORT, r as u64 + 1);
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
                    ctl.abort(r);
                    deadline.get_or_insert(Instant::now() + Duration::from_secs(2));
                }
            }
            if deadline.is_some_and(|d| Instant::now() > d) {
                // Workers that compute without ever waiting do not see the
                // abort flag: stop them.
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

    /// A forked worker: joins as `rank`, runs `f`, and leaves with `_exit`.
    fn worker_main<F>(&self, rank: usize, f: &F, cpu: Option<usize>) -> !
    where
        F: Fn(&Worker<'_>) -> Result<(), Error> + Sync,
    {
        pin(rank, cpu);
        let member = match Member::join(self.member.view.clone(), rank, false, 1) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("tiermem team: worker {rank} cannot join: {e}");
                process::exit_now(1)
            }
        };
        let w = Worker {
            member: &member,
            rank,
            workers: self.config.workers,
            user: &self.user,
        };
        let code = exit_code(
            rank,
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&w))),
        );
        let ctl = member.view.ctl();
        ctl.pid(rank).fetch_or(PID_FINISHED, Ordering::AcqRel);
        process::exit_now(code)
    }
}

/// A worker's exit code: 0, [`EXIT_ABORTED`] when it stopped because
/// another failed, 1 for an error (printed), 101 for a panic.
pub(super) fn exit_code(rank: usize, r: std::thread::Result<Result<(), Error>>) -> i32 {
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
pub(super) fn pin(rank: usize, cpu: Option<usize>) {
    if let Some(c) = cpu {
        if let Err(e) = tiermem_sys::thread::set_affinity(&[c]) {
            eprintln!("tiermem team: worker {rank} not pinned to CPU {c}: {e}");
        }
    }
}
