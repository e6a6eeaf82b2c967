//! Clean-up of what crashed runs left behind: zram devices (by marker file), swap files, cgroups.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::cgroup::{locate_memory_cgroup, remove_cgroup_dir};
use super::control::{read_trimmed, read_u64};
use super::device::Tools;
use super::run::RUN_CGROUP_PREFIX;
use super::swap_file::SWAP_FILE_PREFIX;
use super::zram::{zram_dev, zram_hot_remove, zram_reset, zram_sys};
use super::KernelSwapError;

const ZRAM_MARKER_PREFIX: &str = "tiermem-bench-zram";

/// The marker that ties a zram device to the run that configured it, so that
/// a later run can clean up after a crash (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ZramMarker {
    boot_id: String,
    pid: u32,
    /// Field 22 of `/proc/<pid>/stat`: with the pid, identifies the process
    /// even after pid reuse.
    start_time: u64,
    index: u32,
    hot_added: bool,
    disksize_bytes: u64,
}

impl ZramMarker {
    pub(super) fn new(index: u32, hot_added: bool, disksize_bytes: u64) -> ZramMarker {
        let pid = std::process::id();
        ZramMarker {
            boot_id: boot_id(),
            pid,
            start_time: proc_start_time(pid).unwrap_or(0),
            index,
            hot_added,
            disksize_bytes,
        }
    }

    pub(super) fn path(&self) -> PathBuf {
        marker_dir().join(format!("{ZRAM_MARKER_PREFIX}{}", self.index))
    }

    pub(super) fn to_text(&self) -> String {
        format!(
            "boot_id={}\npid={}\nstart_time={}\nindex={}\nhot_added={}\ndisksize_bytes={}\n",
            self.boot_id,
            self.pid,
            self.start_time,
            self.index,
            u8::from(self.hot_added),
            self.disksize_bytes
        )
    }

    pub(super) fn parse(text: &str) -> Option<ZramMarker> {
        let kv: HashMap<&str, &str> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim()))
            .collect();
        Some(ZramMarker {
            boot_id: kv.get("boot_id")?.to_string(),
            pid: kv.get("pid")?.parse().ok()?,
            start_time: kv.get("start_time")?.parse().ok()?,
            index: kv.get("index")?.parse().ok()?,
            hot_added: *kv.get("hot_added")? == "1",
            disksize_bytes: kv.get("disksize_bytes")?.parse().ok()?,
        })
    }

    /// The same marker with another owner.
    #[cfg(test)]
    pub(super) fn owned_by(self, pid: u32) -> ZramMarker {
        ZramMarker { pid, ..self }
    }

    pub(super) fn owner_alive(&self) -> bool {
        proc_start_time(self.pid) == Some(self.start_time)
    }
}

/// `/run` where it exists (cleared or at least invalidated by the boot id at
/// reboot), else the temporary directory.
fn marker_dir() -> PathBuf {
    let run = Path::new("/run");
    if run.is_dir() {
        run.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn boot_id() -> String {
    read_trimmed(Path::new("/proc/sys/kernel/random/boot_id")).unwrap_or_default()
}

/// Start time of a process in clock ticks since boot, `None` if it is gone.
fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: count
    // fields after the last ')'. starttime is field 22, the 20th after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Removes zram devices whose marker names a dead owner of this boot.
pub(super) fn clean_leftover_zram(tools: &Tools) -> Result<(), KernelSwapError> {
    let dir = marker_dir();
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(());
    };
    let this_boot = boot_id();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(ZRAM_MARKER_PREFIX) {
            continue;
        }
        let marker_path = entry.path();
        let Some(marker) = fs::read_to_string(&marker_path)
            .ok()
            .and_then(|t| ZramMarker::parse(&t))
        else {
            let _ = fs::remove_file(&marker_path);
            continue;
        };
        if marker.boot_id != this_boot {
            // From an earlier boot: the device it names is not ours.
            let _ = fs::remove_file(&marker_path);
            continue;
        }
        if marker.owner_alive() {
            continue;
        }
        let sys = zram_sys(marker.index);
        let dev = zram_dev(marker.index);
        if sys.exists() {
            let disksize = read_u64(&sys.join("disksize")).unwrap_or(u64::MAX);
            let leftover = |e: KernelSwapError| KernelSwapError::CleanLeftover {
                path: dev.clone(),
                detail: e.to_string(),
            };
            if disksize == marker.disksize_bytes {
                tools.swapoff_if_active(&dev).map_err(leftover)?;
                zram_reset(marker.index).map_err(leftover)?;
                if marker.hot_added {
                    zram_hot_remove(marker.index).map_err(leftover)?;
                }
            } else if disksize == 0 && marker.hot_added {
                // Hot-added but never configured: unused, remove it. EBUSY
                // means someone opened it meanwhile; leave it then.
                let _ = zram_hot_remove(marker.index);
            }
            // Any other size: someone else has configured the device since.
        }
        let _ = fs::remove_file(&marker_path);
    }
    Ok(())
}

/// Removes a cgroup directory left by an earlier run of the same name,
/// moving its tasks to the parent first.
pub(super) fn clean_leftover_cgroup(dir: &Path) -> Result<(), KernelSwapError> {
    remove_cgroup_dir(dir).map_err(|e| KernelSwapError::CleanLeftover {
        path: dir.to_path_buf(),
        detail: e.to_string(),
    })
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

/// Swaps off and deletes `tiermem-bench-swap-<pid>-*` files in `dir` whose
/// process is dead.
pub(super) fn clean_leftover_swap_files(dir: &Path, tools: &Tools) -> Result<(), KernelSwapError> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = owner_pid(&name.to_string_lossy(), SWAP_FILE_PREFIX) else {
            continue;
        };
        if pid_alive(pid) {
            continue;
        }
        remove_leftover_swap_file(&entry.path(), tools)?;
    }
    Ok(())
}

pub(super) fn remove_leftover_swap_file(path: &Path, tools: &Tools) -> Result<(), KernelSwapError> {
    let leftover = |detail: String| KernelSwapError::CleanLeftover {
        path: path.to_path_buf(),
        detail,
    };
    tools
        .swapoff_if_active(path)
        .map_err(|e| leftover(e.to_string()))?;
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(leftover(e.to_string())),
        _ => Ok(()),
    }
}

/// The pid in a name `<prefix><pid>-<seq>` (swap files, run cgroups).
pub(super) fn owner_pid(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    rest.split('-').next()?.parse().ok()
}

/// Whether a process `pid` exists (in our pid namespace).
fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel_swap::tests::dead_pid;

    #[test]
    fn marker_round_trips_and_names() {
        let m = ZramMarker::new(3, true, 256 << 20);
        assert_eq!(ZramMarker::parse(&m.to_text()), Some(m.clone()));
        assert!(m.owner_alive(), "we are alive");
        assert!(m.path().ends_with("tiermem-bench-zram3"));
        let dead = m.owned_by(dead_pid());
        assert!(!dead.owner_alive());
        assert_eq!(ZramMarker::parse("pid=1\n"), None);
    }

    #[test]
    fn owners_of_names() {
        let swap = SWAP_FILE_PREFIX;
        assert_eq!(owner_pid("tiermem-bench-swap-1234-0", swap), Some(1234));
        assert_eq!(owner_pid("tiermem-bench-swap-x", swap), None);
        assert_eq!(owner_pid("other", swap), None);
        assert_eq!(owner_pid("tiermem-bench-run-77-3", RUN_CGROUP_PREFIX), Some(77));
        assert_eq!(owner_pid("tiermem-bench-run-77-3", swap), None);
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(dead_pid()));
    }

    #[test]
    fn proc_start_time_is_stable() {
        let pid = std::process::id();
        let t = proc_start_time(pid).expect("our own start time");
        assert_eq!(proc_start_time(pid), Some(t));
        assert_eq!(proc_start_time(dead_pid()), None);
    }
}
