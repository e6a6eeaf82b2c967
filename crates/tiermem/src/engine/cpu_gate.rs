//! `movers = auto`: the mover works only while a CPU is free for it, and
//! only while it pays.
//!
//! A mover pays where it runs beside the application on a CPU the
//! application leaves idle: NPB class A on one OpenMP thread at near 50%,
//! CG, MG and FT ran 1.3-2x faster with one. On CPUs the application keeps
//! busy it takes their time instead: on two threads over two CPUs, CG and
//! IS ran 1.3x and 1.5x slower with a mover than without. Which case holds
//! changes during a run (a serial set-up, then parallel loops), so the
//! mover samples the CPUs every [`WINDOW`]:
//! - **working**, it reads its own run delay (time it was runnable but
//!   waited for a CPU). When that is over a quarter of the time it wanted
//!   to run, it competes with the application's threads: it stands down.
//! - **stood down**, it sleeps (its queued requests are dropped); the
//!   faults evict inline and nothing is prefetched. It reads the
//!   application's CPU use (the process's CPU time less that of every
//!   `auto` mover): once that leaves a CPU free (at most `cpus - 0.9` in
//!   use) and the process's CPUs are idle for most of one (`/proc/stat`:
//!   another process, a compile or a second job on the node, may use what
//!   the application leaves), it works again.
//!
//! A stand-down after a short spell of work holds it down for twice as
//! long as the last one did (from one window up to [`MAX_HOLD`]), so a
//! program whose phases flip quickly pays for a few windows, not for each
//! flip.
//!
//! A free CPU is not enough: on IS a mover made the program 2.5x slower
//! with a CPU to spare (its free margin and read-ahead push out the hot
//! bucket pages, which fault straight back), and no fault statistic told
//! IS from MG, where the same mover halves the time. Nor does the time in
//! faults: on IS most of what the mover costs lies outside them (the TLB
//! shootdowns of its evictions, three times the traffic). So the gate
//! measures what the mover is there for, the application's **progress**:
//! the user-mode CPU time of its threads per wall second, the time they
//! run the program's own code. Now and then it **tries the other state**
//! for [`TRIAL`] windows (the first one not counted, the queues settle)
//! and compares their progress with that of the windows just before. The
//! mover stays stood down ("does not pay") when the trial without it made
//! clearly more progress, and comes back when a trial with it does; a
//! trial that changes nothing doubles the time to the next one
//! (from [`TRIAL_EVERY`] windows up to [`MAX_TRIAL_EVERY`]), so a choice
//! that holds costs a few windows in a hundred. The decision is
//! [`Gate::sample`], a pure function of the clocks, so that it can be
//! tested without a scheduler.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Whether gates made from now on run trials (tests of the CPU rule alone
/// turn them off: `tiermem::region::set_mover_trials`).
pub(crate) static TRIALS: AtomicBool = AtomicBool::new(true);

/// How often the mover looks.
pub(crate) const WINDOW: Duration = Duration::from_millis(100);
/// The longest hold after a stand-down, in windows.
const MAX_HOLD: u32 = 32;
/// A CPU is free for the mover while the application leaves this much
/// of one unused.
const FREE_CPU: f64 = 0.9;
/// ... and its CPUs are idle this much (idle time comes in clock ticks, a
/// tenth of a window at 100 Hz: an idle CPU reads 0.9 to 1.1).
const IDLE_CPU: f64 = 0.75;
/// CPUs' worth of time a process needs for an `auto` mover to be worth
/// starting: with fewer, the gate could never find a CPU free.
pub(crate) const MIN_CPUS: f64 = 1.0 + FREE_CPU;
/// A spell of work at least this long (in windows) resets the hold.
const LONG_SPELL: u32 = 10;
/// Windows of a trial of the other state, the first not counted.
pub(crate) const TRIAL: u32 = 4;
/// Counted windows a trial that looks like a win goes on to before the
/// state changes: a switch is judged on twice the windows (a false "does
/// not pay" on MG.A, where the mover pays 1.7x, came in one trial of three
/// with 3 windows).
const CONFIRM: u32 = 2 * (TRIAL - 1);
/// Windows of the current state between trials, at first and after a
/// switch; doubled after each trial that changed nothing.
const TRIAL_EVERY: u32 = 10;
const MAX_TRIAL_EVERY: u32 = 160;
/// Windows kept of the current state: the baseline a trial is compared
/// with is their mean, of at least [`MIN_BASELINE`] of them.
const RECENT: usize = 6;
const MIN_BASELINE: usize = 3;
/// A trial wins when the baseline's progress is below this share of its
/// own and at least [`MIN_GAIN`] of wall time less (user time is sampled
/// at the tick, and phases change within a window).
const WIN_SHARE: f64 = 0.85;
const MIN_GAIN: f64 = 0.03;
/// No trials while the application spends less than this share of its
/// wall time in faults: there is little for a mover to win or lose.
const MIN_STALL: f64 = 0.03;
/// A trial whose application used this many CPUs more or fewer than the
/// baseline's says nothing: the application changed (threads woke up or
/// went to sleep), not the mover's effect on it.
const SAME_CPUS: f64 = 0.5;

/// Clock readings at one sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Clocks {
    /// Wall time since the gate started.
    pub(crate) wall: Duration,
    /// The process's CPU time.
    pub(crate) process_cpu: Duration,
    /// The mover's own CPU time.
    pub(crate) mover_cpu: Duration,
    /// The CPU time of every `auto` mover in the process, this one's
    /// included (one per tiered region: the heap, each static section).
    pub(crate) movers_cpu: Duration,
    /// The mover's run delay (runnable, waiting for a CPU).
    pub(crate) mover_delay: Duration,
    /// Time the application's threads spent in the region's faults.
    pub(crate) stall: Duration,
    /// User-mode CPU time of the application's threads (the process's
    /// less that of every `auto` mover): the time they ran its own code.
    pub(crate) app_user: Duration,
    /// Idle time of the process's CPUs, summed (None: unknown): another
    /// process may keep busy what the application leaves.
    pub(crate) idle: Option<Duration>,
}

/// What a sample decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// Stay as it is.
    Stay,
    /// Stop working: the application needs every CPU.
    StandDown,
    /// Work again: a CPU is free.
    Engage,
    /// Stop working for a trial without the mover.
    TrialOff,
    /// Work again for a trial with the mover.
    TrialOn,
    /// A trial found that the mover does not pay: it stays stood down (or
    /// stands down again after a trial with it).
    Unpaid,
    /// A trial found that the mover pays: it works (or works again after a
    /// trial without it).
    Pays,
    /// A trial said nothing (the application changed its CPU use): back
    /// to the state before.
    NoVerdict,
}

/// A trial in progress.
#[derive(Clone, Copy, Debug)]
struct Trial {
    /// Progress and CPU use of the state tried against.
    baseline: f64,
    baseline_cpus: f64,
    /// Windows counted so far (after the first), their progress and CPU
    /// use.
    windows: u32,
    progress: f64,
    cpus: f64,
}

/// One window: the application's progress (user CPU per wall second)
/// and stall (time in the region's faults per wall second).
#[derive(Clone, Copy, Debug)]
struct Window {
    progress: f64,
    stall: f64,
    /// The application's CPU use (CPUs).
    cpus: f64,
}

/// The state of one mover's gate.
#[derive(Debug)]
pub(crate) struct Gate {
    /// CPUs' worth of time the process may use.
    cpus: f64,
    last: Clocks,
    /// Whether the mover works now (in a trial too).
    working: bool,
    /// The last verdict: the mover does not pay. It outlives stand-downs
    /// for CPUs (a parallel phase in the middle of a trial with it). Not
    /// working, in no trial and not unpaid: stood down for CPUs.
    unpaid: bool,
    /// Windows this state has lasted.
    spell: u32,
    /// Windows worked since the last stand-down for CPUs (trials do not
    /// interrupt it), and windows such a stand-down lasts at least.
    worked: u32,
    hold: u32,
    /// The recent windows of this state, newest last.
    recent: Vec<Window>,
    /// Windows until the next trial, counted in the state a trial starts
    /// from (not reset when the CPUs come and go), and the interval.
    until_trial: u32,
    trial_every: u32,
    trial: Option<Trial>,
    /// Trials at all ([`TRIALS`] when the gate was made).
    trials: bool,
}

impl Gate {
    /// A gate for a process that may use `cpus` CPUs' worth of time
    /// (`tiermem_sys::thread::usable_cpus`); it starts working.
    pub(crate) fn new(cpus: f64, at: Clocks) -> Gate {
        Gate {
            cpus: cpus.max(1.0),
            last: at,
            working: true,
            unpaid: false,
            spell: 0,
            worked: 0,
            hold: 1,
            recent: Vec::with_capacity(RECENT),
            until_trial: TRIAL_EVERY,
            trial_every: TRIAL_EVERY,
            trial: None,
            trials: TRIALS.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn working(&self) -> bool {
        self.working
    }

    /// Whether a window has passed since the last sample.
    pub(crate) fn due(&self, wall: Duration) -> bool {
        wall.saturating_sub(self.last.wall) >= WINDOW
    }

    /// Looks at the clocks; call once a window (see `due`).
    pub(crate) fn sample(&mut self, now: Clocks) -> Change {
        let d = |a: Duration, b: Duration| a.saturating_sub(b).as_secs_f64();
        let wall = d(now.wall, self.last.wall).max(1e-9);
        let mover_cpu = d(now.mover_cpu, self.last.mover_cpu);
        let delay = d(now.mover_delay, self.last.mover_delay);
        let movers_cpu = d(now.movers_cpu, self.last.movers_cpu).max(mover_cpu);
        let app_cpus = (d(now.process_cpu, self.last.process_cpu) - movers_cpu).max(0.0) / wall;
        let idle_cpus = match (now.idle, self.last.idle) {
            (Some(now), Some(last)) => d(now, last) / wall,
            _ => f64::INFINITY,
        };
        let here = Window {
            progress: d(now.app_user, self.last.app_user) / wall,
            stall: d(now.stall, self.last.stall) / wall,
            cpus: app_cpus,
        };
        self.last = now;
        self.spell = self.spell.saturating_add(1);
        let cpu_free = app_cpus <= self.cpus - FREE_CPU && idle_cpus >= IDLE_CPU;
        if self.working {
            self.worked = self.worked.saturating_add(1);
            // Too little wanted run time says nothing (an idle mover).
            let wanted = mover_cpu + delay;
            if wanted > 0.05 * wall && delay > 0.25 * wanted {
                // A trial with a mover that did not pay ends unjudged, and
                // the verdict stands (the hold is for the CPU rule alone).
                if self.unpaid {
                    self.enter(false);
                    return Change::StandDown;
                }
                self.hold = if self.worked < LONG_SPELL {
                    (self.hold * 2).min(MAX_HOLD)
                } else {
                    1
                };
                self.worked = 0;
                self.enter(false);
                return Change::StandDown;
            }
        } else if self.trial.is_none() && !self.unpaid {
            // Stood down for CPUs.
            if self.spell >= self.hold && cpu_free {
                self.enter(true);
                return Change::Engage;
            }
            return Change::Stay;
        }
        // Working, or stood down because the mover did not pay.
        if let Some(mut t) = self.trial {
            if self.spell > 1 {
                t.windows += 1;
                t.progress += here.progress;
                t.cpus += here.cpus;
            }
            self.trial = Some(t);
            if t.windows < TRIAL - 1 {
                return Change::Stay;
            }
            let tried = t.progress / t.windows as f64;
            let comparable = (t.cpus / t.windows as f64 - t.baseline_cpus).abs() <= SAME_CPUS;
            let better = comparable && t.baseline < WIN_SHARE * tried && tried - t.baseline >= MIN_GAIN;
            if better && t.windows < CONFIRM {
                return Change::Stay;
            }
            // The state tried becomes the state, and trials come soon
            // again; or back to the state before, and the next waits
            // longer (unless the trial said nothing).
            let working = if better {
                self.trial_every = TRIAL_EVERY;
                self.working
            } else {
                if comparable {
                    self.trial_every = (self.trial_every * 2).min(MAX_TRIAL_EVERY);
                }
                !self.working
            };
            self.unpaid = !working;
            self.until_trial = self.trial_every;
            self.enter(working);
            return match (comparable, working) {
                (false, _) => Change::NoVerdict,
                (true, true) => Change::Pays,
                (true, false) => Change::Unpaid,
            };
        }
        if !self.working && !cpu_free {
            // No trial with the mover now, and these windows (every CPU
            // busy) are no baseline for one in a freer phase; nor is the
            // first free one after them (part busy).
            self.recent.clear();
            self.spell = 0;
            return Change::Stay;
        }
        // The first window of a state is its transition: not counted.
        if self.spell > 1 {
            if self.recent.len() == RECENT {
                self.recent.remove(0);
            }
            self.recent.push(here);
        }
        self.until_trial = self.until_trial.saturating_sub(1);
        if self.until_trial > 0 || self.recent.len() < MIN_BASELINE || !self.trials {
            return Change::Stay;
        }
        self.until_trial = self.trial_every;
        let mean = |f: fn(&Window) -> f64| self.recent.iter().map(f).sum::<f64>() / self.recent.len() as f64;
        if mean(|w| w.stall) < MIN_STALL {
            // Faults cost the application almost nothing: a mover cannot
            // cost it much either.
            return Change::Stay;
        }
        let (baseline, baseline_cpus) = (mean(|w| w.progress), mean(|w| w.cpus));
        self.enter(!self.working);
        self.trial = Some(Trial {
            baseline,
            baseline_cpus,
            windows: 0,
            progress: 0.0,
            cpus: 0.0,
        });
        if self.working {
            Change::TrialOn
        } else {
            Change::TrialOff
        }
    }

    /// Enters a state: no trial, and its history starts over.
    fn enter(&mut self, working: bool) {
        self.working = working;
        self.spell = 0;
        self.trial = None;
        self.recent.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds windows of (application CPUs, mover CPU share, mover delay
    /// share) and returns the changes.
    fn run(gate: &mut Gate, clocks: &mut Clocks, windows: &[(f64, f64, f64)]) -> Vec<Change> {
        windows
            .iter()
            .map(|&(app, mover, delay)| window(gate, clocks, app, mover, delay, 0.0, 0.0))
            .collect()
    }

    /// One window; `stall` is the application's share of it in faults,
    /// `progress` that in its own code.
    fn window(
        gate: &mut Gate,
        clocks: &mut Clocks,
        app: f64,
        mover: f64,
        delay: f64,
        stall: f64,
        progress: f64,
    ) -> Change {
        let w = WINDOW.as_secs_f64();
        clocks.wall += WINDOW;
        clocks.mover_cpu += Duration::from_secs_f64(mover * w);
        clocks.movers_cpu = clocks.mover_cpu;
        clocks.process_cpu += Duration::from_secs_f64((app + mover) * w);
        clocks.mover_delay += Duration::from_secs_f64(delay * w);
        clocks.stall += Duration::from_secs_f64(stall * w);
        clocks.app_user += Duration::from_secs_f64(progress * w);
        gate.sample(*clocks)
    }

    #[test]
    fn a_cpu_another_process_keeps_busy_is_not_free() {
        let mut c = Clocks {
            idle: Some(Duration::ZERO),
            ..Clocks::default()
        };
        let mut g = Gate::new(2.0, c);
        // Two busy threads: the mover waits half the time it wants.
        assert_eq!(run(&mut g, &mut c, &[(2.0, 0.2, 0.2)]), [Change::StandDown]);
        // One of them stops, but another process takes its CPU: no CPU is
        // idle, so none is free.
        let busy = run(&mut g, &mut c, &[(1.0, 0.0, 0.0); 20]);
        assert!(busy.iter().all(|&ch| ch == Change::Stay), "{busy:?}");
        // That process goes: one CPU idle.
        let w = WINDOW.as_secs_f64();
        c.idle = c.idle.map(|i| i + Duration::from_secs_f64(0.9 * w));
        assert_eq!(window(&mut g, &mut c, 1.0, 0.0, 0.0, 0.0, 0.0), Change::Engage);
    }

    /// One application thread on two CPUs whose (stall, progress) is `on`
    /// with the mover working and `off` without, for `windows` windows:
    /// the share of them the mover worked, and the changes.
    fn closed_loop(on: (f64, f64), off: (f64, f64), windows: usize) -> (f64, Vec<Change>) {
        let mut c = Clocks::default();
        let mut g = Gate::new(2.0, c);
        let mut worked = 0;
        let mut changes = Vec::new();
        for _ in 0..windows {
            let working = g.working();
            worked += working as usize;
            let (mover, (stall, progress)) = if working { (0.5, on) } else { (0.0, off) };
            let ch = window(&mut g, &mut c, 1.0, mover, 0.0, stall, progress);
            if ch != Change::Stay {
                changes.push(ch);
            }
        }
        (worked as f64 / windows as f64, changes)
    }

    #[test]
    fn a_mover_that_slows_the_application_stands_down_and_retries_ever_less() {
        // IS with a mover at 25%: as much time in faults, but far less in
        // its own code (the rest goes to shootdowns and traffic).
        let (worked, changes) = closed_loop((0.45, 0.2), (0.45, 0.5), 400);
        assert_eq!(changes[..2], [Change::TrialOff, Change::Unpaid], "{changes:?}");
        assert!(worked < 0.15, "worked {worked}: {changes:?}");
        // Its later trials with the mover lose too, and come ever later.
        let ons = changes.iter().filter(|&&x| x == Change::TrialOn).count();
        assert!((2..=5).contains(&ons), "{changes:?}");
        assert!(!changes.contains(&Change::Pays), "{changes:?}");
    }

    #[test]
    fn a_mover_that_lowers_the_stall_keeps_working_with_rarer_trials() {
        // MG: the mover halves the time in faults.
        let (worked, changes) = closed_loop((0.3, 0.7), (0.7, 0.3), 400);
        assert_eq!(changes[..2], [Change::TrialOff, Change::Pays], "{changes:?}");
        assert!(worked > 0.93, "worked {worked}: {changes:?}");
        assert!(!changes.contains(&Change::Unpaid), "{changes:?}");
    }

    #[test]
    fn a_trial_that_changes_little_keeps_the_state() {
        let (worked, changes) = closed_loop((0.5, 0.5), (0.45, 0.53), 400);
        assert!(worked > 0.93, "worked {worked}: {changes:?}");
        assert!(!changes.contains(&Change::Unpaid), "{changes:?}");
    }

    #[test]
    fn a_phase_where_the_mover_starts_to_pay_brings_it_back() {
        let mut c = Clocks::default();
        let mut g = Gate::new(2.0, c);
        let mut seen = Vec::new();
        // 100 windows where it hurts, then 300 where it pays.
        for k in 0..400 {
            let hurts = k < 100;
            let progress = match (g.working(), hurts) {
                (true, true) | (false, false) => 0.2,
                _ => 0.6,
            };
            let mover = if g.working() { 0.5 } else { 0.0 };
            seen.push(g.working());
            window(&mut g, &mut c, 1.0, mover, 0.0, 0.5, progress);
        }
        let down_early = seen[..100].iter().filter(|&&w| !w).count();
        let up_late = seen[200..].iter().filter(|&&w| w).count();
        assert!(down_early > 60, "{down_early} of 100 windows stood down");
        assert!(up_late > 180, "{up_late} of 200 windows working");
    }

    /// Drives the gate until a trial without the mover has found that it
    /// does not pay (one application thread; progress 0.2 with the
    /// mover, 0.6 without).
    fn unpaid_gate() -> (Gate, Clocks) {
        let mut c = Clocks::default();
        let mut g = Gate::new(2.0, c);
        for _ in 0..TRIAL_EVERY + CONFIRM + 2 {
            let (mover, progress) = if g.working() { (0.5, 0.2) } else { (0.0, 0.6) };
            window(&mut g, &mut c, 1.0, mover, 0.0, 0.4, progress);
        }
        assert!(!g.working() && g.unpaid, "{g:?}");
        (g, c)
    }

    #[test]
    fn a_parallel_phase_in_a_trial_with_the_mover_keeps_the_verdict() {
        let (mut g, mut c) = unpaid_gate();
        let mut k = 0;
        while window(&mut g, &mut c, 1.0, 0.0, 0.0, 0.4, 0.6) != Change::TrialOn {
            k += 1;
            assert!(k < 200, "no trial with the mover");
        }
        // The application's second thread wakes up: the mover waits.
        assert_eq!(window(&mut g, &mut c, 1.4, 0.6, 0.4, 0.4, 1.0), Change::StandDown);
        // The CPU rule's hold is its own, not a trial's.
        assert_eq!(g.hold, 1);
        // Serial again: the mover that did not pay does not come back
        // before its next trial.
        let changes: Vec<_> = (0..TRIAL_EVERY - 1)
            .map(|_| window(&mut g, &mut c, 1.0, 0.0, 0.0, 0.4, 0.6))
            .collect();
        assert!(changes.iter().all(|&x| x == Change::Stay), "{changes:?}");
        assert!(!g.working());
    }

    #[test]
    fn phases_that_flip_faster_than_the_trials_still_get_judged() {
        // Serial windows where the mover hurts, parallel ones where it
        // waits for a CPU, 5 of each in turn.
        let mut c = Clocks::default();
        let mut g = Gate::new(2.0, c);
        let (mut serial, mut serial_worked) = (0, 0);
        for k in 0..600 {
            let parallel = (k / 5) % 2 == 1;
            let w = g.working();
            if parallel {
                let (mover, delay) = if w { (0.5, 0.5) } else { (0.0, 0.0) };
                window(&mut g, &mut c, 2.0 - mover, mover, delay, 0.4, 1.2);
            } else {
                serial += 1;
                serial_worked += w as usize;
                let (mover, progress) = if w { (0.5, 0.2) } else { (0.0, 0.6) };
                window(&mut g, &mut c, 1.0, mover, 0.0, 0.4, progress);
            }
        }
        let share = serial_worked as f64 / serial as f64;
        assert!(
            share < 0.35,
            "the mover worked {share} of the serial windows: {g:?}"
        );
    }

    #[test]
    fn busy_windows_are_no_baseline_for_a_serial_phase() {
        let (mut g, mut c) = unpaid_gate();
        // Two busy threads (much user time per wall second), then a serial
        // phase where the mover pays (0.7 against 0.4 without).
        for _ in 0..50 {
            window(&mut g, &mut c, 2.0, 0.0, 0.0, 0.4, 1.8);
        }
        for _ in 0..60 {
            let (mover, progress) = if g.working() { (0.5, 0.7) } else { (0.0, 0.4) };
            window(&mut g, &mut c, 1.0, mover, 0.0, 0.4, progress);
        }
        assert!(g.working() && !g.unpaid, "{g:?}");
    }

    #[test]
    fn threads_that_wake_during_a_trial_are_no_verdict() {
        let mut c = Clocks::default();
        let mut g = Gate::new(2.0, c);
        // The mover pays a little (0.5 against 0.45) for one thread.
        let mut k = 0;
        while window(&mut g, &mut c, 1.0, 0.3, 0.0, 0.4, 0.5) != Change::TrialOff {
            k += 1;
            assert!(k < 100, "no trial");
        }
        // Without the mover, a second thread wakes up: twice the progress,
        // but not the mover's doing.
        let mut changes = Vec::new();
        for _ in 0..TRIAL {
            changes.push(window(&mut g, &mut c, 2.0, 0.0, 0.0, 0.4, 1.0));
        }
        assert!(changes.contains(&Change::NoVerdict), "{changes:?}");
        assert!(g.working() && !g.unpaid);
    }

    #[test]
    fn little_stall_needs_no_trial() {
        let (worked, changes) = closed_loop((0.02, 0.9), (0.01, 0.98), 200);
        assert_eq!(worked, 1.0);
        assert!(changes.is_empty(), "{changes:?}");
    }

    #[test]
    fn no_trial_with_the_mover_while_the_application_keeps_every_cpu() {
        let mut c = Clocks::default();
        let mut g = Gate::new(2.0, c);
        for _ in 0..TRIAL_EVERY + CONFIRM + 2 {
            let (mover, progress) = if g.working() { (0.5, 0.2) } else { (0.0, 0.6) };
            window(&mut g, &mut c, 1.0, mover, 0.0, 0.4, progress);
        }
        assert!(!g.working());
        // Unpaid; now two busy threads: no trial with the mover starts.
        for _ in 0..200 {
            assert_eq!(window(&mut g, &mut c, 2.0, 0.0, 0.0, 0.4, 1.2), Change::Stay);
        }
        assert!(!g.working());
    }

    #[test]
    fn one_application_thread_on_two_cpus_keeps_the_mover_working() {
        let mut c = Clocks::default();
        let mut g = Gate::new(2.0, c);
        let changes = run(&mut g, &mut c, &[(1.0, 0.9, 0.01); 50]);
        assert!(changes.iter().all(|&x| x == Change::Stay), "{changes:?}");
        assert!(g.working());
    }

    #[test]
    fn a_mover_that_waits_for_cpus_stands_down_until_one_is_free() {
        let mut c = Clocks::default();
        let mut g = Gate::new(2.0, c);
        // Two busy threads and a mover: it waits half the time it wants.
        assert_eq!(run(&mut g, &mut c, &[(1.4, 0.6, 0.4)]), [Change::StandDown]);
        assert!(!g.working());
        // Stood down: the application uses both CPUs; nothing changes.
        let busy = run(&mut g, &mut c, &[(2.0, 0.0, 0.0); 20]);
        assert!(busy.iter().all(|&x| x == Change::Stay), "{busy:?}");
        // A serial phase frees a CPU: the mover works again.
        assert_eq!(run(&mut g, &mut c, &[(1.0, 0.0, 0.0)]), [Change::Engage]);
    }

    #[test]
    fn quick_flips_double_the_hold_and_a_long_spell_resets_it() {
        let mut c = Clocks::default();
        let mut g = Gate::new(2.0, c);
        let contended = (1.4, 0.6, 0.4);
        let free = (1.0, 0.0, 0.0);
        assert_eq!(run(&mut g, &mut c, &[contended]), [Change::StandDown]);
        assert_eq!(g.hold, 2);
        // Held down two windows although a CPU is free.
        assert_eq!(run(&mut g, &mut c, &[free, free]), [Change::Stay, Change::Engage]);
        assert_eq!(run(&mut g, &mut c, &[contended]), [Change::StandDown]);
        assert_eq!(g.hold, 4);
        let back = run(&mut g, &mut c, &[free; 4]);
        assert_eq!(back.last(), Some(&Change::Engage), "{back:?}");
        // A long spell of work, then contention: the hold starts over.
        run(&mut g, &mut c, &[(1.0, 0.9, 0.0); LONG_SPELL as usize]);
        assert_eq!(run(&mut g, &mut c, &[contended]), [Change::StandDown]);
        assert_eq!(g.hold, 1);
    }

    #[test]
    fn an_idle_mover_is_never_judged_by_its_delay() {
        let mut c = Clocks::default();
        let mut g = Gate::new(2.0, c);
        // 1% of a window wanted, all of it waiting: too little to judge.
        let changes = run(&mut g, &mut c, &[(2.0, 0.005, 0.005); 10]);
        assert!(changes.iter().all(|&x| x == Change::Stay), "{changes:?}");
    }

    #[test]
    fn one_cpu_never_engages() {
        let mut c = Clocks::default();
        let mut g = Gate::new(1.0, c);
        assert_eq!(run(&mut g, &mut c, &[(0.6, 0.4, 0.3)]), [Change::StandDown]);
        let changes = run(&mut g, &mut c, &[(0.5, 0.0, 0.0); 40]);
        assert!(changes.iter().all(|&x| x == Change::Stay), "{changes:?}");
    }
}
