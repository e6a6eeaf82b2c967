//! `movers = auto`: the mover works only while a CPU is free for it.
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
//!   use), it works again.
//!
//! A stand-down after a short spell of work holds it down for twice as
//! long as the last one did (from one window up to [`MAX_HOLD`]), so a
//! program whose phases flip quickly pays for a few windows, not for each
//! flip. The decision is [`Gate::sample`], a pure function of the clocks,
//! so that it can be tested without a scheduler.

use std::time::Duration;

/// How often the mover looks.
pub(crate) const WINDOW: Duration = Duration::from_millis(100);
/// The longest hold after a stand-down, in windows.
const MAX_HOLD: u32 = 32;
/// A spell of work at least this long (in windows) resets the hold.
const LONG_SPELL: u32 = 10;

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
}

/// The state of one mover's gate.
#[derive(Debug)]
pub(crate) struct Gate {
    cpus: u32,
    last: Clocks,
    working: bool,
    /// Windows this state has lasted.
    spell: u32,
    /// Windows a stand-down lasts at least.
    hold: u32,
}

impl Gate {
    /// A gate for a process that may run on `cpus` CPUs; it starts working.
    pub(crate) fn new(cpus: usize, at: Clocks) -> Gate {
        Gate {
            cpus: cpus.max(1) as u32,
            last: at,
            working: true,
            spell: 0,
            hold: 1,
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
        let wall = d(now.wall, self.last.wall);
        let mover_cpu = d(now.mover_cpu, self.last.mover_cpu);
        let delay = d(now.mover_delay, self.last.mover_delay);
        let movers_cpu = d(now.movers_cpu, self.last.movers_cpu).max(mover_cpu);
        let app_cpus = (d(now.process_cpu, self.last.process_cpu) - movers_cpu).max(0.0) / wall.max(1e-9);
        self.last = now;
        self.spell = self.spell.saturating_add(1);
        if self.working {
            // Too little wanted run time says nothing (an idle mover).
            let wanted = mover_cpu + delay;
            if wanted > 0.05 * wall && delay > 0.25 * wanted {
                self.hold = if self.spell < LONG_SPELL {
                    (self.hold * 2).min(MAX_HOLD)
                } else {
                    1
                };
                self.working = false;
                self.spell = 0;
                return Change::StandDown;
            }
        } else if self.spell >= self.hold && app_cpus <= self.cpus as f64 - 0.9 {
            self.working = true;
            self.spell = 0;
            return Change::Engage;
        }
        Change::Stay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds windows of (application CPUs, mover CPU share, mover delay
    /// share) and returns the changes.
    fn run(gate: &mut Gate, clocks: &mut Clocks, windows: &[(f64, f64, f64)]) -> Vec<Change> {
        let w = WINDOW.as_secs_f64();
        windows
            .iter()
            .map(|&(app, mover, delay)| {
                clocks.wall += WINDOW;
                clocks.mover_cpu += Duration::from_secs_f64(mover * w);
                clocks.movers_cpu = clocks.mover_cpu;
                clocks.process_cpu += Duration::from_secs_f64((app + mover) * w);
                clocks.mover_delay += Duration::from_secs_f64(delay * w);
                gate.sample(*clocks)
            })
            .collect()
    }

    #[test]
    fn one_application_thread_on_two_cpus_keeps_the_mover_working() {
        let mut c = Clocks::default();
        let mut g = Gate::new(2, c);
        let changes = run(&mut g, &mut c, &[(1.0, 0.9, 0.01); 50]);
        assert!(changes.iter().all(|&x| x == Change::Stay), "{changes:?}");
        assert!(g.working());
    }

    #[test]
    fn a_mover_that_waits_for_cpus_stands_down_until_one_is_free() {
        let mut c = Clocks::default();
        let mut g = Gate::new(2, c);
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
        let mut g = Gate::new(2, c);
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
        let mut g = Gate::new(2, c);
        // 1% of a window wanted, all of it waiting: too little to judge.
        let changes = run(&mut g, &mut c, &[(2.0, 0.005, 0.005); 10]);
        assert!(changes.iter().all(|&x| x == Change::Stay), "{changes:?}");
    }

    #[test]
    fn one_cpu_never_engages() {
        let mut c = Clocks::default();
        let mut g = Gate::new(1, c);
        assert_eq!(run(&mut g, &mut c, &[(0.6, 0.4, 0.3)]), [Change::StandDown]);
        let changes = run(&mut g, &mut c, &[(0.5, 0.0, 0.0); 40]);
        assert!(changes.iter().all(|&x| x == Change::Stay), "{changes:?}");
    }
}
