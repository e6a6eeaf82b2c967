//! The Linux kernel-swap baseline: a memory cgroup limited to the near
//! budget, with swap on zram or on a swap file, set up and removed again.
//!
//! tiermem's benchmarks compare against what the kernel does on its own: the
//! same workload runs in a child process inside a memory cgroup whose limit
//! is the near budget, and the kernel swaps the rest out to a swap device
//! that this module creates for the run ([`SwapDevice`]) and removes again.
//! Both objects are RAII guards: dropping them undoes everything they did,
//! including after an error half-way through their own setup.
//!
//! # Canonical use
//!
//! ```no_run
//! use std::process::Command;
//! use tiermem_workloads::kernel_swap::{self, MemCgroup, SwapDevice, SwapKind, CGROUP_PROCS_ENV};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let kind = SwapKind::Zram;
//! if let Err(why) = kernel_swap::preflight(&kind) {
//!     eprintln!("kernel-swap baseline skipped: {why}");
//!     return Ok(());
//! }
//! let swap = SwapDevice::setup(&kind, 2 << 30)?; // before the cgroup: it must be active first
//! let cgroup = MemCgroup::create("heat", 512 << 20)?;
//! let before = kernel_swap::vmstat_swap();
//! // The child calls `kernel_swap::join_cgroup_from_env()` before it allocates.
//! let status = Command::new(std::env::current_exe()?)
//!     .arg("--kernel-swap-child")
//!     .env(CGROUP_PROCS_ENV, cgroup.procs_file())
//!     .status()?;
//! let after = kernel_swap::vmstat_swap();
//! println!(
//!     "{status}; {}; {:?}; {} pages swapped out",
//!     swap.describe(),
//!     cgroup.stats(),
//!     after.pswpout - before.pswpout
//! );
//! drop(cgroup); // moves stragglers to the parent cgroup, then rmdir
//! drop(swap); // swapoff, then zram reset + hot_remove (or delete the swap file)
//! # Ok(())
//! # }
//! ```
//!
//! # Leftovers from crashed runs
//!
//! Everything this module creates is named with the prefix `tiermem-bench`, so
//! that a later run can find what a crashed one left behind and remove it
//! before it sets up its own:
//! - cgroups are directories `tiermem-bench-<name>` at the root of the memory
//!   hierarchy; [`MemCgroup::create`] removes an existing one of the same name
//!   (moving its tasks to the parent first);
//! - swap files are `tiermem-bench-swap-<pid>-<seq>`; [`SwapDevice::setup`]
//!   swaps off and deletes those in the same directory whose process is dead;
//! - a zram device cannot carry a name, so each one we configure gets a marker
//!   file `tiermem-bench-zram<N>` in `/run` (the temporary directory where there
//!   is no `/run`) with the boot id, the owner's pid and start time, the disk
//!   size and whether we hot-added it. A marker whose owner is dead (in this
//!   boot) leads to swapoff, reset and hot_remove of that device, but only if
//!   its disk size is still the one we wrote: a device someone else has since
//!   configured is left alone.
//!
//! # Kernel quirks handled here
//!
//! - zram's `comp_algorithm` must be written before `disksize`; both answer
//!   `EBUSY` once the device is initialised, which is also how a concurrent
//!   claim of `/dev/zram0` shows up.
//! - `reset` and `hot_remove` answer `EBUSY` while anything holds the device
//!   open, and udev may probe the device for a moment right after `swapoff`:
//!   both are retried for a few seconds.
//! - A swap file must have no holes (`File::set_len` makes a sparse file and
//!   `swapon` then refuses it): it is allocated with `fallocate(1)` (ext4 and
//!   xfs accept unwritten extents) or by writing zeros. tmpfs and overlayfs
//!   cannot hold swap files at all.
//! - `/proc/swaps` and `/proc/self/mountinfo` escape space, tab, newline and
//!   backslash in paths as `\ooo` octal.
//! - `rmdir` of a cgroup answers `EBUSY` while a task is still inside (also for
//!   a moment while an exiting task is torn down): tasks are moved to the
//!   parent and the removal is retried.
//! - cgroup v2 only offers `memory.max` in a child when the parent's
//!   `cgroup.subtree_control` enables `memory`; we enable it at the root if
//!   needed and leave it enabled (other cgroups may rely on it by then).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// Environment variable naming the `cgroup.procs` file a child process joins
/// with [`join_cgroup_from_env`] before it allocates anything.
pub const CGROUP_PROCS_ENV: &str = "TIERMEM_CGROUP_PROCS";

/// Prefix of every object this module creates (cgroups, swap files, zram
/// markers), so that leftovers of crashed runs can be found.
pub const NAME_PREFIX: &str = "tiermem-bench";

/// Priority given to our swap area: above the kernel's default (negative)
/// priorities, so the kernel fills ours before any other active swap.
pub const SWAP_PRIORITY: i32 = 100;

/// Smallest swap area we set up. mkswap needs at least 10 pages; a baseline
/// with less than a MiB of swap is a mistake.
pub const MIN_SWAP_BYTES: u64 = 1 << 20;

/// Swap sizes are rounded up to this multiple, which is a multiple of every
/// page size Linux uses (4, 16 and 64 KiB), so the zram disk size we write is
/// the one the kernel keeps (it page-aligns) and the marker can compare it.
const SIZE_ALIGN_BYTES: u64 = 64 << 10;

/// `vm.swappiness` for the cgroup (v1): the kernel default, stated so that a
/// host with a tuned global value does not change the baseline.
const CGROUP_SWAPPINESS: &str = "60";

const V1_MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";
const ZRAM_CONTROL: &str = "/sys/class/zram-control";
const SYS_BLOCK: &str = "/sys/block";
const PROC_SWAPS: &str = "/proc/swaps";
const SWAP_FILE_PREFIX: &str = "tiermem-bench-swap-";
const ZRAM_MARKER_PREFIX: &str = "tiermem-bench-zram";

/// zram compression algorithms in order of preference: lzo-rle is the kernel
/// default and the fastest of the common ones on these machines.
const PREFERRED_ZRAM_ALGORITHMS: [&str; 3] = ["lzo-rle", "lz4", "lzo"];

/// How long `EBUSY` from zram `reset`/`hot_remove`/`disksize` or cgroup
/// `rmdir` is retried before giving up.
const BUSY_RETRY: Duration = Duration::from_secs(5);

/// How long we wait for `/dev/zram<N>` to appear after `hot_add`.
const DEVICE_NODE_WAIT: Duration = Duration::from_secs(5);

/// Capability bit of `CAP_SYS_ADMIN` in `/proc/self/status` `CapEff`;
/// swapon, swapoff and the cgroup writes need it.
const CAP_SYS_ADMIN_BIT: u32 = 21;

/// Sequence number making swap-file names unique within one process.
/// Relaxed: only the uniqueness of the values matters, nothing is published.
static SWAP_FILE_SEQ: AtomicU64 = AtomicU64::new(0);

/// Errors of the kernel-swap baseline, one variant per operation that failed.
///
/// [`KernelSwapError::is_unavailable`] tells the benchmark whether to skip the
/// baseline (missing privilege, zram, cgroup controller or tools) rather than
/// fail the run.
#[derive(Debug, thiserror::Error)]
pub enum KernelSwapError {
    /// The requested swap size is below [`MIN_SWAP_BYTES`].
    #[error("swap size {size_bytes} bytes is below the minimum of {min_bytes} bytes")]
    InvalidSize {
        /// The requested size.
        size_bytes: u64,
        /// [`MIN_SWAP_BYTES`].
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

/// Where the kernel swaps to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SwapKind {
    /// A compressed RAM block device (`/dev/zram<N>`): the kernel's own
    /// "far memory in RAM", the closest match to tiermem's memory far store.
    Zram,
    /// A swap file created in this directory, which must be on a filesystem
    /// that supports swap files (ext4, xfs; not tmpfs or overlayfs).
    File(PathBuf),
}

/// The helper programs a swap device needs, found once at setup.
#[derive(Clone, Debug)]
struct Tools {
    mkswap: PathBuf,
    swapon: PathBuf,
    swapoff: PathBuf,
}

impl Tools {
    fn find() -> Result<Tools, KernelSwapError> {
        Ok(Tools {
            mkswap: find_tool("mkswap")?,
            swapon: find_tool("swapon")?,
            swapoff: find_tool("swapoff")?,
        })
    }

    fn mkswap(&self, path: &Path) -> Result<(), KernelSwapError> {
        run_tool(&self.mkswap, &[path.as_os_str()]).map_err(|detail| KernelSwapError::Mkswap {
            path: path.to_path_buf(),
            detail,
        })
    }

    fn swapon(&self, path: &Path) -> Result<(), KernelSwapError> {
        let priority = SWAP_PRIORITY.to_string();
        run_tool(
            &self.swapon,
            &[OsStr::new("-p"), OsStr::new(&priority), path.as_os_str()],
        )
        .map_err(|detail| KernelSwapError::Swapon {
            path: path.to_path_buf(),
            detail,
        })
    }

    /// Swaps `path` off if /proc/swaps lists it; a no-op otherwise.
    fn swapoff_if_active(&self, path: &Path) -> Result<(), KernelSwapError> {
        if !is_swap_active(path) {
            return Ok(());
        }
        run_tool(&self.swapoff, &[path.as_os_str()]).map_err(|detail| KernelSwapError::Swapoff {
            path: path.to_path_buf(),
            detail,
        })
    }
}

/// What backs a [`SwapDevice`], with what its teardown must undo.
#[derive(Debug)]
enum Backing {
    Zram {
        /// N of `/dev/zram<N>`.
        index: u32,
        /// We got the device from `hot_add` (rather than configuring a free
        /// `/dev/zram0`), so teardown must `hot_remove` it.
        hot_added: bool,
        /// The compression algorithm in use; empty until configured.
        algorithm: String,
        /// Our marker file, once written.
        marker: Option<PathBuf>,
    },
    File,
}

/// An active swap area set up for one benchmark run: a zram device or a swap
/// file, swapped on at priority [`SWAP_PRIORITY`].
///
/// Dropping it swaps it off and removes it: for zram it resets the device and
/// hot-removes it if we hot-added it; for a file it deletes the file. Errors
/// during drop are printed to stderr; call [`SwapDevice::remove`] to get them.
#[derive(Debug)]
pub struct SwapDevice {
    backing: Backing,
    /// `/dev/zram<N>` or the swap file's absolute path.
    path: PathBuf,
    size_bytes: u64,
    tools: Tools,
    /// Teardown ran (successfully or not): drop must not run it again.
    torn_down: bool,
}

impl SwapDevice {
    /// Creates a swap area of `size_bytes` (rounded up to 64 KiB) of the given
    /// kind and swaps it on at priority [`SWAP_PRIORITY`], after removing
    /// leftovers of crashed earlier runs (see the module docs).
    ///
    /// For zram, `/dev/zram0` is used if it is free (disk size 0, not swapped
    /// on, not claimed by another run); otherwise a new device is hot-added.
    /// The compression algorithm is lzo-rle, else lz4, else lzo, else the
    /// device's current one.
    pub fn setup(kind: &SwapKind, size_bytes: u64) -> Result<SwapDevice, KernelSwapError> {
        if size_bytes < MIN_SWAP_BYTES {
            return Err(KernelSwapError::InvalidSize {
                size_bytes,
                min_bytes: MIN_SWAP_BYTES,
            });
        }
        let size_bytes = size_bytes.div_ceil(SIZE_ALIGN_BYTES) * SIZE_ALIGN_BYTES;
        let tools = Tools::find()?;
        match kind {
            SwapKind::Zram => setup_zram(size_bytes, tools),
            SwapKind::File(dir) => setup_file(dir, size_bytes, tools),
        }
    }

    /// A one-line description for reports, e.g.
    /// `zram /dev/zram1 (lzo-rle, 2.00 GiB)` or
    /// `swap file /tmp/tiermem-bench-swap-42-0 (2.00 GiB)`.
    pub fn describe(&self) -> String {
        match &self.backing {
            Backing::Zram { algorithm, .. } => format!(
                "zram {} ({}, {})",
                self.path.display(),
                algorithm,
                fmt_bytes(self.size_bytes)
            ),
            Backing::File => format!(
                "swap file {} ({})",
                self.path.display(),
                fmt_bytes(self.size_bytes)
            ),
        }
    }

    /// The device node (`/dev/zram<N>`) or the swap file, as `/proc/swaps`
    /// lists it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The size of the swap area in bytes (after rounding up).
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Swaps the area off and removes it, stopping at the first error; what
    /// is left then (an active device, its marker, the swap file) is removed
    /// by the leftover sweep of the next [`SwapDevice::setup`] after this
    /// process exits. Dropping does the same but can only print errors.
    pub fn remove(mut self) -> Result<(), KernelSwapError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), KernelSwapError> {
        self.torn_down = true;
        // On failure the area is still active: a reset would only answer
        // EBUSY, and a swap file unlinked while active can no longer be
        // swapped off by name. Device, marker and file are left for the next
        // run's leftover sweep.
        self.tools.swapoff_if_active(&self.path)?;
        match &self.backing {
            Backing::Zram {
                index,
                hot_added,
                marker,
                ..
            } => {
                zram_reset(*index)?;
                if *hot_added {
                    // Only after the reset: an initialised device answers EBUSY.
                    zram_hot_remove(*index)?;
                }
                if let Some(marker) = marker {
                    let _ = fs::remove_file(marker);
                }
                Ok(())
            }
            Backing::File => match fs::remove_file(&self.path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(KernelSwapError::RemoveSwapFile {
                    path: self.path.clone(),
                    source: e,
                }),
                _ => Ok(()),
            },
        }
    }
}

impl Drop for SwapDevice {
    fn drop(&mut self) {
        if self.torn_down {
            return;
        }
        if let Err(e) = self.teardown() {
            eprintln!("tiermem: kernel-swap teardown of {}: {e}", self.path.display());
        }
    }
}

fn setup_zram(size_bytes: u64, tools: Tools) -> Result<SwapDevice, KernelSwapError> {
    clean_leftover_zram(&tools)?;
    let zram = |index, hot_added, algorithm, marker| SwapDevice {
        backing: Backing::Zram {
            index,
            hot_added,
            algorithm,
            marker,
        },
        path: zram_dev(index),
        size_bytes,
        tools: tools.clone(),
        torn_down: false,
    };
    let dev = if let Some((marker, algorithm)) = try_claim_zram0(size_bytes)? {
        zram(0, false, algorithm, Some(marker))
    } else {
        let index = zram_hot_add()?;
        // From here on the guard exists, so every error below resets and
        // hot-removes the new device when it drops.
        let mut dev = zram(index, true, String::new(), None);
        let marker = ZramMarker::new(index, true, size_bytes);
        let marker_path = marker.path();
        fs::write(&marker_path, marker.to_text()).map_err(|source| KernelSwapError::WriteMarker {
            path: marker_path.clone(),
            source,
        })?;
        if let Backing::Zram { marker, .. } = &mut dev.backing {
            *marker = Some(marker_path);
        }
        wait_for_node(&dev.path)?;
        let chosen = configure_zram(index, size_bytes)?;
        if let Backing::Zram { algorithm, .. } = &mut dev.backing {
            *algorithm = chosen;
        }
        dev
    };
    dev.tools.mkswap(&dev.path)?;
    dev.tools.swapon(&dev.path)?;
    Ok(dev)
}

/// Claims `/dev/zram0` if it is free, configuring it; returns the marker
/// written and the algorithm chosen. `None` if zram0 is absent, in use or
/// claimed by another run: the caller then hot-adds a device.
///
/// The marker is created with `O_EXCL` and serves as the claim between
/// concurrent runs; the `EBUSY` of `comp_algorithm`/`disksize` catches anyone
/// else who initialises zram0 between our check and our write. Until
/// `disksize` succeeds the device is not ours, so no guard that would reset it
/// exists yet.
fn try_claim_zram0(size_bytes: u64) -> Result<Option<(PathBuf, String)>, KernelSwapError> {
    let sys = zram_sys(0);
    if !sys.exists() || read_u64(&sys.join("disksize")).unwrap_or(1) != 0 {
        return Ok(None);
    }
    if is_swap_active(&zram_dev(0)) {
        return Ok(None);
    }
    let marker = ZramMarker::new(0, false, size_bytes);
    let marker_path = marker.path();
    let created = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker_path)
        .and_then(|mut f| f.write_all(marker.to_text().as_bytes()));
    match created {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(None),
        Err(source) => {
            let _ = fs::remove_file(&marker_path);
            return Err(KernelSwapError::WriteMarker {
                path: marker_path,
                source,
            });
        }
    }
    match configure_zram(0, size_bytes) {
        Ok(algorithm) => Ok(Some((marker_path, algorithm))),
        Err(KernelSwapError::ZramConfigure { source, .. }) if source.raw_os_error() == Some(libc::EBUSY) => {
            let _ = fs::remove_file(&marker_path);
            Ok(None)
        }
        Err(e) => {
            let _ = fs::remove_file(&marker_path);
            Err(e)
        }
    }
}

/// Writes the compression algorithm, then the disk size (this order: the
/// algorithm cannot change once the device is initialised). Returns the
/// algorithm in use.
fn configure_zram(index: u32, size_bytes: u64) -> Result<String, KernelSwapError> {
    let sys = zram_sys(index);
    let algo_path = sys.join("comp_algorithm");
    let (available, current) = fs::read_to_string(&algo_path)
        .map(|t| parse_comp_algorithms(&t))
        .unwrap_or_default();
    let chosen = choose_algorithm(&available, current.as_deref());
    let algorithm = match chosen {
        Some(algo) => {
            if current.as_deref() != Some(algo.as_str()) {
                write_control(&algo_path, &algo).map_err(|source| KernelSwapError::ZramConfigure {
                    path: algo_path.clone(),
                    value: algo.clone(),
                    source,
                })?;
            }
            algo
        }
        None => current.unwrap_or_else(|| "unknown".to_string()),
    };
    let size_path = sys.join("disksize");
    let value = size_bytes.to_string();
    write_control(&size_path, &value).map_err(|source| KernelSwapError::ZramConfigure {
        path: size_path,
        value,
        source,
    })?;
    Ok(algorithm)
}

fn zram_sys(index: u32) -> PathBuf {
    Path::new(SYS_BLOCK).join(format!("zram{index}"))
}

fn zram_dev(index: u32) -> PathBuf {
    PathBuf::from(format!("/dev/zram{index}"))
}

fn zram_hot_add() -> Result<u32, KernelSwapError> {
    let path = Path::new(ZRAM_CONTROL).join("hot_add");
    if !path.exists() {
        return Err(KernelSwapError::ZramUnavailable {
            reason: format!(
                "/dev/zram0 is in use or absent and {} does not exist (zram module not loaded?)",
                path.display()
            ),
        });
    }
    // Reading hot_add creates a device and returns its number.
    let text = fs::read_to_string(&path).map_err(|source| KernelSwapError::ZramHotAdd {
        path: path.clone(),
        source,
    })?;
    text.trim().parse().map_err(|_| KernelSwapError::ZramHotAdd {
        path,
        source: io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected answer {:?}", text.trim()),
        ),
    })
}

fn zram_reset(index: u32) -> Result<(), KernelSwapError> {
    let path = zram_sys(index).join("reset");
    retry_busy(|| write_control(&path, "1")).map_err(|source| KernelSwapError::ZramReset { path, source })
}

fn zram_hot_remove(index: u32) -> Result<(), KernelSwapError> {
    let path = Path::new(ZRAM_CONTROL).join("hot_remove");
    retry_busy(|| write_control(&path, &index.to_string())).map_err(|source| KernelSwapError::ZramHotRemove {
        path,
        index,
        source,
    })
}

/// devtmpfs creates the node of a hot-added device asynchronously (and udev,
/// where it runs, may recreate it): wait until it is there.
fn wait_for_node(path: &Path) -> Result<(), KernelSwapError> {
    let start = Instant::now();
    while !path.exists() {
        if start.elapsed() > DEVICE_NODE_WAIT {
            return Err(KernelSwapError::ZramWaitDevice {
                path: path.to_path_buf(),
                waited_ms: start.elapsed().as_millis() as u64,
            });
        }
        thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Parses `comp_algorithm` (`[lzo-rle] lzo lz4`) into the algorithms offered
/// and the current one (in brackets).
fn parse_comp_algorithms(text: &str) -> (Vec<String>, Option<String>) {
    let mut current = None;
    let names = text
        .split_whitespace()
        .map(|w| {
            if let Some(inner) = w.strip_prefix('[').and_then(|w| w.strip_suffix(']')) {
                current = Some(inner.to_string());
                inner.to_string()
            } else {
                w.to_string()
            }
        })
        .collect();
    (names, current)
}

fn choose_algorithm(available: &[String], current: Option<&str>) -> Option<String> {
    PREFERRED_ZRAM_ALGORITHMS
        .iter()
        .find(|p| available.iter().any(|a| a == *p))
        .map(|p| p.to_string())
        .or_else(|| current.map(str::to_string))
}

/// The marker that ties a zram device to the run that configured it, so that
/// a later run can clean up after a crash (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
struct ZramMarker {
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
    fn new(index: u32, hot_added: bool, disksize_bytes: u64) -> ZramMarker {
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

    fn path(&self) -> PathBuf {
        marker_dir().join(format!("{ZRAM_MARKER_PREFIX}{}", self.index))
    }

    fn to_text(&self) -> String {
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

    fn parse(text: &str) -> Option<ZramMarker> {
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

    fn owner_alive(&self) -> bool {
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
fn clean_leftover_zram(tools: &Tools) -> Result<(), KernelSwapError> {
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

fn setup_file(dir: &Path, size_bytes: u64, tools: Tools) -> Result<SwapDevice, KernelSwapError> {
    // /proc/swaps lists absolute, resolved paths: use the same form.
    let dir = dir
        .canonicalize()
        .map_err(|source| KernelSwapError::CreateSwapFile {
            path: dir.to_path_buf(),
            source,
        })?;
    clean_leftover_swap_files(&dir, &tools)?;
    let seq = SWAP_FILE_SEQ.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("{SWAP_FILE_PREFIX}{}-{seq}", std::process::id()));
    let open = || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
    };
    let file = match open() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // Left by an earlier process that had our pid (its own pid is
            // alive, ours, so the sweep above kept it): remove and retry.
            remove_leftover_swap_file(&path, &tools)?;
            open()
        }
        other => other,
    }
    .map_err(|source| KernelSwapError::CreateSwapFile {
        path: path.clone(),
        source,
    })?;
    // The guard exists before the file has content: any error below deletes it.
    let dev = SwapDevice {
        backing: Backing::File,
        path,
        size_bytes,
        tools,
        torn_down: false,
    };
    allocate_swap_file(file, &dev.path, size_bytes)?;
    dev.tools.mkswap(&dev.path)?;
    dev.tools.swapon(&dev.path)?;
    Ok(dev)
}

/// Gives the file `size_bytes` of allocated blocks with no holes: swapon
/// refuses sparse files.
fn allocate_swap_file(mut file: fs::File, path: &Path, size_bytes: u64) -> Result<(), KernelSwapError> {
    let err = |source| KernelSwapError::CreateSwapFile {
        path: path.to_path_buf(),
        source,
    };
    let size = size_bytes.to_string();
    let fallocated = find_tool("fallocate")
        .ok()
        .map(|tool| run_tool(&tool, &[OsStr::new("-l"), OsStr::new(&size), path.as_os_str()]))
        .is_some_and(|r| r.is_ok());
    if !fallocated {
        // No fallocate(1), or the filesystem does not support it.
        const CHUNK: usize = 1 << 20;
        let zeros = vec![0u8; CHUNK];
        let mut left = size_bytes;
        while left > 0 {
            let n = left.min(CHUNK as u64) as usize;
            file.write_all(&zeros[..n]).map_err(err)?;
            left -= n as u64;
        }
    }
    file.sync_all().map_err(err)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(err)
}

/// Swaps off and deletes `tiermem-bench-swap-<pid>-*` files in `dir` whose
/// process is dead.
fn clean_leftover_swap_files(dir: &Path, tools: &Tools) -> Result<(), KernelSwapError> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = swap_file_owner(&name.to_string_lossy()) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        remove_leftover_swap_file(&entry.path(), tools)?;
    }
    Ok(())
}

fn remove_leftover_swap_file(path: &Path, tools: &Tools) -> Result<(), KernelSwapError> {
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

/// The pid in a swap-file name `tiermem-bench-swap-<pid>-<seq>`.
fn swap_file_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(SWAP_FILE_PREFIX)?;
    let pid = rest.split('-').next()?;
    pid.parse().ok()
}

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
            remove_cgroup_dir(&dir).map_err(|e| KernelSwapError::CleanLeftover {
                path: dir.clone(),
                detail: e.to_string(),
            })?;
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

    /// The cgroup's counters now (all zero where a file cannot be read):
    /// major faults and pages in/out from `memory.stat`, current swap usage,
    /// and the peak memory usage (v1 `memory.max_usage_in_bytes`, v2
    /// `memory.peak`). Read them after the workload exits but before the
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
        match self.version {
            CgroupVersion::V1 => CgroupStats {
                pgmajfault: v1("pgmajfault"),
                pgpgin: v1("pgpgin"),
                pgpgout: v1("pgpgout"),
                swap_bytes: v1("swap"),
                max_usage_bytes: file("memory.max_usage_in_bytes"),
            },
            CgroupVersion::V2 => CgroupStats {
                pgmajfault: get("pgmajfault").unwrap_or(0),
                pgpgin: get("pgpgin").unwrap_or(0),
                pgpgout: get("pgpgout").unwrap_or(0),
                swap_bytes: file("memory.swap.current"),
                max_usage_bytes: file("memory.peak"),
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
}

fn cgroup_dir_name(name: &str) -> Result<String, KernelSwapError> {
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
fn locate_memory_cgroup() -> Result<(PathBuf, CgroupVersion), String> {
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
fn remove_cgroup_dir(dir: &Path) -> Result<(), KernelSwapError> {
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

fn read_pids(procs: &Path) -> Vec<u32> {
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

/// System-wide swap counters from `/proc/vmstat`, in pages.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct VmstatSwap {
    /// Pages swapped in since boot.
    pub pswpin: u64,
    /// Pages swapped out since boot.
    pub pswpout: u64,
}

/// Reads the system-wide swap counters (zeros if `/proc/vmstat` is
/// unreadable). They count every process: take the difference around a run.
pub fn vmstat_swap() -> VmstatSwap {
    let kv = fs::read_to_string("/proc/vmstat")
        .map(|t| parse_key_values(&t))
        .unwrap_or_default();
    VmstatSwap {
        pswpin: kv.get("pswpin").copied().unwrap_or(0),
        pswpout: kv.get("pswpout").copied().unwrap_or(0),
    }
}

/// One line of `/proc/swaps`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ActiveSwap {
    /// Device or file path.
    pub path: PathBuf,
    /// `partition` or `file`.
    pub kind: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Bytes in use.
    pub used_bytes: u64,
    /// Priority (higher is filled first).
    pub priority: i32,
}

/// The swap areas active now, from `/proc/swaps` (empty if unreadable).
pub fn active_swaps() -> Vec<ActiveSwap> {
    fs::read(PROC_SWAPS)
        .map(|t| parse_proc_swaps(&t))
        .unwrap_or_default()
}

fn parse_proc_swaps(text: &[u8]) -> Vec<ActiveSwap> {
    text.split(|&b| b == b'\n')
        .skip(1) // header
        .filter_map(|line| {
            let mut fields = line.split(|b| b.is_ascii_whitespace()).filter(|f| !f.is_empty());
            let path = fields.next()?;
            let kind = String::from_utf8_lossy(fields.next()?).into_owned();
            let mut num = || -> Option<i64> { std::str::from_utf8(fields.next()?).ok()?.parse().ok() };
            let size_kib = num()?;
            let used_kib = num()?;
            let priority = num()?;
            // A swap file deleted while active is listed as "path\040(deleted)":
            // after unescaping that is one field ending in " (deleted)".
            let path = unescape_octal(path);
            let path = path
                .strip_suffix(b" (deleted)".as_slice())
                .map(<[u8]>::to_vec)
                .unwrap_or(path);
            Some(ActiveSwap {
                path: PathBuf::from(OsString::from_vec(path)),
                kind,
                size_bytes: size_kib.max(0) as u64 * 1024,
                used_bytes: used_kib.max(0) as u64 * 1024,
                priority: priority as i32,
            })
        })
        .collect()
}

fn is_swap_active(path: &Path) -> bool {
    active_swaps().iter().any(|s| s.path == path)
}

/// Undoes the kernel's `\ooo` escaping of paths in `/proc/swaps` and
/// `/proc/self/mountinfo`.
fn unescape_octal(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\' && i + 3 < s.len() && s[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = s[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
            out.push(v as u8);
            i += 4;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// One line of `/proc/self/mountinfo`, the parts we use.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mount {
    mount_point: PathBuf,
    fstype: String,
}

fn mounts() -> Vec<Mount> {
    fs::read("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

fn parse_mountinfo(text: &[u8]) -> Vec<Mount> {
    text.split(|&b| b == b'\n')
        .filter_map(|line| {
            let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            // id parent major:minor root mount_point options [optional...] - fstype source super
            let mount_point = fields.get(4)?;
            let sep = fields.iter().position(|f| *f == b"-")?;
            let fstype = fields.get(sep + 1)?;
            Some(Mount {
                mount_point: PathBuf::from(OsString::from_vec(unescape_octal(mount_point))),
                fstype: String::from_utf8_lossy(fstype).into_owned(),
            })
        })
        .collect()
}

/// The filesystem type holding `path` (the longest mount point that is a
/// prefix of its canonical form).
fn fstype_of(path: &Path) -> Option<String> {
    let path = path.canonicalize().ok()?;
    mounts()
        .into_iter()
        .filter(|m| path.starts_with(&m.mount_point))
        // Later mounts over the same point hide earlier ones: on equal
        // length, the last one wins.
        .fold(None::<Mount>, |best, m| match best {
            Some(b) if b.mount_point.as_os_str().len() > m.mount_point.as_os_str().len() => Some(b),
            _ => Some(m),
        })
        .map(|m| m.fstype)
}

/// Filesystems that cannot hold an active swap file.
const NO_SWAPFILE_FSTYPES: [&str; 6] = ["tmpfs", "ramfs", "overlay", "squashfs", "proc", "sysfs"];

/// Checks that this machine can run the kernel-swap baseline with `kind`:
/// root with `CAP_SYS_ADMIN`, a memory cgroup controller, mkswap/swapon/
/// swapoff, and zram (hot_add or a free `/dev/zram0`) or a directory on a
/// filesystem that can hold swap files. Returns a message naming everything
/// that is missing.
///
/// Swap areas that are already active are not an error (ours gets priority
/// [`SWAP_PRIORITY`] and is filled first), but they are reported on stderr
/// because they change the baseline once ours is full.
pub fn preflight(kind: &SwapKind) -> Result<(), String> {
    let mut missing = Vec::new();
    if let Err(reason) = check_privilege() {
        missing.push(reason);
    }
    if let Err(reason) = locate_memory_cgroup() {
        missing.push(reason);
    }
    for tool in ["mkswap", "swapon", "swapoff"] {
        if let Err(e) = find_tool(tool) {
            missing.push(e.to_string());
        }
    }
    match kind {
        SwapKind::Zram => {
            let hot_add = Path::new(ZRAM_CONTROL).join("hot_add");
            let zram0_free =
                read_u64(&zram_sys(0).join("disksize")) == Ok(0) && !is_swap_active(&zram_dev(0));
            if !hot_add.exists() && !zram0_free {
                missing.push(format!(
                    "zram: no {} (zram module not loaded?) and no free /dev/zram0",
                    hot_add.display()
                ));
            }
        }
        SwapKind::File(dir) => {
            if !dir.is_dir() {
                missing.push(format!("swap-file directory {} does not exist", dir.display()));
            } else if let Some(fstype) = fstype_of(dir).filter(|t| NO_SWAPFILE_FSTYPES.contains(&t.as_str()))
            {
                missing.push(format!(
                    "swap-file directory {} is on {fstype}, which cannot hold swap files",
                    dir.display()
                ));
            }
        }
    }
    let active = active_swaps();
    if !active.is_empty() {
        let list: Vec<String> = active
            .iter()
            .map(|s| {
                format!(
                    "{} ({}, priority {})",
                    s.path.display(),
                    fmt_bytes(s.size_bytes),
                    s.priority
                )
            })
            .collect();
        eprintln!(
            "tiermem: note: swap already active: {}; the baseline adds its own at priority {SWAP_PRIORITY}, which the kernel fills first",
            list.join(", ")
        );
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "kernel-swap baseline unavailable: {}",
            missing.join("; ")
        ))
    }
}

/// Whether we are root with `CAP_SYS_ADMIN` (swapon, swapoff and the cgroup
/// writes need both), from `/proc/self/status`.
fn check_privilege() -> Result<(), String> {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status_field(&status, "Uid:").and_then(|f| f.split_whitespace().nth(1)?.parse::<u32>().ok());
    match euid {
        Some(0) => {
            let cap_eff = status_field(&status, "CapEff:")
                .and_then(|f| u64::from_str_radix(f.trim(), 16).ok())
                .unwrap_or(0);
            if cap_eff & (1 << CAP_SYS_ADMIN_BIT) == 0 {
                return Err("root but without CAP_SYS_ADMIN (swapon needs it)".to_string());
            }
            Ok(())
        }
        Some(uid) => Err(format!("not running as root (effective uid {uid})")),
        None => Err("cannot read the effective uid from /proc/self/status".to_string()),
    }
}

fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status.lines().find_map(|l| l.strip_prefix(key))
}

fn find_tool(tool: &'static str) -> Result<PathBuf, KernelSwapError> {
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    // cargo and CI often run with a PATH that lacks the sbin directories.
    std::env::split_paths(&path_var)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .ok_or(KernelSwapError::FindTool { tool })
}

/// Runs a helper program to completion; on failure, the message names the
/// command and gives the OS error or the exit status and stderr.
fn run_tool(tool: &Path, args: &[&OsStr]) -> Result<(), String> {
    let command = || {
        let mut c = tool.display().to_string();
        for a in args {
            c.push(' ');
            c.push_str(&a.to_string_lossy());
        }
        c
    };
    let out = Command::new(tool)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{}`: {e}", command()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{}` failed ({}): {}",
            command(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Writes `value` to a sysfs/cgroupfs control file in one `write`, without
/// creating or truncating anything.
fn write_control(path: &Path, value: &str) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

fn read_trimmed(path: &Path) -> io::Result<String> {
    Ok(fs::read_to_string(path)?.trim().to_string())
}

fn read_u64(path: &Path) -> Result<u64, ()> {
    read_trimmed(path).map_err(drop)?.parse().map_err(drop)
}

/// Retries `op` while it fails with `EBUSY`, for up to [`BUSY_RETRY`].
fn retry_busy(mut op: impl FnMut() -> io::Result<()>) -> io::Result<()> {
    let deadline = Instant::now() + BUSY_RETRY;
    loop {
        match op() {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(10));
            }
            r => return r,
        }
    }
}

/// Parses `key value` lines (`memory.stat`, `/proc/vmstat`).
fn parse_key_values(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// `2.00 GiB`, `256.00 MiB`, `512 B`.
fn fmt_bytes(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b >= KIB * KIB * KIB {
        format!("{:.2} GiB", b / (KIB * KIB * KIB))
    } else if b >= KIB * KIB {
        format!("{:.2} MiB", b / (KIB * KIB))
    } else if b >= KIB {
        format!("{:.2} KiB", b / KIB)
    } else {
        format!("{bytes} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Mutex, MutexGuard, PoisonError};

    /// Tests that set up swap or cgroups run one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Environment variable that turns [`child_hog_helper`] into the
    /// memory-hungry child of [`cgroup_limit_forces_swap`].
    const HOG_ENV: &str = "TIERMEM_TEST_HOG_MIB";
    const PAGE: usize = 4096;

    /// Why the baseline with `kind` cannot be tested here, if it cannot.
    fn unavailable(kind: &SwapKind) -> Option<String> {
        preflight(kind).err()
    }

    macro_rules! skip_if {
        ($reason:expr) => {
            if let Some(reason) = $reason {
                println!("skipped: {reason}");
                return;
            }
        };
    }

    fn tmp_kind() -> SwapKind {
        SwapKind::File(std::env::temp_dir())
    }

    fn our_swaps() -> Vec<ActiveSwap> {
        active_swaps()
            .into_iter()
            .filter(|s| {
                s.path.to_string_lossy().contains(SWAP_FILE_PREFIX)
                    || s.path.to_string_lossy().starts_with("/dev/zram")
            })
            .collect()
    }

    fn dead_pid() -> u32 {
        let mut child = Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        child.wait().expect("wait true");
        pid
    }

    #[test]
    fn parses_proc_swaps_with_escaped_and_deleted_paths() {
        let text = b"Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
/dev/zram1                              partition\t262140\t\t12\t\t100\n\
/tmp/a\\040b/tiermem-bench-swap-7-0\\040(deleted) file\t65532\t\t0\t\t-2\n";
        let swaps = parse_proc_swaps(text);
        assert_eq!(swaps.len(), 2);
        assert_eq!(swaps[0].path, Path::new("/dev/zram1"));
        assert_eq!(swaps[0].kind, "partition");
        assert_eq!(swaps[0].size_bytes, 262140 * 1024);
        assert_eq!(swaps[0].used_bytes, 12 * 1024);
        assert_eq!(swaps[0].priority, 100);
        assert_eq!(swaps[1].path, Path::new("/tmp/a b/tiermem-bench-swap-7-0"));
        assert_eq!(swaps[1].priority, -2);
    }

    #[test]
    fn parses_mountinfo() {
        let text = b"22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
35 22 0:30 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
40 22 0:31 / /mnt/with\\040space rw - tmpfs tmpfs rw\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].mount_point, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(m[1].fstype, "cgroup2");
        assert_eq!(m[2].mount_point, Path::new("/mnt/with space"));
        assert_eq!(m[2].fstype, "tmpfs");
    }

    #[test]
    fn chooses_zram_algorithm() {
        let (names, current) = parse_comp_algorithms("lzo [lz4] zstd\n");
        assert_eq!(names, ["lzo", "lz4", "zstd"]);
        assert_eq!(current.as_deref(), Some("lz4"));
        assert_eq!(
            choose_algorithm(&names, current.as_deref()).as_deref(),
            Some("lz4")
        );
        let (names, current) = parse_comp_algorithms("[lzo-rle] lzo lz4");
        assert_eq!(
            choose_algorithm(&names, current.as_deref()).as_deref(),
            Some("lzo-rle")
        );
        let (names, current) = parse_comp_algorithms("[zstd] deflate");
        assert_eq!(
            choose_algorithm(&names, current.as_deref()).as_deref(),
            Some("zstd")
        );
    }

    #[test]
    fn marker_round_trips_and_names() {
        let m = ZramMarker::new(3, true, 256 << 20);
        assert_eq!(ZramMarker::parse(&m.to_text()), Some(m.clone()));
        assert!(m.owner_alive(), "we are alive");
        assert!(m.path().ends_with("tiermem-bench-zram3"));
        let dead = ZramMarker { pid: dead_pid(), ..m };
        assert!(!dead.owner_alive());
        assert_eq!(ZramMarker::parse("pid=1\n"), None);
    }

    #[test]
    fn names_and_sizes() {
        assert_eq!(cgroup_dir_name("heat").unwrap(), "tiermem-bench-heat");
        assert_eq!(cgroup_dir_name("tiermem-bench-x").unwrap(), "tiermem-bench-x");
        assert!(cgroup_dir_name("").is_err());
        assert!(cgroup_dir_name("a/b").is_err());
        assert!(cgroup_dir_name("..").is_err());
        assert_eq!(swap_file_owner("tiermem-bench-swap-1234-0"), Some(1234));
        assert_eq!(swap_file_owner("tiermem-bench-swap-x"), None);
        assert_eq!(swap_file_owner("other"), None);
        assert_eq!(fmt_bytes(2 << 30), "2.00 GiB");
        assert_eq!(fmt_bytes(256 << 20), "256.00 MiB");
        assert_eq!(fmt_bytes(100), "100 B");
        assert!(matches!(
            SwapDevice::setup(&SwapKind::Zram, 4096),
            Err(KernelSwapError::InvalidSize { .. })
        ));
        let kv = parse_key_values("pgmajfault 12\ntotal_swap 4096\nbad line x\n");
        assert_eq!(kv.get("pgmajfault"), Some(&12));
        assert_eq!(kv.get("total_swap"), Some(&4096));
        assert_eq!(kv.get("bad"), None);
    }

    #[test]
    fn proc_start_time_is_stable() {
        let pid = std::process::id();
        let t = proc_start_time(pid).expect("our own start time");
        assert_eq!(proc_start_time(pid), Some(t));
        assert_eq!(proc_start_time(dead_pid()), None);
    }

    #[test]
    fn preflight_ok_as_root() {
        let _g = serial();
        if let Err(why) = check_privilege() {
            // Unprivileged: preflight must say so rather than pass.
            let err = preflight(&SwapKind::Zram).unwrap_err();
            assert!(err.contains(&why), "{err}");
            println!("skipped: {why}");
            return;
        }
        let has_zram = Path::new(ZRAM_CONTROL).exists() || zram_sys(0).exists();
        skip_if!((!has_zram).then_some("no zram on this machine"));
        skip_if!(locate_memory_cgroup().err());
        assert_eq!(preflight(&SwapKind::Zram), Ok(()));
        match fstype_of(&std::env::temp_dir()) {
            Some(t) if NO_SWAPFILE_FSTYPES.contains(&t.as_str()) => {
                let err = preflight(&tmp_kind()).unwrap_err();
                assert!(err.contains(&t), "{err}");
            }
            _ => assert_eq!(preflight(&tmp_kind()), Ok(())),
        }
        let err = preflight(&SwapKind::File("/nonexistent/dir".into())).unwrap_err();
        assert!(err.contains("/nonexistent/dir"), "{err}");
    }

    fn zram_identity(dev: &SwapDevice) -> (u32, bool) {
        match &dev.backing {
            Backing::Zram { index, hot_added, .. } => (*index, *hot_added),
            Backing::File => panic!("{} is not zram", dev.describe()),
        }
    }

    /// Sets up zram swap of `size_bytes` and checks /proc/swaps and the marker.
    fn setup_checked_zram(size_bytes: u64) -> SwapDevice {
        let t0 = Instant::now();
        let dev = SwapDevice::setup(&SwapKind::Zram, size_bytes).expect("zram setup");
        let setup = t0.elapsed();
        let (index, hot_added) = zram_identity(&dev);
        let desc = dev.describe();
        println!("set up {desc} in {setup:?} (hot_added: {hot_added})");
        assert!(
            desc.starts_with(&format!("zram {} (", dev.path().display())),
            "{desc}"
        );
        assert!(desc.ends_with(&format!(", {})", fmt_bytes(size_bytes))), "{desc}");
        let ours = active_swaps()
            .into_iter()
            .find(|s| s.path == dev.path())
            .expect("listed in /proc/swaps");
        assert_eq!(ours.priority, SWAP_PRIORITY);
        // mkswap keeps one page for its header.
        assert_eq!(ours.size_bytes, size_bytes - PAGE as u64, "{ours:?}");
        let marker = ZramMarker::new(index, hot_added, 0).path();
        assert!(marker.exists(), "marker {} written", marker.display());
        dev
    }

    /// Removes a zram swap and checks that nothing of it is left.
    fn remove_checked_zram(dev: SwapDevice) {
        let (index, hot_added) = zram_identity(&dev);
        let path = dev.path().to_path_buf();
        let desc = dev.describe();
        let t0 = Instant::now();
        dev.remove().expect("zram teardown");
        println!("tore down {desc} in {:?}", t0.elapsed());
        assert!(!is_swap_active(&path), "still in /proc/swaps");
        let marker = ZramMarker::new(index, hot_added, 0).path();
        assert!(!marker.exists(), "marker {} left behind", marker.display());
        if hot_added {
            assert!(!zram_sys(index).exists(), "zram{index} not hot-removed");
        } else {
            assert_eq!(read_u64(&zram_sys(index).join("disksize")), Ok(0));
        }
    }

    #[test]
    fn zram_swap_setup_and_teardown() {
        let _g = serial();
        skip_if!(unavailable(&SwapKind::Zram));
        let before = our_swaps();
        let first = setup_checked_zram(256 << 20);
        // With the first one active, the second must come from hot_add.
        let second = setup_checked_zram(2 << 30);
        assert!(zram_identity(&second).1, "second device not hot-added");
        assert_ne!(first.path(), second.path());
        remove_checked_zram(second);
        remove_checked_zram(first);
        assert_eq!(our_swaps(), before);
    }

    #[test]
    fn file_swap_setup_and_teardown() {
        let _g = serial();
        skip_if!(unavailable(&tmp_kind()));
        let t0 = Instant::now();
        let dev = SwapDevice::setup(&tmp_kind(), 64 << 20).expect("swap file setup");
        let path = dev.path().to_path_buf();
        println!("set up {} in {:?}", dev.describe(), t0.elapsed());
        assert!(dev.describe().starts_with("swap file "));
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let ours = active_swaps()
            .into_iter()
            .find(|s| s.path == path)
            .expect("listed in /proc/swaps");
        assert_eq!(ours.kind, "file");
        let t1 = Instant::now();
        drop(dev);
        println!("tore down in {:?}", t1.elapsed());
        assert!(!is_swap_active(&path), "still in /proc/swaps");
        assert!(!path.exists(), "swap file deleted");
    }

    /// Runs as the child of [`cgroup_limit_forces_swap`] (a re-execution of
    /// this test binary with [`HOG_ENV`] set); a no-op in a normal test run.
    #[test]
    fn child_hog_helper() {
        let Some(mib) = std::env::var(HOG_ENV).ok().and_then(|v| v.parse::<usize>().ok()) else {
            return;
        };
        assert!(
            join_cgroup_from_env().expect("join cgroup"),
            "{CGROUP_PROCS_ENV} unset"
        );
        let mut buf = vec![0u8; mib << 20];
        for (i, page) in buf.chunks_mut(PAGE).enumerate() {
            page[0] = (i as u8) | 1;
        }
        let buf = std::hint::black_box(buf);
        // Read every page back: those swapped out come back in.
        let sum: u64 = buf.chunks(PAGE).map(|p| u64::from(p[0])).sum();
        println!("child_hog_helper: {mib} MiB touched and read back, checksum {sum}");
    }

    #[test]
    fn cgroup_limit_forces_swap() {
        let _g = serial();
        skip_if!(unavailable(&SwapKind::Zram));
        const LIMIT_MIB: u64 = 64;
        const HOG_MIB: u64 = 150;
        let swap = SwapDevice::setup(&SwapKind::Zram, 256 << 20).expect("zram setup");
        let cgroup = MemCgroup::create("unit-test", LIMIT_MIB << 20).expect("cgroup");
        let dir = cgroup.dir().to_path_buf();
        assert!(dir.ends_with("tiermem-bench-unit-test"));
        let read = |f: &str| read_trimmed(&dir.join(f)).unwrap();
        match cgroup.version() {
            CgroupVersion::V1 => {
                assert_eq!(read("memory.limit_in_bytes"), (LIMIT_MIB << 20).to_string());
                assert_eq!(read("memory.swappiness"), CGROUP_SWAPPINESS);
                // Unlimited memory+swap: the page-rounded maximum of a u64.
                assert!(read("memory.memsw.limit_in_bytes").parse::<u64>().unwrap() > 1 << 60);
            }
            CgroupVersion::V2 => {
                assert_eq!(read("memory.max"), (LIMIT_MIB << 20).to_string());
                assert_eq!(read("memory.swap.max"), "max");
            }
        }
        let before = vmstat_swap();
        let t0 = Instant::now();
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "kernel_swap::tests::child_hog_helper",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HOG_ENV, HOG_MIB.to_string())
            .env(CGROUP_PROCS_ENV, cgroup.procs_file())
            .output()
            .expect("spawn child");
        let elapsed = t0.elapsed();
        let after = vmstat_swap();
        let stats = cgroup.stats();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("child_hog_helper: 150 MiB"),
            "child did not run the hog: {stdout}"
        );
        let out_pages = after.pswpout - before.pswpout;
        let in_pages = after.pswpin - before.pswpin;
        println!(
            "{} / {LIMIT_MIB} MiB cgroup, child touched {HOG_MIB} MiB in {elapsed:?}: \
             pswpout {} -> {} (+{out_pages}), pswpin {} -> {} (+{in_pages}); cgroup {stats:?}",
            swap.describe(),
            before.pswpout,
            after.pswpout,
            before.pswpin,
            after.pswpin
        );
        let excess_pages = (HOG_MIB - LIMIT_MIB) * (1 << 20) / PAGE as u64;
        assert!(
            out_pages >= excess_pages / 2,
            "only {out_pages} pages swapped out"
        );
        assert!(in_pages > 0, "nothing swapped back in");
        assert!(stats.pgmajfault > 0, "{stats:?}");
        assert!(stats.max_usage_bytes <= LIMIT_MIB << 20, "{stats:?}");
        assert!(stats.max_usage_bytes > (LIMIT_MIB << 20) / 2, "{stats:?}");
        let swap_path = swap.path().to_path_buf();
        cgroup.remove().expect("cgroup removal");
        assert!(!dir.exists(), "cgroup directory left behind");
        let t1 = Instant::now();
        swap.remove().expect("swap teardown");
        println!("zram teardown after the run: {:?}", t1.elapsed());
        assert!(!is_swap_active(&swap_path));
    }

    #[test]
    fn drop_moves_remaining_tasks_out() {
        let _g = serial();
        skip_if!(unavailable(&SwapKind::Zram));
        let cgroup = MemCgroup::create("unit-test-tasks", 64 << 20).expect("cgroup");
        let dir = cgroup.dir().to_path_buf();
        let mut child = Command::new("sleep").arg("30").spawn().expect("spawn sleep");
        cgroup.add_pid(child.id()).expect("add_pid");
        assert_eq!(read_pids(cgroup.procs_file()), [child.id()]);
        let own = fs::read_to_string(format!("/proc/{}/cgroup", child.id())).unwrap();
        assert!(own.contains("tiermem-bench-unit-test-tasks"), "{own}");
        drop(cgroup); // the sleeper is still inside
        assert!(!dir.exists(), "cgroup directory left behind");
        let own = fs::read_to_string(format!("/proc/{}/cgroup", child.id())).unwrap();
        assert!(!own.contains("tiermem-bench"), "{own}");
        child.kill().expect("kill sleep");
        child.wait().expect("wait sleep");
    }

    #[test]
    fn leftover_cgroup_is_replaced() {
        let _g = serial();
        skip_if!(unavailable(&SwapKind::Zram));
        let (root, _) = locate_memory_cgroup().unwrap();
        let stale = root.join("tiermem-bench-unit-test-stale");
        let _ = remove_cgroup_dir(&stale);
        fs::create_dir(&stale).expect("mkdir stale cgroup");
        let mut child = Command::new("sleep").arg("30").spawn().expect("spawn sleep");
        write_control(&stale.join("cgroup.procs"), &child.id().to_string()).unwrap();
        let cgroup = MemCgroup::create("unit-test-stale", 32 << 20).expect("create over leftover");
        assert!(read_pids(cgroup.procs_file()).is_empty(), "stale task moved out");
        child.kill().expect("kill sleep");
        child.wait().expect("wait sleep");
        drop(cgroup);
        assert!(!stale.exists());
    }

    #[test]
    fn leftover_zram_is_cleaned() {
        let _g = serial();
        skip_if!(unavailable(&SwapKind::Zram));
        let before = our_swaps();
        // Held meanwhile, so that the leaked device is a hot-added one.
        let holder = SwapDevice::setup(&SwapKind::Zram, 64 << 20).expect("zram setup");
        let leaked = SwapDevice::setup(&SwapKind::Zram, 64 << 20).expect("zram setup");
        let (index, hot_added) = zram_identity(&leaked);
        assert!(hot_added);
        // Pretend the owner crashed: a dead pid in the marker, and no Drop.
        let marker = ZramMarker {
            pid: dead_pid(),
            ..ZramMarker::new(index, hot_added, leaked.size_bytes())
        };
        fs::write(marker.path(), marker.to_text()).unwrap();
        let leaked_path = leaked.path().to_path_buf();
        std::mem::forget(leaked);
        assert!(is_swap_active(&leaked_path));
        let dev = SwapDevice::setup(&SwapKind::Zram, 64 << 20).expect("setup over leftover");
        let now = our_swaps();
        assert_eq!(now.len(), before.len() + 2, "leftover still active: {now:?}");
        // hot_add hands out the lowest free number, so the new device may
        // reuse the leaked one's.
        assert!(!zram_sys(index).exists() || dev.path() == leaked_path);
        remove_checked_zram(dev);
        remove_checked_zram(holder);
        assert!(!zram_sys(index).exists());
        assert_eq!(our_swaps(), before);
    }

    #[test]
    fn leftover_swap_file_is_cleaned() {
        let _g = serial();
        skip_if!(unavailable(&tmp_kind()));
        let tools = Tools::find().unwrap();
        let dir = std::env::temp_dir().canonicalize().unwrap();
        let stale = dir.join(format!("{SWAP_FILE_PREFIX}{}-0", dead_pid()));
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&stale)
            .unwrap();
        allocate_swap_file(file, &stale, 4 << 20).unwrap();
        tools.mkswap(&stale).unwrap();
        tools.swapon(&stale).unwrap();
        assert!(is_swap_active(&stale));
        let dev = SwapDevice::setup(&tmp_kind(), 8 << 20).expect("setup over leftover");
        assert!(!is_swap_active(&stale), "leftover still active");
        assert!(!stale.exists(), "leftover not deleted");
        let path = dev.path().to_path_buf();
        drop(dev);
        assert!(!path.exists() && !is_swap_active(&path));
    }
}
