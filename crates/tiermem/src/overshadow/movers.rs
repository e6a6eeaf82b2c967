//! The mover threads that copy every overshadow's pages in the background,
//! shared by all overshadows of the process.

use super::*;

/// How many mover threads, and their CPUs; fixed when the first overshadow
/// starts them.
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

pub(super) struct Engine {
    queue: Mutex<VecDeque<Arc<Job>>>,
    /// Bumped on every enqueue; idle movers wait on it.
    work: AtomicU32,
    idle: AtomicU32,
    config: MoverConfig,
}

static CONFIG: Mutex<Option<MoverConfig>> = Mutex::new(None);
static ENGINE: OnceLock<Result<&'static Engine, String>> = OnceLock::new();

/// Sets the mover threads before the first overshadow starts them.
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
    if ENGINE.get().is_some() {
        return Err(Error::Usage("overshadow movers already started".into()));
    }
    *CONFIG.lock().unwrap_or_else(|p| p.into_inner()) = Some(config);
    Ok(())
}

/// The mover configuration in force (or that will be, once started).
pub fn mover_config() -> MoverConfig {
    match ENGINE.get() {
        Some(Ok(e)) => e.config.clone(),
        _ => CONFIG
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default(),
    }
}

pub(super) fn engine() -> Result<&'static Engine, Error> {
    ENGINE
        .get_or_init(|| {
            let config = mover_config();
            // Leaked on purpose: the mover threads live as long as the
            // process and hold it.
            let e: &'static Engine = Box::leak(Box::new(Engine {
                queue: Mutex::new(VecDeque::new()),
                work: AtomicU32::new(0),
                idle: AtomicU32::new(0),
                config: config.clone(),
            }));
            for k in 0..config.movers {
                crate::engine::spawn_runtime_thread(
                    "tiermem-overshadow",
                    k,
                    &config.cpus,
                    "an overshadow's pages would stay claimed",
                    move || mover_loop(e),
                )
                .map_err(|err| format!("starting overshadow mover {k}: {err}"))?;
            }
            Ok(e)
        })
        .clone()
        .map_err(Error::Usage)
}

pub(super) fn mover_loop(e: &'static Engine) {
    loop {
        // Acquire: a job submitted before this load is in the queue we lock
        // next; one submitted after changes `work` and the futex returns.
        let seq = e.work.load(Ordering::Acquire);
        let job = {
            let mut q = e.queue.lock().unwrap_or_else(|p| p.into_inner());
            let mut picked = None;
            while let Some(j) = q.pop_front() {
                if j.has_chunks() {
                    // Round robin between overshadows in flight.
                    j.active.fetch_add(1, Ordering::AcqRel);
                    q.push_back(j.clone());
                    picked = Some(j);
                    break;
                }
            }
            picked
        };
        let Some(job) = job else {
            // SeqCst: Dekker with `submit` (work bump, then idle load).
            e.idle.fetch_add(1, Ordering::SeqCst);
            futex_wait(&e.work, seq, None);
            e.idle.fetch_sub(1, Ordering::SeqCst);
            continue;
        };
        if let Some((first, n)) = job.claim_chunk() {
            job.move_chunk(first, n);
        }
        // Release: `withdraw` (Acquire) sees the chunk's pages published.
        job.active.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Engine {
    pub(super) fn submit(&self, job: Arc<Job>) {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(job);
        // SeqCst: Dekker with the idle mover (idle bump, then work load).
        self.work.fetch_add(1, Ordering::SeqCst);
        if self.idle.load(Ordering::SeqCst) > 0 {
            futex_wake(&self.work, 1);
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
