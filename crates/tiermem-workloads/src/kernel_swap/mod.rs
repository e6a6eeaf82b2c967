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
//! # Running a command line under a limit
//!
//! [`LimitedRun`] does the whole baseline for any program, including
//! unmodified external ones: it checks the machine ([`preflight`]), sets up
//! the swap area and the cgroup, starts the program already inside the cgroup
//! (it joins between `fork` and `exec`, so its whole footprint counts), waits
//! for it, collects the counters and removes everything again, on errors too.
//!
//! ```no_run
//! use std::process::Command;
//! use tiermem_workloads::kernel_swap::{LimitedRun, Stream, SwapKind};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let baseline = LimitedRun::new(SwapKind::Zram, 512 << 20) // the near budget
//!     .swap_bytes(2 << 30)
//!     .stdout(Stream::Capture);
//! match baseline.run(Command::new("./cg.B").env("OMP_NUM_THREADS", "1")) {
//!     Ok(run) => println!(
//!         "{}; verified: {}",
//!         run.summary(),
//!         run.stdout_text().contains("VERIFICATION SUCCESSFUL")
//!     ),
//!     Err(e) if e.is_unavailable() => eprintln!("kernel-swap baseline skipped: {e}"),
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # The building blocks
//!
//! `tiermem bench` uses the pieces directly: its child re-executes the
//! benchmark binary, which joins the cgroup itself with
//! [`join_cgroup_from_env`] before it allocates ([`MemCgroup::add_before_exec`]
//! is the alternative that joins before `exec`).
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
//! # Layout
//!
//! Each file uses only the ones listed below it:
//! - `run.rs`: [`LimitedRun`], [`RunOutcome`], [`Stream`], and the sweep of
//!   dead runs' cgroups;
//! - `preflight.rs`: [`preflight`];
//! - `device.rs`: [`SwapDevice`], set up on zram or a swap file, torn down;
//! - `cgroup.rs`: [`MemCgroup`] (v1 and v2), [`CgroupStats`],
//!   [`join_cgroup_from_env`];
//! - `zram.rs` and `swap_file.rs`: the two kinds of swap area, each with the
//!   removal of what crashed runs left of it (see below);
//! - `swaps.rs`: `/proc/swaps` ([`active_swaps`]), the swap counters of
//!   `/proc/vmstat` ([`vmstat_swap`]), mkswap/swapon/swapoff;
//! - `owners.rs`: the owner pid in a name, whether it is alive, markers' place;
//! - `mounts.rs`: `/proc/self/mountinfo`, filesystem types, `\ooo` unescaping;
//! - `control.rs`: control-file I/O, `EBUSY` retries, helper programs;
//! - `kind.rs`: [`SwapKind`] and the fixed names and numbers;
//! - `error.rs`: [`KernelSwapError`].
//!
//! # Leftovers from crashed runs
//!
//! Everything this module creates is named with the prefix `tiermem-bench`, so
//! that a later run can find what a crashed one left behind and remove it
//! before it sets up its own:
//! - cgroups are directories `tiermem-bench-<name>` at the root of the memory
//!   hierarchy; [`MemCgroup::create`] removes an existing one of the same name
//!   (moving its tasks to the parent first), and [`LimitedRun`], whose
//!   cgroups are `tiermem-bench-run-<pid>-<seq>`, removes those whose
//!   process is dead;
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

mod cgroup;
mod control;
mod device;
mod error;
mod kind;
mod mounts;
mod owners;
mod preflight;
mod run;
mod swap_file;
mod swaps;
#[cfg(test)]
mod tests;
mod zram;

pub use cgroup::{join_cgroup_from_env, CgroupStats, CgroupVersion, MemCgroup};
pub use device::SwapDevice;
pub use error::KernelSwapError;
pub use kind::{SwapKind, CGROUP_PROCS_ENV, MIN_SWAP_BYTES, NAME_PREFIX, SWAP_PRIORITY};
pub use preflight::preflight;
pub use run::{LimitedRun, RunOutcome, Stream, DEFAULT_RUN_SWAP_BYTES, MIN_LIMIT_BYTES};
pub use swaps::{active_swaps, vmstat_swap, ActiveSwap, VmstatSwap};

/// Removes what killed runs left behind: the cgroups of `tiermem bench`
/// and [`LimitedRun`] whose process is dead. (Swap files and zram devices
/// of dead runs are removed by [`SwapDevice::setup`].)
pub fn clean_leftovers() -> Result<(), KernelSwapError> {
    run::clean_leftover_run_cgroups()
}
