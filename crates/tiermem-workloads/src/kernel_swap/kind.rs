//! What the kernel swaps to ([`SwapKind`]) and the fixed names and numbers
//! every part of the baseline uses: the lowest module, with [`super::error`].

use std::path::PathBuf;

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
