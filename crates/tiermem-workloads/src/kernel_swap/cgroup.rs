//! Memory cgroups (v1 and v2): creation under a limit, joining (before `exec` or from the environment), counters, removal.

use std::ffi::{CStr, CString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use super::control::{parse_key_values, read_trimmed, read_u64, write_control, BUSY_RETRY};
use super::error::KernelSwapError;
use super::kind::{CGROUP_PROCS_ENV, NAME_PREFIX};
use super::mounts::mounts;

/// `vm.swappiness` for the cgroup (v1): the kernel default, stated so that a
/// host with a tuned global value does not change the baseline.
pub(super) const CGROUP_SWAPPINESS: &str = "60";

const V1_MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";

/// The cgroup interface in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum CgroupVersion {
    /// The v1 memory hierarchy (`memory.limit_in_bytes`).
    V1,
    /// The unified hierarchy (`memory.max`).
    V2,
}

/// A memory cgroup limited to the near budget, at the root of the memory
/// hierarchy, named `tiermem-bench-<name>`.
///
/// v1: `memory.limit_in_bytes` is the limit, `memory.memsw.limit_in_bytes`
/// stays unlimited (the workload may swap as much as it needs) and
/// `memory.swappiness` is 60. v2: `memory.max` is the limit and
/// `memory.swap.max` is `max`.
///
/// Dropping it moves any remaining tasks to the parent cgroup and removes the
/// directory; errors are printed to stderr, [`MemCgroup::remove`] returns them.
#[derive(Debug)]
pub struct MemCgroup {
    dir: PathBuf,
    procs: PathBuf,
    version: CgroupVersion,
    limit_bytes: u64,
    removed: bool,
}

impl MemCgroup {
    /// Creates the cgroup `tiermem-bench-<name>` (or `name` if it already has
    /// the prefix) with a memory limit of `limit_bytes`, first removing a
    /// leftover of the same name. Uses cgroup v1 if its memory hierarchy is
    /// mounted at `/sys/fs/cgroup/memory`, else a cgroup2 mount offering the
    /// memory controller.
    pub fn create(name: &str, limit_bytes: u64) -> Result<MemCgroup, KernelSwapError> {
        let dir_name = cgroup_dir_name(name)?;
        let (root, version) =
            locate_memory_cgroup().map_err(|reason| KernelSwapError::CgroupUnavailable { reason })?;
        if version == CgroupVersion::V2 {
            enable_v2_memory_controller(&root)?;
        }
        let dir = root.join(dir_name);
        if dir.exists() {
            clean_leftover_cgroup(&dir)?;
        }
        fs::create_dir(&dir).map_err(|source| KernelSwapError::CgroupCreate {
            path: dir.clone(),
            source,
        })?;
        // The guard exists as soon as the directory does.
        let cgroup = MemCgroup {
            procs: dir.join("cgroup.procs"),
            dir,
            version,
            limit_bytes,
            removed: false,
        };
        let limit = limit_bytes.to_string();
        match version {
            CgroupVersion::V1 => {
                cgroup.configure("memory.limit_in_bytes", &limit)?;
                cgroup.configure("memory.swappiness", CGROUP_SWAPPINESS)?;
            }
            CgroupVersion::V2 => {
                cgroup.configure("memory.max", &limit)?;
                cgroup.configure("memory.swap.max", "max")?;
            }
        }
        Ok(cgroup)
    }

    fn configure(&self, file: &str, value: &str) -> Result<(), KernelSwapError> {
        let path = self.dir.join(file);
        write_control(&path, value).map_err(|source| KernelSwapError::CgroupConfigure {
            path,
            value: value.to_string(),
            source,
        })
    }

    /// The cgroup's `cgroup.procs`: writing a pid there moves that process
    /// (all its threads) in.
    pub fn procs_file(&self) -> &Path {
        &self.procs
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Which cgroup interface the cgroup uses.
    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// The memory limit in bytes.
    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// Moves process `pid` into the cgroup. Memory it already has stays
    /// charged where it was: move a process in before it allocates.
    pub fn add_pid(&self, pid: u32) -> Result<(), KernelSwapError> {
        write_control(&self.procs, &pid.to_string()).map_err(|source| KernelSwapError::CgroupJoin {
            path: self.procs.clone(),
            pid,
            source,
        })
    }

    /// Makes the process that `cmd` spawns join this cgroup after `fork` and
    /// before `exec`, so that its whole footprint is charged here, from the
    /// program's first page on (a child calling [`join_cgroup_from_env`]
    /// joins only once it runs, after the loader and its own start-up).
    ///
    /// If the cgroup cannot be joined, spawning fails with the OS error of
    /// the write to `cgroup.procs`. The hook stays on `cmd`: spawn it again
    /// only while this cgroup exists.
    pub fn add_before_exec(&self, cmd: &mut Command) {
        // Prepared here, in the parent: the hook must not allocate.
        let procs = CString::new(self.procs.as_os_str().as_bytes())
            .expect("a cgroup path has no NUL byte: the root comes from the kernel, the name is checked");
        // SAFETY: the hook runs in the child between fork and exec, where
        // only async-signal-safe work is allowed (another thread of the
        // parent may have held the allocator's or any other lock at the
        // fork). `join_self` only calls getpid, open, write and close, which
        // POSIX lists as async-signal-safe, formats the pid into a buffer on
        // its stack, reads `procs`, a string allocated before the fork and
        // only borrowed, and builds its error from errno without allocating.
        unsafe {
            cmd.pre_exec(move || join_self(&procs));
        }
    }

    /// Sends SIGKILL to every process in the cgroup: the program of a run
    /// that timed out and whatever it started.
    pub(super) fn kill_all(&self) {
        for pid in read_pids(&self.procs) {
            // ESRCH: it exited meanwhile.
            let _ = tiermem_sys::process::kill(pid, libc::SIGKILL);
        }
    }

    /// The cgroup's counters now (all zero where a file cannot be read):
    /// major faults and pages in/out from `memory.stat`, current swap usage,
    /// the peak memory usage (v1 `memory.max_usage_in_bytes`, v2
    /// `memory.peak`), how often the limit was hit (v1 `memory.failcnt`, v2
    /// `max` in `memory.events`) and OOM kills (v1 `memory.oom_control`, v2
    /// `memory.events`). Read them after the workload exits but before the
    /// cgroup is dropped.
    pub fn stats(&self) -> CgroupStats {
        let stat = fs::read_to_string(self.dir.join("memory.stat"))
            .map(|t| parse_key_values(&t))
            .unwrap_or_default();
        let get = |k: &str| stat.get(k).copied();
        // v1 prints local counters and hierarchical `total_` ones; ours has no
        // children, but the hierarchical ones are the right ones regardless.
        let v1 = |k: &str| get(&format!("total_{k}")).or_else(|| get(k)).unwrap_or(0);
        let file = |f: &str| read_u64(&self.dir.join(f)).unwrap_or(0);
        let keyed = |f: &str, k: &str| {
            fs::read_to_string(self.dir.join(f))
                .ok()
                .and_then(|t| parse_key_values(&t).get(k).copied())
                .unwrap_or(0)
        };
        match self.version {
            CgroupVersion::V1 => CgroupStats {
                pgmajfault: v1("pgmajfault"),
                pgpgin: v1("pgpgin"),
                pgpgout: v1("pgpgout"),
                swap_bytes: v1("swap"),
                max_usage_bytes: file("memory.max_usage_in_bytes"),
                failcnt: file("memory.failcnt"),
                oom_kill: keyed("memory.oom_control", "oom_kill"),
            },
            CgroupVersion::V2 => CgroupStats {
                pgmajfault: get("pgmajfault").unwrap_or(0),
                pgpgin: get("pgpgin").unwrap_or(0),
                pgpgout: get("pgpgout").unwrap_or(0),
                swap_bytes: file("memory.swap.current"),
                max_usage_bytes: file("memory.peak"),
                failcnt: keyed("memory.events", "max"),
                oom_kill: keyed("memory.events", "oom_kill"),
            },
        }
    }

    /// Moves remaining tasks to the parent cgroup and removes the directory,
    /// returning the error if that fails. Dropping does the same.
    pub fn remove(mut self) -> Result<(), KernelSwapError> {
        self.removed = true;
        remove_cgroup_dir(&self.dir)
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        self.removed = true;
        if let Err(e) = remove_cgroup_dir(&self.dir) {
            eprintln!("tiermem: kernel-swap cgroup teardown: {e}");
        }
    }
}

/// A memory cgroup's counters, see [`MemCgroup::stats`].
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CgroupStats {
    /// Major page faults (for an anonymous workload: swap-ins).
    pub pgmajfault: u64,
    /// Swap space in use now, in bytes.
    pub swap_bytes: u64,
    /// Peak memory charged to the cgroup, in bytes (at most the limit).
    pub max_usage_bytes: u64,
    /// Pages charged to the cgroup (`pgpgin`; v1 only, 0 where absent).
    pub pgpgin: u64,
    /// Pages uncharged from the cgroup (`pgpgout`; v1 only, 0 where absent).
    pub pgpgout: u64,
    /// How many times the usage hit the limit (v1 `memory.failcnt`, v2 the
    /// `max` event).
    pub failcnt: u64,
    /// Processes of the cgroup that the OOM killer ended (the swap area was
    /// full, or the kernel could not reclaim fast enough).
    pub oom_kill: u64,
}

/// Writes the calling process's pid into the `cgroup.procs` file `procs`:
/// the pre-exec hook of [`MemCgroup::add_before_exec`]. Async-signal-safe:
/// no allocation, no lock, only getpid, open, write and close.
fn join_self(procs: &CStr) -> io::Result<()> {
    let mut buf = [0u8; 20];
    // SAFETY: getpid has no preconditions and cannot fail.
    let pid = unsafe { libc::getpid() };
    let digits = format_decimal(pid as u64, &mut buf);
    // SAFETY: `procs` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `digits` is valid for reads of its length; fd is open.
    let written = unsafe { libc::write(fd, digits.as_ptr().cast(), digits.len()) };
    let result = if written < 0 {
        Err(io::Error::last_os_error())
    } else if written as usize != digits.len() {
        // cgroupfs takes a write whole or fails it; EIO names the
        // impossible case without allocating a message.
        Err(io::Error::from_raw_os_error(libc::EIO))
    } else {
        Ok(())
    };
    // SAFETY: fd is ours and closed once.
    unsafe { libc::close(fd) };
    result
}

/// Formats `n` in decimal at the end of `buf` and returns the digits,
/// without allocating.
fn format_decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[start..];
        }
    }
}

pub(super) fn cgroup_dir_name(name: &str) -> Result<String, KernelSwapError> {
    let invalid = |reason| KernelSwapError::InvalidName {
        name: name.to_string(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("empty"));
    }
    if name.contains('/') || name.contains('\0') || name.contains('\n') {
        return Err(invalid("contains '/', NUL or newline"));
    }
    if name == "." || name == ".." {
        return Err(invalid("is . or .."));
    }
    if name.starts_with(NAME_PREFIX) {
        Ok(name.to_string())
    } else {
        Ok(format!("{NAME_PREFIX}-{name}"))
    }
}

/// The root of the memory cgroup hierarchy and its version, or why there is
/// none.
pub(super) fn locate_memory_cgroup() -> Result<(PathBuf, CgroupVersion), String> {
    let v1 = Path::new(V1_MEMORY_ROOT);
    if v1.join("memory.limit_in_bytes").exists() {
        return Ok((v1.to_path_buf(), CgroupVersion::V1));
    }
    let mut seen = Vec::new();
    for mount in mounts() {
        if mount.fstype != "cgroup2" {
            continue;
        }
        let controllers = read_trimmed(&mount.mount_point.join("cgroup.controllers")).unwrap_or_default();
        if controllers.split_whitespace().any(|c| c == "memory") {
            return Ok((mount.mount_point, CgroupVersion::V2));
        }
        seen.push(format!(
            "cgroup2 at {} offers only [{}]",
            mount.mount_point.display(),
            controllers
        ));
    }
    let mut reason = format!("no cgroup v1 memory hierarchy at {V1_MEMORY_ROOT}");
    if seen.is_empty() {
        reason.push_str(" and no cgroup2 mount");
    } else {
        reason.push_str(&format!(
            " and no cgroup2 mount with the memory controller ({})",
            seen.join(", ")
        ));
    }
    Err(reason)
}

fn enable_v2_memory_controller(root: &Path) -> Result<(), KernelSwapError> {
    let path = root.join("cgroup.subtree_control");
    let enabled = read_trimmed(&path).unwrap_or_default();
    if enabled.split_whitespace().any(|c| c == "memory") {
        return Ok(());
    }
    write_control(&path, "+memory").map_err(|source| KernelSwapError::CgroupConfigure {
        path,
        value: "+memory".to_string(),
        source,
    })
}

/// Moves the tasks of `dir` to its parent and removes it, retrying while the
/// kernel answers `EBUSY` (tasks that are exiting, or appeared meanwhile).
pub(super) fn remove_cgroup_dir(dir: &Path) -> Result<(), KernelSwapError> {
    let procs = dir.join("cgroup.procs");
    let parent_procs = dir.parent().map(|p| p.join("cgroup.procs")).unwrap_or_default();
    let deadline = Instant::now() + BUSY_RETRY;
    loop {
        let pids = read_pids(&procs);
        for pid in &pids {
            // ESRCH: it exited meanwhile; anything else shows up as EBUSY below.
            let _ = write_control(&parent_procs, &pid.to_string());
        }
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(10));
            }
            Err(source) => {
                return Err(KernelSwapError::CgroupRemove {
                    path: dir.to_path_buf(),
                    source,
                    remaining_pids: read_pids(&procs),
                })
            }
        }
    }
}

pub(super) fn read_pids(procs: &Path) -> Vec<u32> {
    fs::read_to_string(procs)
        .map(|t| t.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

/// For the child process of a baseline run: if [`CGROUP_PROCS_ENV`] is set
/// (and not empty), writes our own pid into the `cgroup.procs` file it names,
/// so that everything we allocate from now on is charged to that cgroup.
/// Returns whether it joined. Call it first thing, before allocating.
pub fn join_cgroup_from_env() -> Result<bool, KernelSwapError> {
    let Some(procs) = std::env::var_os(CGROUP_PROCS_ENV).filter(|p| !p.is_empty()) else {
        return Ok(false);
    };
    let path = PathBuf::from(procs);
    let pid = std::process::id();
    write_control(&path, &pid.to_string()).map_err(|source| KernelSwapError::CgroupJoin {
        path,
        pid,
        source,
    })?;
    Ok(true)
}

/// Removes a cgroup directory left by an earlier run of the same name,
/// moving its tasks to the parent first.
pub(super) fn clean_leftover_cgroup(dir: &Path) -> Result<(), KernelSwapError> {
    remove_cgroup_dir(dir).map_err(|e| KernelSwapError::CleanLeftover {
        path: dir.to_path_buf(),
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_names() {
        assert_eq!(cgroup_dir_name("heat").unwrap(), "tiermem-bench-heat");
        assert_eq!(cgroup_dir_name("tiermem-bench-x").unwrap(), "tiermem-bench-x");
        assert!(cgroup_dir_name("").is_err());
        assert!(cgroup_dir_name("a/b").is_err());
        assert!(cgroup_dir_name("..").is_err());
    }

    #[test]
    fn formats_pids_without_allocating() {
        let mut buf = [0u8; 20];
        assert_eq!(format_decimal(0, &mut buf), b"0");
        assert_eq!(format_decimal(7, &mut buf), b"7");
        assert_eq!(format_decimal(4_194_304, &mut buf), b"4194304");
        assert_eq!(
            format_decimal(u64::MAX, &mut buf),
            u64::MAX.to_string().as_bytes()
        );
    }

    #[test]
    fn join_self_reports_the_os_error() {
        let missing = CString::new("/nonexistent/cgroup.procs").unwrap();
        let err = join_self(&missing).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }
}
