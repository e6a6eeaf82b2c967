//! Worker processes: `fork`, `waitpid`, `kill`, `_exit`, the parent-death
//! signal, and a liveness probe.
//!
//! tiermem's team mode runs workers as processes so that each has its own
//! page table (paper 1's partially separated page tables). Forking a
//! multi-threaded process is legal but only the calling thread survives in
//! the child: the child must not wait for locks another thread of the
//! parent held at the time of the fork (glibc's malloc is safe; stdio
//! locks may not be). Team workers therefore only run the caller's closure
//! and leave through [`exit_now`], never through Rust's exit path.

use crate::errno::{check, Errno};

/// Which side of a [`fork`] this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forked {
    /// The new process.
    Child,
    /// The original process; the child's pid.
    Parent(u32),
}

/// `fork()`. In the child, `parent_death_kill` makes the kernel SIGKILL it
/// when the parent dies, so that workers never outlive a crashed leader.
pub fn fork(parent_death_kill: bool) -> Result<Forked, Errno> {
    // Read before the fork: the child compares it with getppid() to catch a
    // parent that died before prctl took effect.
    let parent = crate::thread::getpid();
    // Fork-generation hook installed before the fork so the child sees it.
    let _ = crate::thread::fork_generation();
    // SAFETY: fork has no memory-safety preconditions; the module docs say
    // what the child may do.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(Errno::last()),
        0 => {
            if parent_death_kill {
                // SAFETY: plain prctl with integer arguments.
                unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
                // SAFETY: getppid cannot fail.
                if unsafe { libc::getppid() } as u32 != parent {
                    exit_now(127);
                }
            }
            Ok(Forked::Child)
        }
        p => Ok(Forked::Parent(p as u32)),
    }
}

/// Asks the kernel to SIGKILL this process when the thread that started
/// it dies, and exits now (status 127) if `parent` is already gone (this
/// process was reparented before the request took effect). For a child
/// started with `std::process::Command`, whose parent passed its pid.
pub fn die_with_parent(parent: u32) {
    // SAFETY: plain prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    // SAFETY: getppid cannot fail.
    if unsafe { libc::getppid() } as u32 != parent {
        exit_now(127);
    }
}

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// `exit(code)`.
    Exited(i32),
    /// Killed by a signal.
    Signaled(i32),
}

impl ExitStatus {
    /// Exit code 0.
    pub fn success(self) -> bool {
        self == ExitStatus::Exited(0)
    }
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ExitStatus::Exited(c) => write!(f, "exit code {c}"),
            ExitStatus::Signaled(s) => write!(f, "killed by signal {s} ({})", signal_name(s)),
        }
    }
}

/// A short name for a signal number.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGABRT => "SIGABRT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        _ => "signal",
    }
}

fn decode(status: libc::c_int) -> ExitStatus {
    if libc::WIFSIGNALED(status) {
        ExitStatus::Signaled(libc::WTERMSIG(status))
    } else {
        ExitStatus::Exited(libc::WEXITSTATUS(status))
    }
}

/// Reaps child `pid` if it ended, without blocking; `Ok(None)` if it runs.
pub fn try_wait(pid: u32) -> Result<Option<ExitStatus>, Errno> {
    let mut status = 0;
    // SAFETY: status is a valid out-pointer.
    let r = check(unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) })?;
    Ok((r != 0).then(|| decode(status)))
}

/// What a reaped child used, from `wait4`'s `rusage`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChildUsage {
    /// Peak resident set size, in bytes.
    pub max_rss_bytes: u64,
    /// User CPU time, in microseconds.
    pub user_us: u64,
    /// System CPU time, in microseconds.
    pub system_us: u64,
    /// Page faults that needed I/O.
    pub major_faults: u64,
    /// Page faults served without I/O.
    pub minor_faults: u64,
}

/// Like [`try_wait`], and also what the child used: `Ok(None)` while it
/// runs.
pub fn try_wait_usage(pid: u32) -> Result<Option<(ExitStatus, ChildUsage)>, Errno> {
    let mut status = 0;
    // SAFETY: all-zero is a valid rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: status and ru are valid out-pointers.
    let r = check(unsafe { libc::wait4(pid as libc::pid_t, &mut status, libc::WNOHANG, &mut ru) })?;
    if r == 0 {
        return Ok(None);
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    let usage = ChildUsage {
        max_rss_bytes: ru.ru_maxrss as u64 * 1024,
        user_us: us(ru.ru_utime),
        system_us: us(ru.ru_stime),
        major_faults: ru.ru_majflt as u64,
        minor_faults: ru.ru_minflt as u64,
    };
    Ok(Some((decode(status), usage)))
}

/// Waits until child `pid` ends.
pub fn wait(pid: u32) -> Result<ExitStatus, Errno> {
    loop {
        let mut status = 0;
        // SAFETY: status is a valid out-pointer.
        match check(unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) }) {
            Ok(_) => return Ok(decode(status)),
            Err(Errno(libc::EINTR)) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Sends `sig` to `pid`.
pub fn kill(pid: u32, sig: i32) -> Result<(), Errno> {
    // SAFETY: plain syscall.
    check(unsafe { libc::kill(pid as libc::pid_t, sig) }).map(|_| ())
}

/// Sends `sig` to every process of process group `pgid` (a child started
/// with `process_group(0)` leads the group named by its pid).
pub fn kill_group(pgid: u32, sig: i32) -> Result<(), Errno> {
    // SAFETY: plain syscall; a negative pid names the group.
    check(unsafe { libc::kill(-(pgid as libc::pid_t), sig) }).map(|_| ())
}

/// Runs `f` at normal process exit (`atexit(3)`); false if the C library
/// had no room for it.
pub fn at_exit(f: extern "C" fn()) -> bool {
    // SAFETY: registers a plain function without captured state.
    unsafe { libc::atexit(f) == 0 }
}

/// The real user id of this process.
pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Whether process `pid` exists: `kill(pid, 0)`. Async-signal-safe, but a
/// zombie (ended, not yet reaped) still counts as alive; see [`running`].
pub fn exists(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// Whether process `pid` runs (exists and is not a zombie). Reads /proc:
/// not for signal handlers.
pub fn running(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    // Linux: /proc/<pid>/stat says 'Z' for a zombie, which is dead for us.
    let mut buf = [0u8; 128];
    let path = format!("/proc/{pid}/stat");
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    use std::io::Read;
    let n = (&f).read(&mut buf).unwrap_or(0);
    let s = &buf[..n];
    match s.iter().rposition(|&c| c == b')') {
        Some(i) if i + 2 < n => s[i + 2] != b'Z' && s[i + 2] != b'X',
        _ => true,
    }
}

/// Waits until one of `pids` has ended (it stays a zombie until
/// [`wait`]ed for) or `timeout` passes; returns the ended ones.
/// Uses pidfds, so other children of the process are left alone.
pub fn wait_any(pids: &[u32], timeout: std::time::Duration) -> Result<Vec<u32>, Errno> {
    let mut fds = Vec::with_capacity(pids.len());
    for &pid in pids {
        // SAFETY: pidfd_open takes a pid and flags.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) } as libc::c_int;
        let fd = check(fd)?;
        // SAFETY: a new descriptor we own.
        fds.push(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
    }
    use std::os::fd::AsRawFd;
    let mut polls: Vec<libc::pollfd> = fds
        .iter()
        .map(|f| libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: polls is a valid array of pollfd for the call.
    match check(unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, ms) }) {
        Ok(_) | Err(Errno(libc::EINTR)) => {}
        Err(e) => return Err(e),
    }
    Ok(pids
        .iter()
        .zip(&polls)
        .filter(|(_, p)| p.revents != 0)
        .map(|(&pid, _)| pid)
        .collect())
}

/// Ends the process at once with `code` (`_exit`): no destructors, no
/// atexit handlers, no stdio flush. Async-signal-safe.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and has no preconditions.
    unsafe { libc::_exit(code) }
}

/// One line of text built without allocating (for a signal handler, with
/// [`write_stderr`]); what does not fit is cut.
pub struct LineBuf {
    buf: [u8; 640],
    len: usize,
}

impl LineBuf {
    /// An empty line.
    pub fn new() -> LineBuf {
        LineBuf {
            buf: [0; 640],
            len: 0,
        }
    }

    /// The text, ending in a newline.
    pub fn line(&mut self) -> &[u8] {
        let end = self.len.min(self.buf.len() - 1);
        self.buf[end] = b'\n';
        &self.buf[..=end]
    }
}

impl Default for LineBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Write for LineBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        // Keep a byte for the newline.
        let room = self.buf.len() - 1 - self.len;
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Writes `bytes` to standard error with `write(2)` (retrying partial
/// writes and EINTR), bypassing Rust's and the C library's buffers and
/// locks: async-signal-safe, and a raw system call, not the C library's
/// `write` (a cancellation point: fault handlers print through this).
/// Errors are ignored (nowhere to report them).
pub fn write_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: a valid buffer of that length; fd 2 may be closed (EBADF).
        let n = unsafe { libc::syscall(libc::SYS_write, 2, bytes.as_ptr(), bytes.len()) } as isize;
        if n > 0 {
            bytes = &bytes[n as usize..];
        } else if n < 0 && crate::Errno::last().raw() == libc::EINTR {
            continue;
        } else {
            return;
        }
    }
}

/// A one-shot timer that kills this process (SIGKILL) unless disarmed:
/// the bound on work a dying process does in a signal handler, which
/// could wait for a lock the interrupted code holds. Raw system calls,
/// async-signal-safe.
pub struct KillTimer(libc::c_int);

impl KillTimer {
    /// Arms the timer for `after`.
    pub fn arm(after: std::time::Duration) -> Result<KillTimer, crate::Errno> {
        // SAFETY: sigevent is plain data; zeroed then filled.
        let mut ev: libc::sigevent = unsafe { std::mem::zeroed() };
        ev.sigev_notify = libc::SIGEV_SIGNAL;
        ev.sigev_signo = libc::SIGKILL;
        let mut id: libc::c_int = 0;
        // SAFETY: valid sigevent and out-parameter (the kernel's timer id
        // is an int).
        let r = unsafe { libc::syscall(libc::SYS_timer_create, libc::CLOCK_MONOTONIC, &mut ev, &mut id) };
        crate::errno::check(r as i32)?;
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                tv_nsec: after.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: a timer id the kernel returned and a valid itimerspec.
        let r = unsafe {
            libc::syscall(
                libc::SYS_timer_settime,
                id,
                0,
                &spec,
                std::ptr::null_mut::<libc::itimerspec>(),
            )
        };
        let t = KillTimer(id);
        crate::errno::check(r as i32)?;
        Ok(t)
    }
}

impl Drop for KillTimer {
    /// Disarms and deletes the timer.
    fn drop(&mut self) {
        // SAFETY: deleting the timer created in `arm`.
        unsafe { libc::syscall(libc::SYS_timer_delete, self.0) };
    }
}

/// Blocks `signals` in the calling thread (and the threads it creates
/// later) and starts a thread that passes each one that arrives on to
/// `pid` (a launcher forwarding what a batch system sends it). Children
/// started afterwards get an empty mask (Rust's `Command` resets it).
pub fn forward_signals(pid: u32, signals: &[i32]) -> std::io::Result<()> {
    // SAFETY: plain data, initialised by sigemptyset/sigaddset.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    };
    // SAFETY: a valid set; blocks them so that only sigwait sees them.
    unsafe { crate::signal::raw_sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    std::thread::Builder::new()
        .name("tiermem-forward".into())
        .spawn(move || loop {
            let mut sig = 0;
            // SAFETY: a valid set and out-parameter.
            if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
                let _ = kill(pid, sig);
            }
        })
        .map(|_| ())
}

/// Gives SIGPIPE its default action back (Rust's runtime ignores it, so
/// that a write to a closed pipe fails with EPIPE, and `print!` panics on
/// that): a command whose reader went away (`tiermem info | head -1`) ends
/// quietly, as other Unix tools do.
pub fn default_sigpipe() {
    // SAFETY: SIG_DFL for SIGPIPE; no handler runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Ignores `signals` in this process (a launcher whose child receives
/// them from the terminal directly, as `system()` does).
pub fn ignore_signals(signals: &[i32]) {
    for &s in signals {
        // SAFETY: SIG_IGN for a catchable signal.
        unsafe { libc::signal(s, libc::SIG_IGN) };
    }
}

/// Ends this process the way a child ended: with its exit code, or killed
/// by the same signal (default action, core dump included).
pub fn exit_like(status: std::process::ExitStatus) -> ! {
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        // SAFETY: restoring the default action, unblocking and raising the
        // signal ends the process with it (for every signal that kills).
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            let mut one: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut one);
            libc::sigaddset(&mut one, sig);
            crate::signal::raw_sigprocmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
            libc::raise(sig);
        }
        std::process::exit(128 + sig);
    }
    std::process::exit(status.code().unwrap_or(1))
}

/// A copy of the standard error descriptor (close-on-exec, numbered 100 or
/// above), for a message the process prints after the program closed its
/// own standard error (GNU programs close it in an `atexit` handler).
pub fn keep_stderr() -> Option<std::os::fd::OwnedFd> {
    // SAFETY: fcntl on descriptor 2; a new descriptor we own on success.
    let fd = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 100) };
    // SAFETY: fd was just returned by the kernel and is owned by nobody.
    (fd >= 0).then(|| unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// Whether descriptor 2 is open.
pub fn stderr_open() -> bool {
    // SAFETY: F_GETFD reads flags only.
    unsafe { libc::fcntl(2, libc::F_GETFD) >= 0 }
}

/// Ends the process with `status` at once (`exit_group`), as `_exit` does.
pub fn exit_group(status: i32) -> ! {
    // SAFETY: ends the process; nothing after it runs.
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
    unreachable!("exit_group returned")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kill_timer_kills_unless_dropped() {
        drop(KillTimer::arm(std::time::Duration::from_millis(50)).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(150));
        match fork(true).unwrap() {
            Forked::Child => {
                let _t = KillTimer::arm(std::time::Duration::from_millis(50)).unwrap();
                write_stderr(b"");
                std::thread::sleep(std::time::Duration::from_secs(5));
                exit_now(0)
            }
            Forked::Parent(pid) => {
                assert_eq!(wait(pid).unwrap(), ExitStatus::Signaled(libc::SIGKILL));
            }
        }
    }

    #[test]
    fn fork_wait_and_statuses() {
        match fork(true).unwrap() {
            Forked::Child => exit_now(7),
            Forked::Parent(pid) => {
                let ended = wait_any(&[pid], std::time::Duration::from_secs(10)).unwrap();
                assert_eq!(ended, vec![pid]);
                assert_eq!(wait(pid).unwrap(), ExitStatus::Exited(7));
                assert!(!running(pid) && !exists(pid));
            }
        }
        match fork(true).unwrap() {
            Forked::Child => loop {
                std::thread::sleep(std::time::Duration::from_millis(10));
            },
            Forked::Parent(pid) => {
                assert!(running(pid) && exists(pid));
                assert_eq!(try_wait(pid).unwrap(), None);
                assert!(wait_any(&[pid], std::time::Duration::from_millis(20))
                    .unwrap()
                    .is_empty());
                kill(pid, libc::SIGKILL).unwrap();
                let st = wait(pid).unwrap();
                assert_eq!(st, ExitStatus::Signaled(libc::SIGKILL));
                assert!(!st.success());
                assert!(st.to_string().contains("SIGKILL"));
            }
        }
        assert!(!running(0) && !exists(0));
        assert!(kill(0x7fff_fff0, 0).is_err());
    }

    #[test]
    fn usage_of_a_child_counts_what_it_touched() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "exit 3"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let (status, usage) = loop {
            if let Some(done) = try_wait_usage(pid).unwrap() {
                break done;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        assert_eq!(status, ExitStatus::Exited(3));
        // A shell maps at least its own binary and libc.
        assert!(usage.max_rss_bytes >= 256 << 10, "{usage:?}");
        assert!(usage.minor_faults > 0, "{usage:?}");
        // Reaped: std's handle finds nothing left to wait for.
        assert!(child.try_wait().is_err());
    }

    #[test]
    fn a_kept_stderr_outlives_descriptor_2() {
        let copy = keep_stderr().expect("dup of stderr");
        assert!(std::os::fd::AsRawFd::as_raw_fd(&copy) >= 100);
        assert!(stderr_open());
    }
}
