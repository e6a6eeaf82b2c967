//! [`KernelSwapError`], and which errors mean that this machine cannot run the baseline.

use std::io;
use std::path::PathBuf;

/// Errors of the kernel-swap baseline, one variant per operation that failed.
///
/// [`KernelSwapError::is_unavailable`] tells the benchmark whether to skip the
/// baseline (missing privilege, zram, cgroup controller or tools) rather than
/// fail the run.
#[derive(Debug, thiserror::Error)]
pub enum KernelSwapError {
    /// The requested swap size is below [`super::MIN_SWAP_BYTES`].
    #[error("swap size {size_bytes} bytes is below the minimum of {min_bytes} bytes")]
    InvalidSize {
        /// The requested size.
        size_bytes: u64,
        /// [`super::MIN_SWAP_BYTES`].
        min_bytes: u64,
    },
    /// A cgroup name that cannot be a single directory name.
    #[error("invalid cgroup name {name:?}: {reason}")]
    InvalidName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A helper program (mkswap, swapon, swapoff) is not installed.
    #[error("finding {tool}: not in PATH, /usr/sbin, /sbin, /usr/bin or /bin")]
    FindTool {
        /// The program's name.
        tool: &'static str,
    },
    /// Neither `/sys/class/zram-control` nor a free `/dev/zram0` exists.
    #[error("zram is unavailable: {reason}")]
    ZramUnavailable {
        /// What was missing or busy.
        reason: String,
    },
    /// Reading `hot_add` to get a new zram device failed.
    #[error("zram hot_add: reading {}: {source}", .path.display())]
    ZramHotAdd {
        /// `/sys/class/zram-control/hot_add`.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The device node of a hot-added zram device did not appear.
    #[error("zram hot_add: {} did not appear within {waited_ms} ms", .path.display())]
    ZramWaitDevice {
        /// `/dev/zram<N>`.
        path: PathBuf,
        /// How long we waited.
        waited_ms: u64,
    },
    /// Writing `comp_algorithm` or `disksize` of a zram device failed.
    #[error("configuring zram: writing {value:?} to {}: {source}", .path.display())]
    ZramConfigure {
        /// The sysfs attribute.
        path: PathBuf,
        /// What we wrote.
        value: String,
        /// The OS error.
        source: io::Error,
    },
    /// Writing `1` to a zram device's `reset` failed.
    #[error("zram reset: writing 1 to {}: {source}", .path.display())]
    ZramReset {
        /// `/sys/block/zram<N>/reset`.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Writing the device number to `hot_remove` failed.
    #[error("zram hot_remove: writing {index} to {}: {source}", .path.display())]
    ZramHotRemove {
        /// `/sys/class/zram-control/hot_remove`.
        path: PathBuf,
        /// The zram device number.
        index: u32,
        /// The OS error.
        source: io::Error,
    },
    /// Writing the marker file that lets a later run clean up our zram device.
    #[error("writing zram marker {}: {source}", .path.display())]
    WriteMarker {
        /// The marker file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Creating, allocating or chmod-ing the swap file failed.
    #[error("creating swap file {}: {source}", .path.display())]
    CreateSwapFile {
        /// The swap file (or its directory).
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Deleting the swap file failed.
    #[error("removing swap file {}: {source}", .path.display())]
    RemoveSwapFile {
        /// The swap file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `mkswap` could not be run or failed.
    #[error("mkswap {}: {detail}", .path.display())]
    Mkswap {
        /// The device or file.
        path: PathBuf,
        /// The command, and its OS error or exit status and stderr.
        detail: String,
    },
    /// `swapon` could not be run or failed.
    #[error("swapon {}: {detail}", .path.display())]
    Swapon {
        /// The device or file.
        path: PathBuf,
        /// The command, and its OS error or exit status and stderr.
        detail: String,
    },
    /// `swapoff` could not be run or failed.
    #[error("swapoff {}: {detail}", .path.display())]
    Swapoff {
        /// The device or file.
        path: PathBuf,
        /// The command, and its OS error or exit status and stderr.
        detail: String,
    },
    /// No cgroup hierarchy with the memory controller was found.
    #[error("no memory cgroup: {reason}")]
    CgroupUnavailable {
        /// What was looked at.
        reason: String,
    },
    /// `mkdir` of the cgroup failed.
    #[error("creating cgroup {}: {source}", .path.display())]
    CgroupCreate {
        /// The cgroup directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Writing a cgroup control file (limit, swappiness, subtree_control).
    #[error("configuring cgroup: writing {value:?} to {}: {source}", .path.display())]
    CgroupConfigure {
        /// The control file.
        path: PathBuf,
        /// What we wrote.
        value: String,
        /// The OS error.
        source: io::Error,
    },
    /// Writing a pid into `cgroup.procs` failed.
    #[error("moving pid {pid} into a cgroup: writing {}: {source}", .path.display())]
    CgroupJoin {
        /// The `cgroup.procs` file.
        path: PathBuf,
        /// The pid.
        pid: u32,
        /// The OS error.
        source: io::Error,
    },
    /// `rmdir` of the cgroup failed.
    #[error("removing cgroup {}: {source} (pids still inside: {remaining_pids:?})", .path.display())]
    CgroupRemove {
        /// The cgroup directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
        /// Tasks that could not be moved out.
        remaining_pids: Vec<u32>,
    },
    /// The machine cannot run the baseline: the reasons [`super::preflight`]
    /// found (not root, no zram, no memory cgroup, missing tools), joined by
    /// `; ` so that a caller can print `kernel-swap baseline skipped: {e}`.
    #[error("{}", .reasons.join("; "))]
    Unavailable {
        /// One line for each thing that is missing.
        reasons: Vec<String>,
    },
    /// The memory limit of a [`super::LimitedRun`] is below
    /// [`super::MIN_LIMIT_BYTES`].
    #[error("memory limit {limit_bytes} bytes is below the minimum of {min_bytes} bytes")]
    InvalidLimit {
        /// The requested limit.
        limit_bytes: u64,
        /// [`super::MIN_LIMIT_BYTES`].
        min_bytes: u64,
    },
    /// [`super::LimitedRun::run_argv`] got no program to run.
    #[error("empty command line")]
    EmptyCommand,
    /// Starting the program failed: it does not exist or cannot be executed,
    /// or moving it into the cgroup before `exec` failed.
    #[error("starting {program} in the memory cgroup: {source}")]
    Spawn {
        /// The program, as given.
        program: String,
        /// The OS error (of `fork`, of the write to `cgroup.procs` or of `exec`).
        source: io::Error,
    },
    /// Waiting for the program or reading its captured output failed.
    #[error("waiting for {program}: {source}")]
    Wait {
        /// The program, as given.
        program: String,
        /// The OS error.
        source: io::Error,
    },
    /// Removing a leftover of an earlier, crashed run failed.
    #[error("cleaning up leftover {} from an earlier run: {detail}", .path.display())]
    CleanLeftover {
        /// The leftover cgroup, swap file or zram device.
        path: PathBuf,
        /// The error that stopped the cleanup.
        detail: String,
    },
}

impl KernelSwapError {
    /// Whether the error means that this machine cannot run the baseline
    /// (no privilege, no zram, no memory cgroup, missing tools), so that the
    /// benchmark should skip it with this message rather than fail.
    pub fn is_unavailable(&self) -> bool {
        let denied = |e: &io::Error| {
            e.kind() == io::ErrorKind::PermissionDenied
                || e.raw_os_error() == Some(libc::EPERM)
                || e.raw_os_error() == Some(libc::EROFS)
        };
        match self {
            KernelSwapError::FindTool { .. }
            | KernelSwapError::Unavailable { .. }
            | KernelSwapError::ZramUnavailable { .. }
            | KernelSwapError::CgroupUnavailable { .. } => true,
            KernelSwapError::ZramHotAdd { source, .. }
            | KernelSwapError::ZramConfigure { source, .. }
            | KernelSwapError::WriteMarker { source, .. }
            | KernelSwapError::CreateSwapFile { source, .. }
            | KernelSwapError::CgroupCreate { source, .. }
            | KernelSwapError::CgroupConfigure { source, .. }
            | KernelSwapError::CgroupJoin { source, .. } => denied(source),
            _ => false,
        }
    }
}
