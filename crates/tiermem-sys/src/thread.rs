//! Threads and CPUs: thread ids, the current CPU, affinity, and futexes.

use crate::errno::{check, Errno};
use crate::uapi;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

/// The kernel thread id of the calling thread.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// Whether `tid` names a thread of this process (false for a thread of
/// another process, or none): one `tgkill` with signal 0, which checks
/// and sends nothing.
pub fn in_this_process(tid: u32) -> bool {
    // SAFETY: signal 0 sends nothing; the call only looks the thread up in
    // this thread group.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid as libc::pid_t, 0) };
    r == 0 || Errno::last().raw() != libc::ESRCH
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`): what
/// its work cost, whatever else ran on its CPU meanwhile.
pub fn thread_cpu_time() -> Duration {
    cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time all threads of the process have used
/// (`CLOCK_PROCESS_CPUTIME_ID`).
pub fn process_cpu_time() -> Duration {
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// User-mode CPU time of all threads of the process (`RUSAGE_SELF`), or
/// of the calling thread (`RUSAGE_THREAD`): the time they ran their own
/// code, not the kernel's. Sampled at the scheduler's tick, so a reading
/// is good to a few ms.
pub fn user_time(whole_process: bool) -> Duration {
    // SAFETY: rusage is plain old data; all zeroes is a valid value.
    let ru: libc::rusage = unsafe { std::mem::zeroed() };
    let who = if whole_process {
        libc::RUSAGE_SELF
    } else {
        libc::RUSAGE_THREAD
    };
    // SAFETY: getrusage(who, &ru) writes only the rusage; `who` is valid.
    match unsafe { untrapped_filling(libc::SYS_getrusage, who as u64, ru) } {
        Some(ru) => Duration::new(ru.ru_utime.tv_sec as u64, ru.ru_utime.tv_usec as u32 * 1000),
        None => Duration::ZERO,
    }
}

/// `d` as the kernel takes a time (`struct timespec`).
fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

fn cpu_clock(clock: libc::clockid_t) -> Duration {
    // SAFETY: clock_gettime(clock, &ts) writes only the timespec; the
    // clock id is valid.
    match unsafe { untrapped_filling(libc::SYS_clock_gettime, clock as u64, timespec(Duration::ZERO)) } {
        Some(ts) => Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32),
        None => Duration::ZERO,
    }
}

/// Makes system call `nr(arg, &out)`, which fills `out`: `None` where it
/// fails. Untrapped: a clock or usage read is a real system call, and `out`
/// may lie on a tiered stack (the kernel-access trap's `clock_gettime`
/// rule).
///
/// # Safety
/// `nr` must be a system call that takes `arg` and a `T` to write, and
/// writes nothing else.
unsafe fn untrapped_filling<T>(nr: i64, arg: u64, mut out: T) -> Option<T> {
    // SAFETY: the caller's system call; `out` is ours for the call.
    let r = unsafe { crate::trampoline::untrapped_syscall(nr, [arg, &mut out as *mut T as u64, 0, 0, 0, 0]) };
    (r == 0).then_some(out)
}

/// The process id.
pub fn getpid() -> u32 {
    std::process::id()
}

/// The CPU the calling thread runs on now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as usize)
}

/// Online CPUs of the machine.
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        1
    }
}

/// The CPUs the process was started on, as a bit set (bit `c` of word
/// `c / 64`), once noted ([`note_launch_cpus`]).
static LAUNCH_CPUS: [std::sync::atomic::AtomicU64; 16] = [const { std::sync::atomic::AtomicU64::new(0) }; 16];
static LAUNCH_NOTED: std::sync::Once = std::sync::Once::new();

/// Notes the CPUs the process was started on: `given` (`tiermem run`
/// passes its own), else the calling thread's. The first call counts
/// (later and concurrent ones see its set). Call it before the program
/// runs (the preload does, in its initialiser): an OpenMP runtime binds
/// each thread, the main one included, to a single CPU (`OMP_PROC_BIND`),
/// and a thread spawned from it inherits that one CPU. CPUs from 1024 up
/// are left out; none known leaves the set empty.
pub fn note_launch_cpus(given: Option<Vec<usize>>) {
    use std::sync::atomic::Ordering;
    let fits =
        |v: Vec<usize>| -> Vec<usize> { v.into_iter().filter(|&c| c < 64 * LAUNCH_CPUS.len()).collect() };
    LAUNCH_NOTED.call_once(|| {
        let cpus = match given.map(fits).filter(|g| !g.is_empty()) {
            Some(g) => g,
            None => affinity().map(fits).unwrap_or_default(),
        };
        for c in cpus {
            LAUNCH_CPUS[c / 64].fetch_or(1 << (c % 64), Ordering::Relaxed);
        }
    });
}

/// CPUs' worth of time the process may use: its launch CPUs
/// ([`launch_cpus`]), or fewer where its cgroup caps its CPU time (a
/// container's `--cpus`, a systemd `CPUQuota`, a Slurm job with
/// `ConstrainCores` off but a quota); at least 1.
pub fn usable_cpus() -> f64 {
    let n = launch_cpus().len().max(1) as f64;
    cgroup_cpu_quota().map_or(n, |q| q.min(n)).max(1.0)
}

/// The tightest CPU quota on the way from the process's cgroup to the
/// root, in CPUs (`cpu.max` in cgroup v2; `cpu.cfs_quota_us` over
/// `cpu.cfs_period_us` in v1); None without one, or where the files
/// cannot be read.
pub fn cgroup_cpu_quota() -> Option<f64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut best: Option<f64> = None;
    let mut take = |q: Option<f64>| {
        if let Some(q) = q {
            best = Some(best.map_or(q, |b| b.min(q)));
        }
    };
    for line in own.lines() {
        let mut f = line.splitn(3, ':');
        let (_, controllers, path) = (f.next(), f.next().unwrap_or(""), f.next().unwrap_or(""));
        let v2 = controllers.is_empty();
        if !v2 && !controllers.split(',').any(|c| c == "cpu") {
            continue;
        }
        let roots: &[&str] = if v2 {
            &["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        } else {
            &["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"]
        };
        for root in roots {
            // From the process's own cgroup up to the root of the mount.
            let mut dir = std::path::PathBuf::from(format!("{root}{}", path.trim_end_matches('/')));
            loop {
                take(if v2 {
                    std::fs::read_to_string(dir.join("cpu.max"))
                        .ok()
                        .and_then(|t| parse_cpu_max(&t))
                } else {
                    let read = |n: &str| {
                        std::fs::read_to_string(dir.join(n))
                            .ok()?
                            .trim()
                            .parse::<i64>()
                            .ok()
                    };
                    quota_share(read("cpu.cfs_quota_us"), read("cpu.cfs_period_us"))
                });
                if dir.as_os_str().len() <= root.len() || !dir.pop() {
                    break;
                }
            }
        }
    }
    best
}

/// `cpu.max` of cgroup v2 ("max 100000", "150000 100000") in CPUs.
pub fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut f = text.split_whitespace();
    let quota = f.next()?.parse::<i64>().ok();
    let period = f.next().map_or(Some(100_000), |p| p.parse::<i64>().ok());
    quota_share(quota, period)
}

fn quota_share(quota: Option<i64>, period: Option<i64>) -> Option<f64> {
    match (quota, period) {
        (Some(q), Some(p)) if q > 0 && p > 0 => Some(q as f64 / p as f64),
        _ => None,
    }
}

/// The CPUs the process was started on ([`note_launch_cpus`], noted now
/// if it was not); empty if none could be read.
pub fn launch_cpus() -> Vec<usize> {
    use std::sync::atomic::Ordering;
    note_launch_cpus(None);
    (0..64 * LAUNCH_CPUS.len())
        .filter(|&c| LAUNCH_CPUS[c / 64].load(Ordering::Relaxed) & (1 << (c % 64)) != 0)
        .collect()
}

/// Pins the calling thread to the given CPUs.
pub fn set_affinity(cpus: &[usize]) -> Result<(), Errno> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c >= libc::CPU_SETSIZE as usize {
            return Err(Errno(libc::EINVAL));
        }
        // SAFETY: c < CPU_SETSIZE was checked; set is a valid cpu_set_t.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: set is initialised and sized as passed.
    check(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) }).map(|_| ())
}

/// The CPUs the calling thread may run on.
pub fn affinity() -> Result<Vec<usize>, Errno> {
    // SAFETY: as above.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is ours and sized as passed.
    check(unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) })?;
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: c < CPU_SETSIZE by the range; set is initialised.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Spawns a thread that blocks every asynchronous signal from its first
/// instruction (it inherits the mask the caller holds while creating it):
/// the application's timer, `pthread_kill` and process-directed signals
/// never run their handlers on a runtime thread, which may be serving a
/// fault or owning pages that such a handler could touch.
pub fn spawn_with_async_signals_blocked<F, T>(
    builder: std::thread::Builder,
    f: F,
) -> std::io::Result<std::thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let _blocked = crate::signal::AsyncSignalsBlocked::new();
    builder.spawn(f)
}

/// Sleeps for `d` with a raw `nanosleep`: unlike the C library's (and
/// `std::thread::sleep`), not a cancellation point, so a thread with a
/// pending `pthread_cancel` is never cancelled inside a fault service.
pub fn sleep(d: Duration) {
    let mut ts = timespec(d);
    loop {
        let mut rem = timespec(Duration::ZERO);
        // SAFETY: both timespecs are valid for the call. Untrapped: they
        // may lie on a tiered stack, and this runs in fault handlers.
        let r = unsafe {
            crate::trampoline::untrapped_syscall(
                libc::SYS_nanosleep,
                [&ts as *const _ as u64, &mut rem as *mut _ as u64, 0, 0, 0, 0],
            )
        };
        if r == 0 || crate::errno::Errno::last().raw() != libc::EINTR {
            return;
        }
        ts = rem;
    }
}

/// The calling thread's signal mask.
pub fn signal_mask() -> libc::sigset_t {
    // SAFETY: plain data; rt_sigprocmask fills it.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: a null set only reads the mask into a valid struct.
    unsafe { crate::signal::raw_sigprocmask(libc::SIG_BLOCK, std::ptr::null(), &mut old) };
    old
}

/// Sleeps while `*word == expected` (futex wait), up to `timeout`.
/// Returns on wake-up, timeout, signal, or when the value already differs.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(timespec);
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: word is a live, aligned u32 for the duration of the call; the
    // kernel only reads it. Untrapped: the timeout may lie on a tiered
    // stack (the kernel-access trap's `futex` rule), and this runs in
    // fault handlers.
    unsafe {
        crate::trampoline::untrapped_syscall(
            libc::SYS_futex,
            [
                word.as_ptr() as u64,
                uapi::FUTEX_WAIT_PRIVATE as u64,
                u64::from(expected),
                tsp as u64,
                0,
                0,
            ],
        );
    }
}

/// Wakes up to `n` threads waiting on `word`.
pub fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: word is a live, aligned u32; FUTEX_WAKE does not dereference
    // anything else.
    unsafe {
        crate::trampoline::untrapped_syscall(
            libc::SYS_futex,
            [
                word.as_ptr() as u64,
                uapi::FUTEX_WAKE_PRIVATE as u64,
                n as u64,
                0,
                0,
                0,
            ],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    #[test]
    fn idle_ticks_sum_the_cpus_asked_for() {
        let stat = "cpu  10 0 5 700 7 0 0 0 0 0\n\
                    cpu0 5 0 2 300 3 0 0 0 0 0\n\
                    cpu1 5 0 3 400 4 0 0 0 0 0\n\
                    intr 1 2 3\n";
        assert_eq!(idle_ticks(stat, |c| c == 1), Some(404));
        assert_eq!(idle_ticks(stat, |_| true), Some(707), "not the all-CPU line");
        assert_eq!(idle_ticks(stat, |c| c == 2), None);
        // This machine's: the idle time of its CPUs never goes back.
        let all: Vec<usize> = (0..online_cpus()).collect();
        let t = IdleTime::new(&all).expect("/proc/stat");
        let a = t.read().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert!(t.read().unwrap() >= a);
    }

    #[test]
    fn cgroup_cpu_limits_read_as_cpus() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("150000 100000\n"), Some(1.5));
        assert_eq!(parse_cpu_max("50000"), Some(0.5));
        assert_eq!(parse_cpu_max(""), None);
        assert_eq!(quota_share(Some(-1), Some(100_000)), None);
        assert_eq!(quota_share(Some(200_000), Some(100_000)), Some(2.0));
        let usable = usable_cpus();
        assert!(
            usable >= 1.0 && usable <= launch_cpus().len().max(1) as f64,
            "{usable}"
        );
    }

    #[test]
    fn cpu_clocks_and_run_delay_advance() {
        let (p0, t0) = (process_cpu_time(), thread_cpu_time());
        // Until this thread has run 10 ms (a wall-clock spin got less on
        // a loaded machine), or 10 s have passed.
        let start = std::time::Instant::now();
        while thread_cpu_time() - t0 < std::time::Duration::from_millis(10)
            && start.elapsed() < std::time::Duration::from_secs(10)
        {
            std::hint::spin_loop();
        }
        let (p1, t1) = (process_cpu_time(), thread_cpu_time());
        assert!(t1 - t0 >= std::time::Duration::from_millis(10), "{t0:?} {t1:?}");
        assert!(
            p1 - p0 >= t1 - t0 && p1 >= t1,
            "process {p0:?} -> {p1:?}, thread {t0:?} -> {t1:?}"
        );
        // The scheduler's statistics are there on the kernels tiermem runs on.
        let d = RunDelay::open().expect("/proc/thread-self/schedstat");
        let before = d.read().unwrap();
        // One spinning thread more than there are CPUs: this one waits.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinners: Vec<_> = (0..online_cpus() + 1)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let start = std::time::Instant::now();
        while d.read().unwrap() == before && start.elapsed() < std::time::Duration::from_secs(10) {
            std::hint::spin_loop();
        }
        stop.store(true, Ordering::Relaxed);
        spinners.into_iter().for_each(|t| t.join().unwrap());
        assert!(d.read().unwrap() > before, "no run delay with every CPU busy");
    }

    #[test]
    fn launch_cpus_are_noted_once() {
        let now = affinity().unwrap();
        // Whatever noted them first (this call or an earlier test), they
        // stay the same afterwards, and they are CPUs this process has.
        let first = launch_cpus();
        note_launch_cpus(Some(vec![12345]));
        assert_eq!(launch_cpus(), first);
        // This test binary's threads all start with the process's mask.
        assert!(
            !first.is_empty() && first.iter().all(|c| *c < online_cpus()),
            "{first:?}"
        );
        assert!(
            now.iter().all(|c| first.contains(c)),
            "now {now:?}, noted {first:?}"
        );
    }

    #[test]
    fn the_memory_belongs_to_the_claimer_and_to_a_forked_child() {
        claim_memory();
        assert!(owns_memory());
        assert_eq!(owner_pid(), getpid());
        // SAFETY: the child only makes system calls and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = owns_memory() && owner_pid() == getpid();
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        assert!(pid > 0);
        let mut status = 0;
        // SAFETY: waits for the child just made.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status:#x}"
        );
        assert_eq!(owner_pid(), getpid());
    }

    #[test]
    fn ids_and_cpus() {
        assert_ne!(gettid(), 0);
        assert!(online_cpus() >= 1);
        assert!(current_cpu().unwrap() < online_cpus());
        let mine = affinity().unwrap();
        assert!(!mine.is_empty());
    }

    #[test]
    fn pinning_moves_the_thread() {
        std::thread::spawn(|| {
            let last = online_cpus() - 1;
            set_affinity(&[last]).unwrap();
            assert_eq!(affinity().unwrap(), vec![last]);
            assert_eq!(current_cpu(), Some(last));
            assert!(set_affinity(&[100_000]).is_err());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn spawned_runtime_threads_block_async_signals() {
        let h = spawn_with_async_signals_blocked(std::thread::Builder::new(), signal_mask).unwrap();
        let mask = h.join().unwrap();
        let member = |s| {
            // SAFETY: `mask` is a valid sigset_t.
            unsafe { libc::sigismember(&mask, s) == 1 }
        };
        for s in [
            libc::SIGALRM,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGUSR1,
            libc::SIGPROF,
            libc::SIGRTMIN(),
        ] {
            assert!(member(s), "signal {s} open in a runtime thread");
        }
        for s in crate::signal::SYNCHRONOUS {
            assert!(!member(s), "synchronous signal {s} blocked in a runtime thread");
        }
        // The creating thread got its mask back.
        let mine = signal_mask();
        // SAFETY: valid sigset_t.
        assert_eq!(unsafe { libc::sigismember(&mine, libc::SIGALRM) }, 0);
    }

    #[test]
    fn futex_wait_and_wake() {
        let w = Arc::new(AtomicU32::new(0));
        let w2 = w.clone();
        let t = std::thread::spawn(move || {
            while w2.load(Ordering::Acquire) == 0 {
                futex_wait(&w2, 0, Some(Duration::from_secs(5)));
            }
        });
        std::thread::sleep(Duration::from_millis(10));
        w.store(1, Ordering::Release);
        futex_wake(&w, 1);
        t.join().unwrap();
        // A value mismatch returns at once.
        futex_wait(&w, 0, None);
    }
}

static FORK_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static ATFORK: std::sync::Once = std::sync::Once::new();

/// The process whose memory this is (0: not recorded yet).
static OWNER_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    OWNER_PID.store(getpid(), std::sync::atomic::Ordering::Relaxed);
}

/// Records the calling process as the owner of its memory (for
/// [`owns_memory`]); a `fork()`ed child becomes the owner of its copy.
pub fn claim_memory() {
    ATFORK.call_once(|| at_fork(None, None, Some(after_fork_in_child)));
    OWNER_PID.store(getpid(), std::sync::atomic::Ordering::Relaxed);
}

/// The process recorded by [`claim_memory`] (0: none).
pub fn owner_pid() -> u32 {
    OWNER_PID.load(std::sync::atomic::Ordering::Relaxed)
}

/// False in a `vfork` child (or any `CLONE_VM` child without
/// `CLONE_FILES`) of the process that called [`claim_memory`]: it shares
/// the memory but has a descriptor table of its own, so a descriptor it
/// makes and stores in shared state is gone, or another file, for the
/// owner. True where nothing was recorded.
pub fn owns_memory() -> bool {
    let owner = OWNER_PID.load(std::sync::atomic::Ordering::Relaxed);
    owner == 0 || owner == getpid()
}

/// `vfork`s in flight in this process (see [`vfork_started`]).
static VFORKS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// What [`on_vfork`] registered: fn() and fn(i32), or 0.
static VFORK_HOOKS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// Registers what runs in the parent around a `vfork` (the core's lender
/// for `vfork` children): `started` before the system call, `returned`
/// with its result once the child has `exec`ed or ended. The last
/// registration stays.
pub fn on_vfork(started: fn(), returned: fn(i32)) {
    VFORK_HOOKS[0].store(started as usize, std::sync::atomic::Ordering::Release);
    VFORK_HOOKS[1].store(returned as usize, std::sync::atomic::Ordering::Release);
}

/// Says that the calling thread is about to `vfork`: until
/// [`vfork_returned`], [`in_vfork_child`] asks the kernel who is running.
/// The interposed `vfork` (tiermem-interpose) calls both around the system
/// call.
pub fn vfork_started() {
    VFORKS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let f = VFORK_HOOKS[0].load(std::sync::atomic::Ordering::Acquire);
    if f != 0 {
        // SAFETY: only `on_vfork` stores here, always a fn().
        let f: fn() = unsafe { std::mem::transmute::<usize, fn()>(f) };
        f();
    }
}

/// The `vfork` of [`vfork_started`] returned `result` in the parent (the
/// child has `exec`ed or ended, or there was none: `result` < 0).
pub fn vfork_returned(result: i32) {
    let f = VFORK_HOOKS[1].load(std::sync::atomic::Ordering::Acquire);
    if f != 0 {
        // SAFETY: only `on_vfork` stores here, always a fn(i32).
        let f: fn(i32) = unsafe { std::mem::transmute::<usize, fn(i32)>(f) };
        f(result);
    }
    VFORKS.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
}

/// Whether the caller is a `vfork` child of the owner of this memory
/// (started between [`vfork_started`] and [`vfork_returned`]). One load
/// while no `vfork` is in flight; a `getpid` while one is.
pub fn in_vfork_child() -> bool {
    VFORKS.load(std::sync::atomic::Ordering::SeqCst) != 0 && !owns_memory()
}

/// A number that changes in a `fork()`ed child (and only there), so that
/// state copied from the parent can be recognised without a `getpid()`
/// system call. Installs the `pthread_atfork` hook on first use.
pub fn fork_generation() -> u64 {
    ATFORK.call_once(|| at_fork(None, None, Some(after_fork_in_child)));
    FORK_GENERATION.load(std::sync::atomic::Ordering::Relaxed)
}

/// The handlers [`at_fork`] registered, also for the forks that run no
/// `pthread_atfork` handlers, which the signal guard runs them around
/// (`crate::seccomp`'s guard). Written under `HOOKS_LOCK`, read lock-free.
const MAX_HOOKS: usize = 16;
#[allow(clippy::declare_interior_mutable_const)]
const NO_HOOK: [AtomicUsize; 3] = [AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)];
static HOOKS: [[AtomicUsize; 3]; MAX_HOOKS] = [NO_HOOK; MAX_HOOKS];
static HOOK_COUNT: AtomicUsize = AtomicUsize::new(0);
static HOOKS_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Registers `pthread_atfork` handlers (process-wide, for good): `prepare`
/// runs in the forking thread before the copy, `parent` and `child` after
/// it in each process. They run in a child of a multi-threaded process, so
/// they must be async-signal-safe.
pub fn at_fork(
    prepare: Option<extern "C" fn()>,
    parent: Option<extern "C" fn()>,
    child: Option<extern "C" fn()>,
) {
    let as_unsafe = |f: Option<extern "C" fn()>| f.map(|f| f as unsafe extern "C" fn());
    // SAFETY: registers plain functions without captured state.
    let r = unsafe { libc::pthread_atfork(as_unsafe(prepare), as_unsafe(parent), as_unsafe(child)) };
    // Only ENOMEM is possible: without the hooks a forked child would
    // inherit stale locks; refuse to go on.
    assert_eq!(r, 0, "pthread_atfork failed");
    let _g = HOOKS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let n = HOOK_COUNT.load(Ordering::Relaxed);
    assert!(n < MAX_HOOKS, "more than {MAX_HOOKS} fork hooks");
    for (slot, f) in HOOKS[n].iter().zip([prepare, parent, child]) {
        slot.store(f.map_or(0, |f| f as usize), Ordering::Relaxed);
    }
    // Release: the slots before the count that shows them.
    HOOK_COUNT.store(n + 1, Ordering::Release);
}

/// Which handlers [`run_fork_hooks`] runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ForkStage {
    Prepare = 0,
    Parent = 1,
    Child = 2,
}

/// Runs the handlers of `stage` that [`at_fork`] registered, as the C
/// library's `fork` does: prepare handlers last registered first, the
/// others in the order registered.
pub(crate) fn run_fork_hooks(stage: ForkStage) {
    let n = HOOK_COUNT.load(Ordering::Acquire);
    let run = |k: usize| {
        let f = HOOKS[k][stage as usize].load(Ordering::Relaxed);
        if f != 0 {
            // SAFETY: only at_fork stores here, always an extern "C" fn().
            let f: extern "C" fn() = unsafe { std::mem::transmute::<usize, extern "C" fn()>(f) };
            f();
        }
    };
    if stage == ForkStage::Prepare {
        (0..n).rev().for_each(run);
    } else {
        (0..n).for_each(run);
    }
}

#[cfg(test)]
mod fork_tests {
    use super::*;

    #[test]
    fn generation_changes_in_the_child_only() {
        let g = fork_generation();
        // SAFETY: test code; the child only reads an atomic and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let code = if fork_generation() == g + 1 { 0 } else { 1 };
            // SAFETY: _exit is async-signal-safe and skips destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(fork_generation(), g);
    }
}

/// Idle time of a set of CPUs (`idle` and `iowait` of their lines in
/// `/proc/stat`): whether a CPU is free for another thread, whoever keeps
/// the others busy (this process, or another on the same node).
pub struct IdleTime {
    /// The CPUs, sorted.
    cpus: Vec<usize>,
    /// Clock ticks per second (`_SC_CLK_TCK`).
    hz: u64,
}

impl IdleTime {
    /// For `cpus`; None where `/proc/stat` cannot be read or names none of
    /// them.
    pub fn new(cpus: &[usize]) -> Option<IdleTime> {
        let mut cpus = cpus.to_vec();
        cpus.sort_unstable();
        // SAFETY: sysconf reads a constant of the C library.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let t = IdleTime {
            cpus,
            hz: if hz > 0 { hz as u64 } else { 100 },
        };
        t.read().map(|_| t)
    }

    /// Idle time of the set so far, summed over its CPUs (tick-grained).
    pub fn read(&self) -> Option<Duration> {
        let text = std::fs::read_to_string("/proc/stat").ok()?;
        let ticks = idle_ticks(&text, |c| self.cpus.binary_search(&c).is_ok())?;
        Some(Duration::from_nanos(
            ticks.saturating_mul(1_000_000_000) / self.hz,
        ))
    }
}

/// The `idle` plus `iowait` ticks of the CPUs of `/proc/stat` (`text`)
/// that `wanted` takes; None if it takes none of them.
pub fn idle_ticks(text: &str, wanted: impl Fn(usize) -> bool) -> Option<u64> {
    let mut total = None;
    for line in text.lines() {
        // "cpuN ...", not the "cpu  ..." line of all CPUs.
        let Some(rest) = line
            .strip_prefix("cpu")
            .filter(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        else {
            continue;
        };
        let mut f = rest.split_ascii_whitespace();
        let Some(cpu) = f.next().and_then(|n| n.parse::<usize>().ok()) else {
            continue;
        };
        if !wanted(cpu) {
            continue;
        }
        // user nice system idle iowait ...
        let mut f = f.skip(3);
        let idle: u64 = f.next()?.parse().ok()?;
        let iowait: u64 = f.next().and_then(|x| x.parse().ok()).unwrap_or(0);
        *total.get_or_insert(0) += idle + iowait;
    }
    total
}

/// The time the calling thread has spent runnable but waiting for a CPU
/// (`run_delay`, the second field of `/proc/thread-self/schedstat`): a
/// thread that wants to run and cannot is competing with others for the
/// CPUs. The file is opened once, by the thread it describes.
pub struct RunDelay {
    file: std::fs::File,
}

impl RunDelay {
    /// Opens the calling thread's schedstat; None where /proc or the
    /// kernel's scheduler statistics are missing.
    pub fn open() -> Option<RunDelay> {
        let file = std::fs::File::open("/proc/thread-self/schedstat").ok()?;
        let r = RunDelay { file };
        r.read().map(|_| r)
    }

    /// The run delay so far.
    pub fn read(&self) -> Option<Duration> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 96];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        let ns = text.split_ascii_whitespace().nth(1)?.parse().ok()?;
        Some(Duration::from_nanos(ns))
    }
}
