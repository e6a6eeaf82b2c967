//! Dedicated data-mover threads (paper 1, section III.D): they fill pages
//! ahead of demand (prefetch requests) and evict behind it (keeping free
//! near slots between watermarks), so that application threads seldom move
//! data in their own faults.
//!
//! Work arrives through a bounded lock-free queue (pushed from the fault
//! path, also inside the SIGBUS handler: no allocation, no lock) and a
//! futex word. A mover with nothing to do spins for a while before it
//! sleeps, because waking a thread on another CPU costs about 50 us here;
//! the fault path issues the wake-up system call only when a mover sleeps.
//!
//! Asynchronous eviction pays off when victims form long contiguous runs
//! (streams): one unmap call, one TLB shootdown, for hundreds of pages.
//! Under random access the victims are scattered, and every short run
//! costs a shootdown IPI into the application's CPU (the mover runs in the
//! same address space), while a fault that evicts inline with the mover
//! asleep sends none (the idle CPU is in lazy TLB mode). So a mover whose
//! eviction runs average fewer than [`MIN_RUN_PAGES`] pages pauses its
//! eviction duty, leaves eviction to the faults, and probes again after a
//! pause that doubles while victims stay scattered.
//!
//! With `movers = auto` the mover also stands down while the application
//! keeps every CPU busy (see `cpu_gate`): it sleeps, and the faults move
//! data as without movers.
//!
//! Shutdown, step by step: the region sets `stop`, wakes every mover and
//! joins them; a mover checks `stop` between work items, so it finishes the
//! run in hand (pages it owns are always published) and exits. A panic in a
//! mover aborts the process: pages it owned would stay Busy forever.

use super::cpu_gate::{Change, Clocks, Gate, WINDOW};
use super::prefetch::Request;
use super::{Evicted, RegionCore};
use crossbeam_queue::ArrayQueue;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tiermem_sys::thread::{futex_wait, futex_wake};

/// How long an idle mover spins before it sleeps.
const SPIN: Duration = Duration::from_micros(200);

/// Eviction runs shorter than this on average (pages per unmap call) make
/// asynchronous eviction a loss (see the module docs). Random access gives
/// about 1.05 pages per run; the stencil's streams give 7 to 300 (FIFO
/// batches of interleaved streams at the low end), and pausing there would
/// be a loss.
pub(crate) const MIN_RUN_PAGES: usize = 2;

/// A mover's eviction batch is at most this share of the budget (1/32),
/// and the movers keep twice that free: with 1/8 (the old share) a budget
/// of 700 pages ran with a quarter of it kept empty.
const BUDGET_SHARE: usize = 32;

/// Below this many pages of budget (8 MiB of 4 KiB pages) the movers
/// never evict on their own: their batches are a few dozen pages (1/32 of
/// the budget), every one an unmap call whose TLB shootdown interrupts the
/// application's CPU while it installs pages in the same address space.
/// NPB SP.W at a 950-page budget: the application's install calls took 15
/// us each instead of 2.2 with eviction left to the faults. Faults evict
/// inline, as without movers, and the movers only prefetch.
pub(crate) const SMALL_BUDGET: usize = 2048;

/// Batches smaller than this say little about the victims' layout.
const MIN_JUDGED_PAGES: usize = 64;

/// The first pause of asynchronous eviction, and the longest.
const PAUSE_MIN: Duration = Duration::from_millis(10);
const PAUSE_MAX: Duration = Duration::from_millis(320);

thread_local! {
    /// Set on mover threads: the fill and eviction functions they share
    /// with application threads count the movers' own work apart. A
    /// constant-initialised `Cell` has no destructor and no lazy set-up,
    /// so reading it in the SIGBUS handler is fine.
    static ON_MOVER: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is a mover.
pub(crate) fn on_mover() -> bool {
    ON_MOVER.with(Cell::get)
}

/// What the fault path and the movers share.
pub(crate) struct MoverShared {
    queue: ArrayQueue<Request>,
    work: AtomicU32,
    sleepers: AtomicU32,
    stop: AtomicBool,
    /// While non-zero, asynchronous eviction is paused until this many
    /// nanoseconds after `epoch`; the fault path then evicts inline and
    /// does not wake the movers for eviction.
    paused_until_ns: AtomicU64,
    epoch: Instant,
    /// The fault path wakes the movers when fewer slots than this are free.
    pub(crate) low_free: usize,
    /// Movers evict until this many slots are free.
    pub(crate) target_free: usize,
    /// Pages per eviction batch by the movers.
    pub(crate) batch: usize,
    /// The budget is below [`SMALL_BUDGET`].
    small: bool,
    /// `movers = auto`: the CPUs the process may run on, for the gate.
    gate_cpus: Option<f64>,
    /// The gate stood the movers down: no CPU is free for them, or they
    /// do not pay (see `cpu_gate`). The fault path then acts as without
    /// movers.
    stood_down: AtomicBool,
}

impl MoverShared {
    /// `gate_cpus`: `movers = auto`, for a process on that many CPUs.
    pub(crate) fn new(budget_pages: usize, gate_cpus: Option<f64>) -> MoverShared {
        let batch = crate::config::MAX_EVICT_BATCH.min((budget_pages / BUDGET_SHARE).max(1));
        MoverShared {
            queue: ArrayQueue::new(4096),
            work: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            // A small budget: asynchronous eviction stays off for good
            // (see `SMALL_BUDGET`).
            paused_until_ns: AtomicU64::new(if budget_pages < SMALL_BUDGET { u64::MAX } else { 0 }),
            epoch: Instant::now(),
            low_free: batch,
            // Never more than a quarter of the budget kept free.
            target_free: (2 * batch).min(budget_pages / 4),
            batch,
            small: budget_pages < SMALL_BUDGET,
            gate_cpus,
            stood_down: AtomicBool::new(false),
        }
    }

    /// Queues a request; false if the queue is full (a dropped hint).
    pub(crate) fn submit(&self, r: Request) -> bool {
        self.queue.push(r).is_ok()
    }

    /// Tells the movers there is work. Cheap when none sleeps.
    pub(crate) fn wake(&self) {
        // Release: the queued request (or the budget state) is visible to a
        // mover that sees the new value.
        self.work.fetch_add(1, Ordering::Release);
        // SeqCst pairs with the mover's increment of `sleepers` before it
        // rechecks for work: either we see it asleep, or it sees our work.
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            futex_wake(&self.work, 1);
        }
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// True while asynchronous eviction is paused (scattered victims) or
    /// the movers stood down. Two loads: cheap enough for every fault.
    pub(crate) fn eviction_paused(&self) -> bool {
        self.paused_until_ns.load(Ordering::Relaxed) != 0 || self.stood_down()
    }

    /// True while the gate keeps the movers from working (`movers =
    /// auto` with no CPU free): no prefetch, no asynchronous eviction.
    pub(crate) fn stood_down(&self) -> bool {
        self.stood_down.load(Ordering::Relaxed)
    }

    /// The time left in the pause; None once it is over (which also ends
    /// it, so that the next eviction is a probe).
    fn pause_left(&self) -> Option<Duration> {
        let until = self.paused_until_ns.load(Ordering::Relaxed);
        if until == 0 {
            return None;
        }
        let now = self.epoch.elapsed().as_nanos() as u64;
        if now >= until {
            let _ = self
                .paused_until_ns
                .compare_exchange(until, 0, Ordering::Relaxed, Ordering::Relaxed);
            return None;
        }
        Some(Duration::from_nanos(until - now))
    }

    fn pause_eviction(&self, pause: Duration) {
        let until = (self.epoch.elapsed() + pause).as_nanos() as u64;
        self.paused_until_ns.store(until.max(1), Ordering::Relaxed);
    }

    /// Whether an idle mover has something to do (or must stop).
    fn has_work(&self, core: &RegionCore) -> bool {
        !self.queue.is_empty() || self.stopping() || self.eviction_wanted(core, self.low_free)
    }

    /// Whether the movers should evict now.
    fn eviction_wanted(&self, core: &RegionCore, below: usize) -> bool {
        !self.stood_down() && core.free_slots() < below && self.pause_left().is_none()
    }
}

/// A mover's view of how well its evictions batch.
struct EvictionPacing {
    pause: Duration,
}

impl EvictionPacing {
    /// Judges a batch: pauses eviction when its runs were short, and
    /// doubles the pause each time that repeats.
    fn after_batch(&mut self, core: &RegionCore, m: &MoverShared, e: Evicted) {
        if e.pages < MIN_JUDGED_PAGES {
            return;
        }
        if e.pages < MIN_RUN_PAGES * e.runs {
            m.pause_eviction(self.pause);
            core.stats.eviction_pauses.fetch_add(1, Ordering::Relaxed);
            self.pause = (self.pause * 2).min(PAUSE_MAX);
        } else {
            self.pause = PAUSE_MIN;
        }
    }
}

/// The mover threads of one region.
pub(crate) struct Movers {
    threads: Vec<JoinHandle<()>>,
    core: Arc<RegionCore>,
}

impl Movers {
    /// Starts `n` movers, pinned round robin to `cpus` if given.
    pub(crate) fn start(core: &Arc<RegionCore>, n: usize, cpus: &[usize]) -> Result<Movers, crate::Error> {
        let mut threads = Vec::with_capacity(n);
        for k in 0..n {
            let mover_core = core.clone();
            let spawned = super::spawn_runtime_thread(
                "tiermem-mover",
                k,
                cpus,
                "pages it owned would stay busy",
                move || run(&mover_core, k == 0),
            );
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    Movers {
                        threads,
                        core: core.clone(),
                    }
                    .stop();
                    return Err(e.into());
                }
            }
        }
        Ok(Movers {
            threads,
            core: core.clone(),
        })
    }

    /// In a `fork()`ed child: the threads are the parent's, so their
    /// handles are forgotten, never joined.
    pub(crate) fn abandon(self) {
        std::mem::forget(self.threads);
    }

    /// Stops and joins the movers (see the module docs).
    pub(crate) fn stop(self) {
        if let Some(m) = &self.core.movers {
            m.stop.store(true, Ordering::Release);
            m.work.fetch_add(1, Ordering::Release);
            futex_wake(&m.work, i32::MAX);
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn run(core: &RegionCore, first: bool) {
    let m = core
        .movers
        .as_ref()
        .expect("movers run only for regions with movers");
    ON_MOVER.with(|c| c.set(true));
    let staging = core.mover_staging();
    let mut pacing = EvictionPacing { pause: PAUSE_MIN };
    // `movers = auto`: the first mover keeps the gate.
    let mut gate = m.gate_cpus.filter(|_| first).map(|cpus| {
        if core.config.mover_cpus.is_empty() {
            pin_to_last_launch_cpu();
        }
        CpuGate::new(cpus, core)
    });
    loop {
        if m.stopping() {
            return;
        }
        if let Some(g) = gate.as_mut() {
            g.look(core, m);
        }
        let mut worked = false;
        let t = Instant::now();
        let cpu = tiermem_sys::thread::thread_cpu_time();
        // Eviction duty first: fills need free slots, and so do faults.
        if m.eviction_wanted(core, m.target_free) {
            let e = core.mover_evict(m.batch);
            pacing.after_batch(core, m, e);
            worked = e.pages > 0;
        }
        if let Some(r) = m.queue.pop() {
            let filled = core.mover_fill(&r, staging.as_ref());
            core.stats
                .mover_pages_in
                .fetch_add(filled as u64, Ordering::Relaxed);
            worked = true;
        }
        if worked {
            let cpu = tiermem_sys::thread::thread_cpu_time().saturating_sub(cpu);
            core.stats
                .mover_busy_ns
                .fetch_add(cpu.as_nanos() as u64, Ordering::Relaxed);
            core.stats
                .mover_busy_wall_ns
                .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            continue;
        }
        // Idle: spin a while (a wake-up across CPUs costs ~50 us), then
        // sleep. Not over a small budget: a mover spinning in the
        // application's address space turns each of the application's TLB
        // flushes (its inline evictions, write-protects) into an IPI to the
        // mover's CPU, and there the work it waits for comes in small
        // pieces (NPB SP.W at 950 pages: the application's fault-path
        // costs 2.6x those of no mover at all, with the mover busy 4 s of
        // its 15 s of spinning).
        let seen = m.work.load(Ordering::Acquire);
        let t = Instant::now();
        let mut found = false;
        while !m.small && t.elapsed() < SPIN {
            if m.has_work(core) {
                found = true;
                break;
            }
            std::hint::spin_loop();
        }
        if found {
            continue;
        }
        m.sleepers.fetch_add(1, Ordering::SeqCst);
        if !m.has_work(core) {
            // A paused mover sleeps to the end of its pause at most, and
            // a gated one to its next look at the CPUs (a window).
            let nap = m.pause_left().map_or(WINDOW, |p| p.min(WINDOW));
            futex_wait(&m.work, seen, Some(nap));
        }
        m.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An `auto` mover not pinned by the user runs on the last CPU the
/// process started on: OpenMP places threads from the first, and the
/// mover is there for a CPU the application leaves free.
fn pin_to_last_launch_cpu() {
    let Some(&last) = tiermem_sys::thread::launch_cpus().last() else {
        return;
    };
    if let Err(e) = tiermem_sys::thread::set_affinity(&[last]) {
        eprintln!("tiermem: mover: pinning to CPU {last} failed ({e}); running where it was started");
    }
}

/// CPU time and user-mode CPU time of every `auto` mover in the process,
/// in ns (each adds its own at each look): the application's is the rest.
static AUTO_MOVERS_CPU_NS: AtomicU64 = AtomicU64::new(0);
static AUTO_MOVERS_USER_NS: AtomicU64 = AtomicU64::new(0);

/// The gate of `movers = auto` with its clocks (see `cpu_gate`).
struct CpuGate {
    gate: Gate,
    start: Instant,
    delay: Option<tiermem_sys::thread::RunDelay>,
    /// The process's CPUs' idle time.
    idle: Option<tiermem_sys::thread::IdleTime>,
    last_look: Instant,
    /// This mover's CPU time and user-mode CPU time at the last look.
    own_cpu: Duration,
    own_user: Duration,
    /// The faults' copies with the memory store so far (ns), and the
    /// statistics' reading at the last look.
    copies_ns: u64,
    last_transfer_ns: u64,
}

impl CpuGate {
    fn new(cpus: f64, core: &RegionCore) -> CpuGate {
        let start = Instant::now();
        let mut g = CpuGate {
            gate: Gate::new(cpus, Clocks::default()),
            start,
            delay: tiermem_sys::thread::RunDelay::open(),
            idle: tiermem_sys::thread::IdleTime::new(&tiermem_sys::thread::launch_cpus()),
            last_look: start,
            own_cpu: tiermem_sys::thread::thread_cpu_time(),
            own_user: tiermem_sys::thread::user_time(false),
            copies_ns: 0,
            last_transfer_ns: core.stats.transfer_ns(),
        };
        g.gate = Gate::new(cpus, g.clocks(core));
        g
    }

    fn clocks(&mut self, core: &RegionCore) -> Clocks {
        // This mover's clock now, its growth added to every auto mover's
        // total: the total.
        let share = |now: Duration, last: &mut Duration, all: &AtomicU64| {
            let added = now.saturating_sub(*last).as_nanos() as u64;
            *last = now;
            all.fetch_add(added, Ordering::Relaxed) + added
        };
        let own = tiermem_sys::thread::thread_cpu_time();
        let all = share(own, &mut self.own_cpu, &AUTO_MOVERS_CPU_NS);
        let movers_user = share(
            tiermem_sys::thread::user_time(false),
            &mut self.own_user,
            &AUTO_MOVERS_USER_NS,
        );
        let process_user = tiermem_sys::thread::user_time(true);
        // With the memory store, the faults' transfers are copies in user
        // mode (write-backs, ring fills): tiermem's work, not the
        // application's progress. A stood-down mover hands its evictions
        // to the faults, so counting them would favour standing down.
        if let crate::config::FarStoreConfig::Memory = core.config.far {
            // Counted through `Region::reset_stats`, which zeroes the
            // statistics under a running mover.
            let now = core.stats.transfer_ns();
            self.copies_ns += now.checked_sub(self.last_transfer_ns).unwrap_or(now);
            self.last_transfer_ns = now;
        }
        Clocks {
            wall: self.start.elapsed(),
            process_cpu: tiermem_sys::thread::process_cpu_time(),
            mover_cpu: own,
            movers_cpu: Duration::from_nanos(all),
            // Without scheduler statistics the mover never stands down:
            // it works as a fixed mover would.
            mover_delay: self.delay.as_ref().and_then(|d| d.read()).unwrap_or_default(),
            stall: Duration::from_nanos(core.stats.fault_ns()),
            app_user: process_user.saturating_sub(Duration::from_nanos(movers_user + self.copies_ns)),
            idle: self.idle.as_ref().and_then(|t| t.read()),
        }
    }

    /// Samples once a window and applies what the gate decides.
    fn look(&mut self, core: &RegionCore, m: &MoverShared) {
        if !self.gate.due(self.start.elapsed()) {
            return;
        }
        if !self.gate.working() {
            // Counted window by window: a report taken while stood down
            // is at most a window behind.
            core.stats
                .mover_stood_down_ns
                .fetch_add(self.last_look.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        self.last_look = Instant::now();
        let now = self.clocks(core);
        let change = self.gate.sample(now);
        let count = |c: &AtomicU64| {
            c.fetch_add(1, Ordering::Relaxed);
        };
        match change {
            Change::Stay => {}
            Change::StandDown => count(&core.stats.mover_stand_downs),
            Change::TrialOff | Change::TrialOn => count(&core.stats.mover_trials),
            Change::Unpaid => count(&core.stats.mover_unpaid),
            Change::Engage | Change::Pays | Change::NoVerdict => {}
        }
        if change == Change::Stay {
            return;
        }
        let working = self.gate.working();
        let was_down = m.stood_down.swap(!working, Ordering::Relaxed);
        if !working && !was_down {
            // Not filled on a CPU the application needs, or by a mover that
            // does not pay: dropped hints (requests own no pages; a fault
            // fills what it needs).
            while let Some(r) = m.queue.pop() {
                if let Some(pf) = &core.prefetcher {
                    pf.dropped.fetch_add(r.count as u64, Ordering::Relaxed);
                }
            }
        }
    }
}
