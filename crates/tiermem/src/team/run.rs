//! Running a team's workers on the party launcher ([`crate::party`]):
//! as threads or forked processes, each joined to the region.

use super::*;
use crate::party::exit_code;

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
        let party = ctl.party();
        party.reset(self.config.workers);
        let cpu =
            |r: usize| (!self.config.cpus.is_empty()).then(|| self.config.cpus[r % self.config.cpus.len()]);
        let start = Instant::now();
        let workers = match kind {
            TeamKind::Threads => party.run_threads(self.config.workers, &cpu, &|r| {
                set_thread_rank(r);
                f(&Worker {
                    member: &self.member,
                    rank: r,
                    workers: self.config.workers,
                    user: &self.user,
                })
            }),
            TeamKind::Processes => {
                party.run_processes(self.config.workers, &cpu, &|r| self.worker_main(r, &f))?
            }
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

    /// A forked worker: joins as `rank` and runs `f`; its exit code.
    fn worker_main<F>(&self, rank: usize, f: &F) -> i32
    where
        F: Fn(&Worker<'_>) -> Result<(), Error> + Sync,
    {
        let member = match Member::join(self.member.view.clone(), rank, false, 1) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("tiermem team: worker {rank} cannot join: {e}");
                return 1;
            }
        };
        let w = Worker {
            member: &member,
            rank,
            workers: self.config.workers,
            user: &self.user,
        };
        // The member leaves with the process (`_exit`), not here.
        let code = exit_code(
            rank,
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&w))),
        );
        std::mem::forget(member);
        code
    }
}
