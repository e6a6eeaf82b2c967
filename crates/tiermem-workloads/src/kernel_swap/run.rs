//! [`LimitedRun`]: one command line run under a memory limit with kernel swap, set up and removed around it.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::cgroup::{clean_leftover_cgroup, locate_memory_cgroup, CgroupStats, CgroupVersion, MemCgroup};
use super::control::fmt_bytes;
use super::device::SwapDevice;
use super::error::KernelSwapError;
use super::kind::SwapKind;
use super::owners::{owner_pid, pid_alive};
use super::preflight::missing_for;
use super::swaps::vmstat_swap;

/// Swap area of a [`LimitedRun`] unless [`LimitedRun::swap_bytes`] says
/// otherwise: room for programs up to a few GiB beyond the limit. A zram
/// device costs memory only for what is swapped out; a swap file is
/// allocated on disk in full.
pub const DEFAULT_RUN_SWAP_BYTES: u64 = 4 << 30;

/// Smallest memory limit a [`LimitedRun`] accepts; anything below is a unit
/// mistake (no program starts in it).
pub const MIN_LIMIT_BYTES: u64 = 1 << 20;

/// Names of the cgroups of [`LimitedRun`]: `tiermem-bench-run-<pid>-<seq>`,
/// so that the leftover sweep knows whose they are.
pub(super) const RUN_CGROUP_PREFIX: &str = "tiermem-bench-run-";

/// Makes cgroup names unique within one process. Relaxed: only the
/// uniqueness of the values matters.
static RUN_SEQ: AtomicU64 = AtomicU64::new(0);

/// What becomes of the program's stdout or stderr in a [`LimitedRun`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stream {
    /// Shared with this process (the default): the output appears as the
    /// program runs, and [`RunOutcome`] holds none of it.
    #[default]
    Inherit,
    /// Collected into [`RunOutcome::stdout`] or [`RunOutcome::stderr`].
    Capture,
    /// Discarded (`/dev/null`).
    Null,
}

impl Stream {
    fn stdio(self) -> Stdio {
        match self {
            Stream::Inherit => Stdio::inherit(),
            Stream::Capture => Stdio::piped(),
            Stream::Null => Stdio::null(),
        }
    }
}

/// Runs a command line under a memory limit with kernel swap: the Linux
/// baseline for any program, unmodified external ones included.
///
/// [`LimitedRun::run`] checks the machine (the same checks as
/// [`super::preflight`]), removes leftovers of crashed runs, sets up a swap
/// area ([`SwapDevice`]) and a memory cgroup limited to `limit_bytes`
/// ([`MemCgroup`]), starts the program inside the cgroup (it joins between
/// `fork` and `exec`, so everything it maps counts, from its first page),
/// waits for it, reads the counters and removes cgroup and swap area again.
/// Whatever it set up is also removed when a step fails.
///
/// Builder methods take and return the value; [`LimitedRun::run`] borrows
/// it, so one builder serves any number of runs (each sets up and removes
/// its own cgroup and swap area).
///
/// ```no_run
/// use std::process::Command;
/// use tiermem_workloads::kernel_swap::{LimitedRun, Stream, SwapKind};
///
/// # fn main() -> Result<(), tiermem_workloads::kernel_swap::KernelSwapError> {
/// let run = LimitedRun::new(SwapKind::Zram, 256 << 20)
///     .swap_bytes(2 << 30)
///     .stdout(Stream::Capture)
///     .run(Command::new("./cg.B").env("OMP_NUM_THREADS", "1"))?;
/// assert!(run.status.success());
/// println!("{} ({} pages swapped out)", run.summary(), run.swapped_out_pages);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct LimitedRun {
    kind: SwapKind,
    limit_bytes: u64,
    swap_bytes: u64,
    name: Option<String>,
    stdout: Stream,
    stderr: Stream,
    timeout: Option<Duration>,
}

impl LimitedRun {
    /// A run under a memory cgroup limited to `limit_bytes`, swapping to a
    /// new swap area of `kind` of [`DEFAULT_RUN_SWAP_BYTES`], with stdout and
    /// stderr inherited and no time limit.
    pub fn new(kind: SwapKind, limit_bytes: u64) -> LimitedRun {
        LimitedRun {
            kind,
            limit_bytes,
            swap_bytes: DEFAULT_RUN_SWAP_BYTES,
            name: None,
            stdout: Stream::Inherit,
            stderr: Stream::Inherit,
            timeout: None,
        }
    }

    /// Size of the swap area (rounded up to 64 KiB; at least
    /// [`super::MIN_SWAP_BYTES`]). A program whose footprint exceeds the
    /// limit plus this is killed by the OOM killer
    /// ([`CgroupStats::oom_kill`]).
    pub fn swap_bytes(self, bytes: u64) -> LimitedRun {
        LimitedRun {
            swap_bytes: bytes,
            ..self
        }
    }

    /// Names the cgroup `tiermem-bench-<name>` instead of
    /// `tiermem-bench-run-<pid>-<seq>`. An existing cgroup of that name is
    /// removed first (see [`MemCgroup::create`]): give concurrent runs
    /// different names.
    pub fn name(self, name: &str) -> LimitedRun {
        LimitedRun {
            name: Some(name.to_string()),
            ..self
        }
    }

    /// What becomes of the program's stdout (default [`Stream::Inherit`]).
    pub fn stdout(self, stream: Stream) -> LimitedRun {
        LimitedRun {
            stdout: stream,
            ..self
        }
    }

    /// What becomes of the program's stderr (default [`Stream::Inherit`]).
    pub fn stderr(self, stream: Stream) -> LimitedRun {
        LimitedRun {
            stderr: stream,
            ..self
        }
    }

    /// Captures both stdout and stderr.
    pub fn capture_output(self) -> LimitedRun {
        self.stdout(Stream::Capture).stderr(Stream::Capture)
    }

    /// Kills the program, and everything it started in the cgroup, once it
    /// has run this long; the outcome then says [`RunOutcome::timed_out`].
    pub fn timeout(self, limit: Duration) -> LimitedRun {
        LimitedRun {
            timeout: Some(limit),
            ..self
        }
    }

    /// Whether this machine can run the baseline: `Err` with
    /// [`KernelSwapError::Unavailable`] naming everything missing (not root,
    /// no zram, no memory cgroup, missing tools, a directory that cannot
    /// hold a swap file). [`LimitedRun::run`] checks the same first.
    pub fn preflight(&self) -> Result<(), KernelSwapError> {
        missing_for(&self.kind).map_err(|reasons| KernelSwapError::Unavailable { reasons })
    }

    /// Runs `argv[0]` with the arguments `argv[1..]` (looked up in `PATH`
    /// like [`Command::new`]), stdin inherited; see [`LimitedRun::run`].
    pub fn run_argv<S: AsRef<OsStr>>(&self, argv: &[S]) -> Result<RunOutcome, KernelSwapError> {
        let (program, args) = argv.split_first().ok_or(KernelSwapError::EmptyCommand)?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        self.run(&mut cmd)
    }

    /// Runs `cmd` to completion under the limit and returns what happened.
    ///
    /// `cmd` keeps its program, arguments, environment, directory and stdin;
    /// its stdout and stderr are replaced by this builder's [`Stream`]s, and
    /// it gets a pre-exec hook that moves the child into the cgroup (so do
    /// not spawn `cmd` again afterwards). When the program exits, whatever it
    /// left running in the cgroup is killed: a background process would hold
    /// captured pipes open, and outside the cgroup it would run unlimited.
    ///
    /// A program that fails or is killed is an outcome, not an error: see
    /// [`RunOutcome::status`]. Errors are those of the setup (with
    /// [`KernelSwapError::is_unavailable`] true when the machine cannot run
    /// the baseline at all), of starting the program
    /// ([`KernelSwapError::Spawn`]), of waiting for it, and of the teardown.
    pub fn run(&self, cmd: &mut Command) -> Result<RunOutcome, KernelSwapError> {
        if self.limit_bytes < MIN_LIMIT_BYTES {
            return Err(KernelSwapError::InvalidLimit {
                limit_bytes: self.limit_bytes,
                min_bytes: MIN_LIMIT_BYTES,
            });
        }
        self.preflight()?;
        clean_leftover_run_cgroups()?;
        // The swap area first: it must be active before the cgroup fills up.
        let swap = SwapDevice::setup(&self.kind, self.swap_bytes)?;
        let name = self.name.clone().unwrap_or_else(|| {
            let seq = RUN_SEQ.fetch_add(1, Ordering::Relaxed);
            format!("{RUN_CGROUP_PREFIX}{}-{seq}", std::process::id())
        });
        let cgroup = MemCgroup::create(&name, self.limit_bytes)?;
        let outcome = self.run_in(cmd, &cgroup, &swap)?;
        cgroup.remove()?;
        swap.remove()?;
        Ok(outcome)
    }

    /// Spawns `cmd` into `cgroup`, waits for it (killing it at the timeout)
    /// and collects its output, the swap counters around it and the
    /// cgroup's counters. On every return, nothing of the run is left in
    /// the cgroup.
    fn run_in(
        &self,
        cmd: &mut Command,
        cgroup: &MemCgroup,
        swap: &SwapDevice,
    ) -> Result<RunOutcome, KernelSwapError> {
        let program = cmd.get_program().to_string_lossy().into_owned();
        cgroup.add_before_exec(cmd);
        cmd.stdout(self.stdout.stdio()).stderr(self.stderr.stdio());
        let before = vmstat_swap();
        let start = Instant::now();
        let mut child = cmd.spawn().map_err(|source| KernelSwapError::Spawn {
            program: program.clone(),
            source,
        })?;
        let stdout = child.stdout.take().map(read_in_background);
        let stderr = child.stderr.take().map(read_in_background);
        let waited = wait_until(&mut child, cgroup, self.timeout);
        let wall = start.elapsed();
        let after = vmstat_swap();
        // Stragglers: what the program started and left running.
        cgroup.kill_all();
        let (status, timed_out) = match waited {
            Ok(w) => w,
            Err(source) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(KernelSwapError::Wait { program, source });
            }
        };
        let collect = |reader: Option<JoinHandle<io::Result<Vec<u8>>>>| {
            reader
                .map(|r| {
                    r.join()
                        .unwrap_or_else(|_| Err(io::Error::other("output reader panicked")))
                })
                .transpose()
                .map_err(|source| KernelSwapError::Wait {
                    program: program.clone(),
                    source,
                })
        };
        Ok(RunOutcome {
            status,
            timed_out,
            wall,
            swapped_out_pages: after.pswpout.saturating_sub(before.pswpout),
            swapped_in_pages: after.pswpin.saturating_sub(before.pswpin),
            // Before the cgroup's removal, which discards them.
            cgroup: cgroup.stats(),
            cgroup_version: cgroup.version(),
            limit_bytes: self.limit_bytes,
            swap: swap.describe(),
            stdout: collect(stdout)?,
            stderr: collect(stderr)?,
        })
    }
}

/// Reads a captured pipe to its end on a thread of its own, so that
/// neither stdout nor stderr can fill up and block the program.
fn read_in_background(mut pipe: impl Read + Send + 'static) -> JoinHandle<io::Result<Vec<u8>>> {
    thread::spawn(move || {
        let mut out = Vec::new();
        pipe.read_to_end(&mut out).map(|_| out)
    })
}

/// Waits for `child`; past `timeout`, kills everything in `cgroup` (the
/// child included) and reaps the child. Returns its status and whether it
/// timed out.
fn wait_until(
    child: &mut Child,
    cgroup: &MemCgroup,
    timeout: Option<Duration>,
) -> io::Result<(ExitStatus, bool)> {
    let Some(timeout) = timeout else {
        return Ok((child.wait()?, false));
    };
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok((status, false));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            cgroup.kill_all();
            // In case it left the cgroup; it is not reaped yet, so its pid
            // is still its own.
            let _ = child.kill();
            return Ok((child.wait()?, true));
        }
        // Wakes when the child ends (a pidfd; it does not reap), or at the
        // deadline. Without pidfds (out of descriptors), poll.
        if tiermem_sys::process::wait_any(&[child.id()], left).is_err() {
            thread::sleep(left.min(Duration::from_millis(10)));
        }
    }
}

/// What a [`LimitedRun`] measured.
#[derive(Debug)]
pub struct RunOutcome {
    /// The program's exit status (a signal when it was killed, by the OOM
    /// killer or at the timeout).
    pub status: ExitStatus,
    /// The program ran past [`LimitedRun::timeout`] and was killed.
    pub timed_out: bool,
    /// Wall time from spawn (`fork`, joining the cgroup, `exec`) to the
    /// program's exit.
    pub wall: Duration,
    /// Pages swapped out while the program ran (`pswpout` of `/proc/vmstat`:
    /// system-wide, so other swapping processes count too).
    pub swapped_out_pages: u64,
    /// Pages swapped in while the program ran (`pswpin`, system-wide).
    pub swapped_in_pages: u64,
    /// The cgroup's counters after the program exited: peak usage, how often
    /// the limit was hit, OOM kills, major faults.
    pub cgroup: CgroupStats,
    /// The cgroup interface that enforced the limit.
    pub cgroup_version: CgroupVersion,
    /// The memory limit, in bytes.
    pub limit_bytes: u64,
    /// The swap area, as [`SwapDevice::describe`] put it.
    pub swap: String,
    /// The captured stdout; `None` unless it was [`Stream::Capture`]d.
    pub stdout: Option<Vec<u8>>,
    /// The captured stderr; `None` unless it was [`Stream::Capture`]d.
    pub stderr: Option<Vec<u8>>,
}

impl RunOutcome {
    /// The captured stdout as text (invalid UTF-8 replaced; empty if it
    /// was not captured).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(self.stdout.as_deref().unwrap_or_default()).into_owned()
    }

    /// The captured stderr as text, like [`RunOutcome::stdout_text`].
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(self.stderr.as_deref().unwrap_or_default()).into_owned()
    }

    /// One line for a report, e.g. `exit status: 0 in 1.234 s under a
    /// 32.00 MiB memory cgroup (V1) with zram /dev/zram1 (lzo-rle, 4.00 GiB):
    /// 20480 pages swapped out, 10240 in; peak 32.00 MiB, limit hit 9000
    /// times, 0 OOM kills`.
    pub fn summary(&self) -> String {
        format!(
            "{}{} in {:.3} s under a {} memory cgroup ({:?}) with {}: {} pages swapped out, {} in; \
             peak {}, limit hit {} times, {} OOM kills",
            self.status,
            if self.timed_out { " (timed out)" } else { "" },
            self.wall.as_secs_f64(),
            fmt_bytes(self.limit_bytes),
            self.cgroup_version,
            self.swap,
            self.swapped_out_pages,
            self.swapped_in_pages,
            fmt_bytes(self.cgroup.max_usage_bytes),
            self.cgroup.failcnt,
            self.cgroup.oom_kill
        )
    }
}

/// Removes the cgroups `tiermem-bench-run-<pid>-<seq>` of
/// [`super::LimitedRun`] and `tiermem-bench-<pid>` of `tiermem bench`'s
/// kernel-swap mode whose process is dead (killed before it could remove
/// them).
pub(super) fn clean_leftover_run_cgroups() -> Result<(), KernelSwapError> {
    let Ok((root, _)) = locate_memory_cgroup() else {
        return Ok(());
    };
    let Ok(entries) = fs::read_dir(&root) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Some(pid) = owner_pid(&name, RUN_CGROUP_PREFIX).or_else(|| {
            // `tiermem-bench-<pid>`: digits only after the prefix.
            name.strip_prefix("tiermem-bench-")
                .filter(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|r| r.parse().ok())
        }) else {
            continue;
        };
        if !pid_alive(pid) {
            clean_leftover_cgroup(&entry.path())?;
        }
    }
    Ok(())
}
