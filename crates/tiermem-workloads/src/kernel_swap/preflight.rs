//! [`preflight`]: whether this machine can run the baseline, and why not.

use std::fs;

use super::control::{find_tool, fmt_bytes};
use super::kind::{SwapKind, SWAP_PRIORITY};
use super::swaps::active_swaps;
use super::{cgroup, swap_file, zram};

/// Capability bit of `CAP_SYS_ADMIN` in `/proc/self/status` `CapEff`;
/// swapon, swapoff and the cgroup writes need it.
const CAP_SYS_ADMIN_BIT: u32 = 21;

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
    missing_for(kind).map_err(|missing| format!("kernel-swap baseline unavailable: {}", missing.join("; ")))
}

/// The checks of [`preflight`]: one reason for each thing that is missing.
pub(super) fn missing_for(kind: &SwapKind) -> Result<(), Vec<String>> {
    let mut missing = Vec::new();
    if let Err(reason) = check_privilege() {
        missing.push(reason);
    }
    if let Err(reason) = cgroup::locate_memory_cgroup() {
        missing.push(reason);
    }
    for tool in ["mkswap", "swapon", "swapoff"] {
        if let Err(e) = find_tool(tool) {
            missing.push(e.to_string());
        }
    }
    let kind_missing = match kind {
        SwapKind::Zram => zram::unavailable(),
        SwapKind::File(dir) => swap_file::unavailable(dir),
    };
    missing.extend(kind_missing);
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
        Err(missing)
    }
}

/// Whether we are root with `CAP_SYS_ADMIN` (swapon, swapoff and the cgroup
/// writes need both), from `/proc/self/status`.
pub(super) fn check_privilege() -> Result<(), String> {
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
