//! Who owns what a run leaves behind: the pid in a name, whether that
//! process is still alive, and where markers live. Below every module that
//! cleans up after a crashed run.

use std::fs;
use std::path::{Path, PathBuf};

use super::control::read_trimmed;

/// `/run` where it exists (cleared or at least invalidated by the boot id at
/// reboot), else the temporary directory.
pub(super) fn marker_dir() -> PathBuf {
    let run = Path::new("/run");
    if run.is_dir() {
        run.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

pub(super) fn boot_id() -> String {
    read_trimmed(Path::new("/proc/sys/kernel/random/boot_id")).unwrap_or_default()
}

/// Start time of a process in clock ticks since boot, `None` if it is gone.
pub(super) fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: count
    // fields after the last ')'. starttime is field 22, the 20th after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The pid in a name `<prefix><pid>-<seq>` (swap files, run cgroups).
pub(super) fn owner_pid(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    rest.split('-').next()?.parse().ok()
}

/// Whether a process `pid` exists (in our pid namespace).
pub(super) fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel_swap::run::RUN_CGROUP_PREFIX;
    use crate::kernel_swap::swap_file::SWAP_FILE_PREFIX;
    use crate::kernel_swap::tests::dead_pid;

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
