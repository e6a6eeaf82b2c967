//! The mover threads that copy the overshadows' pages in the background: a
//! pool shared by the overshadows alive at a time, started with the first,
//! and stopped when it has been idle for [`IDLE_EXIT`] with none alive.
//!
//! Jobs wait in a bounded queue ([`MAX_JOBS`]); movers take a chunk of the
//! job at its head and put the job back at the tail while it has chunks
//! left (round robin between overshadows in flight). A create that finds
//! the queue full waits for room.

use super::*;

/// How many mover threads, and their CPUs; fixed when a pool starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoverConfig {
    /// Threads (default 1).
    pub movers: usize,
    /// CPUs to pin them to, round robin (default: the last online CPU, so a
    /// program on CPU 0 and the mover do not share one).
    pub cpus: Vec<usize>,
}

impl Default for MoverConfig {
    fn default() -> MoverConfig {
        let n = tiermem_sys::thread::online_cpus();
        MoverConfig {
            movers: 1,
            cpus: if n > 1 { vec![n - 1] } else { Vec::new() },
        }
    }
}

/// Overshadows in flight at once; a create beyond them waits for room.
pub(super) const MAX_JOBS: usize = 1024;

/// How long the movers wait, idle with no overshadow alive, before they
/// stop. Overshadows made one after another reuse warm threads (starting
/// them costs each create some 250 us and its copy several times more).
const IDLE_EXIT: Duration = Duration::from_secs(1);

/// The mover threads and their queue.
pub(super) struct MoverPool {
    queue: Mutex<VecDeque<Arc<Job>>>,
    /// Bumped on every enqueue and on stop; idle movers wait on it.
    work: AtomicU32,
    idle: AtomicU32,
    /// Overshadows alive that use the pool (changed under [`POOL`]'s lock).
    users: AtomicUsize,
    stop: AtomicBool,
    config: MoverConfig,
    /// The process whose threads these are: a `fork()`ed child inherits
    /// the registry, not the threads.
    pid: u32,
}

/// The configuration the next pool starts with.
static CONFIG: Mutex<Option<MoverConfig>> = Mutex::new(None);
/// The pool running now, if any.
static POOL: Mutex<Option<Arc<MoverPool>>> = Mutex::new(None);

/// Sets the mover threads of the next pool: before the first overshadow,
/// or once the movers stopped (a second after the last was dropped).
pub fn configure_movers(config: MoverConfig) -> Result<(), Error> {
    if config.movers == 0 || config.movers > 64 {
        return Err(Error::Usage(format!(
            "{} overshadow movers: 1..=64",
            config.movers
        )));
    }
    let n = tiermem_sys::thread::online_cpus();
    if let Some(c) = config.cpus.iter().find(|&&c| c >= n) {
        return Err(Error::Usage(format!("mover CPU {c}: this machine has {n} CPUs")));
    }
    let running = POOL
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map(|p| p.pid);
    if running == Some(std::process::id()) {
        return Err(Error::Usage(
            "overshadow movers already running: configure them before the first overshadow".into(),
        ));
    }
    *CONFIG.lock().unwrap_or_else(|p| p.into_inner()) = Some(config);
    Ok(())
}

/// The mover configuration in force (or that will be, once started).
pub fn mover_config() -> MoverConfig {
    if let Some(p) = POOL
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .filter(|p| p.pid == std::process::id())
    {
        return p.config.clone();
    }
    CONFIG
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_default()
}

/// An overshadow's use of the pool: the movers do not stop while it lives.
pub(super) struct PoolUse(Arc<MoverPool>);

impl std::ops::Deref for PoolUse {
    type Target = MoverPool;
    fn deref(&self) -> &MoverPool {
        &self.0
    }
}

impl Drop for PoolUse {
    fn drop(&mut self) {
        let _g = POOL.lock().unwrap_or_else(|p| p.into_inner());
        self.0.users.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A use of the pool running now, or of a new one.
pub(super) fn pool() -> Result<PoolUse, Error> {
    let mut slot = POOL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = slot.as_ref().filter(|p| p.pid == std::process::id()) {
        p.users.fetch_add(1, Ordering::AcqRel);
        return Ok(PoolUse(p.clone()));
    }
    let config = CONFIG
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_default();
    let pool = Arc::new(MoverPool {
        queue: Mutex::new(VecDeque::new()),
        work: AtomicU32::new(0),
        idle: AtomicU32::new(0),
        users: AtomicUsize::new(1),
        stop: AtomicBool::new(false),
        config: config.clone(),
        pid: std::process::id(),
    });
    for k in 0..config.movers {
        let p = pool.clone();
        // Detached: a mover stops on its own (`retire`).
        let started = crate::engine::spawn_runtime_thread(
            "tiermem-overshadow",
            k,
            &config.cpus,
            "an overshadow's pages would stay claimed",
            move || mover_loop(&p),
        );
        if let Err(err) = started {
            // The movers started so far stop.
            pool.stop.store(true, Ordering::Release);
            pool.wake(i32::MAX);
            return Err(Error::Usage(format!("starting overshadow mover {k}: {err}")));
        }
    }
    *slot = Some(pool.clone());
    Ok(PoolUse(pool))
}

fn mover_loop(p: &Arc<MoverPool>) {
    loop {
        // Acquire: a job submitted before this load is in the queue we lock
        // next; one submitted after changes `work` and the futex returns.
        let seq = p.work.load(Ordering::Acquire);
        if p.stop.load(Ordering::Acquire) {
            return;
        }
        let job = {
            let mut q = p.queue.lock().unwrap_or_else(|p| p.into_inner());
            let mut picked = None;
            while let Some(j) = q.pop_front() {
                if j.has_chunks() {
                    // Round robin between overshadows in flight: the job
                    // goes back where it was taken from, so the queue
                    // never grows here.
                    j.active.fetch_add(1, Ordering::AcqRel);
                    q.push_back(j.clone());
                    picked = Some(j);
                    break;
                }
            }
            picked
        };
        let Some(job) = job else {
            let since = Instant::now();
            // SeqCst: Dekker with `submit` (work bump, then idle load).
            p.idle.fetch_add(1, Ordering::SeqCst);
            futex_wait(&p.work, seq, Some(IDLE_EXIT));
            p.idle.fetch_sub(1, Ordering::SeqCst);
            if since.elapsed() >= IDLE_EXIT {
                retire(p);
            }
            continue;
        };
        if let Some((first, n)) = job.claim_chunk() {
            job.move_chunk(first, n);
        }
        // Release: `withdraw` (Acquire) sees the chunk's pages published.
        job.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Stops the pool if no overshadow uses it: it leaves the registry (the
/// next overshadow starts a new one) and its movers return.
fn retire(p: &Arc<MoverPool>) {
    let mut slot = POOL.lock().unwrap_or_else(|p| p.into_inner());
    if p.users.load(Ordering::Acquire) == 0 && slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, p)) {
        *slot = None;
        p.stop.store(true, Ordering::Release);
        p.wake(i32::MAX);
    }
}

impl MoverPool {
    /// Queues `job`, waiting while [`MAX_JOBS`] are in flight.
    pub(super) fn submit(&self, job: Arc<Job>) {
        let backoff = Backoff::new();
        loop {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            if q.len() < MAX_JOBS {
                q.push_back(job);
                break;
            }
            drop(q);
            if backoff.is_completed() {
                std::thread::sleep(Duration::from_micros(100));
            } else {
                backoff.snooze();
            }
        }
        self.wake(1);
    }

    /// Wakes up to `n` idle movers.
    fn wake(&self, n: i32) {
        // SeqCst: Dekker with the idle mover (idle bump, then work load).
        self.work.fetch_add(1, Ordering::SeqCst);
        if self.idle.load(Ordering::SeqCst) > 0 {
            futex_wake(&self.work, n);
        }
    }

    /// Takes `job` off the queue and waits until no mover is inside it.
    pub(super) fn withdraw(&self, job: &Arc<Job>) {
        job.cancel.store(true, Ordering::SeqCst);
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|j| !Arc::ptr_eq(j, job));
        while job.active.load(Ordering::Acquire) > 0 {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn movers_running() -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
            // Thread names are cut to 15 bytes.
            .filter(|c| c.starts_with("tiermem-oversha"))
            .count()
    }

    fn wait_for(what: &str, f: impl Fn() -> bool) {
        let end = Instant::now() + IDLE_EXIT * 5;
        while !f() {
            assert!(Instant::now() < end, "{what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn the_movers_stop_once_idle_with_no_overshadow() {
        let a = pool().unwrap();
        let b = pool().unwrap();
        assert!(Arc::ptr_eq(&a.0, &b.0), "one pool at a time");
        let movers = mover_config().movers;
        wait_for("the movers start", || movers_running() == movers);
        assert!(
            configure_movers(MoverConfig::default()).is_err(),
            "not while running"
        );
        drop(a);
        // One use left: still running after the idle time.
        std::thread::sleep(IDLE_EXIT * 2);
        assert_eq!(movers_running(), movers);
        drop(b);
        wait_for("the movers stop", || movers_running() == 0);
        assert!(POOL.lock().unwrap().is_none());
        let two = MoverConfig {
            movers: 2,
            cpus: Vec::new(),
        };
        configure_movers(two.clone()).unwrap();
        let c = pool().unwrap();
        assert_eq!(mover_config(), two);
        wait_for("two movers", || movers_running() == 2);
        drop(c);
        wait_for("the movers stop again", || movers_running() == 0);
    }
}
