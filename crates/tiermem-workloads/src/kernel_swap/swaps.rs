//! The kernel's swap tables (`/proc/swaps`, `/proc/vmstat`) and the helper
//! programs that turn swap areas on and off ([`Tools`]).

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use super::control::{find_tool, parse_key_values, run_tool};
use super::error::KernelSwapError;
use super::kind::SWAP_PRIORITY;
use super::mounts::unescape_octal;

const PROC_SWAPS: &str = "/proc/swaps";

/// The helper programs a swap device needs, found once at setup.
#[derive(Clone, Debug)]
pub(super) struct Tools {
    mkswap: PathBuf,
    swapon: PathBuf,
    swapoff: PathBuf,
}

impl Tools {
    pub(super) fn find() -> Result<Tools, KernelSwapError> {
        Ok(Tools {
            mkswap: find_tool("mkswap")?,
            swapon: find_tool("swapon")?,
            swapoff: find_tool("swapoff")?,
        })
    }

    pub(super) fn mkswap(&self, path: &Path) -> Result<(), KernelSwapError> {
        run_tool(&self.mkswap, &[path.as_os_str()]).map_err(|detail| KernelSwapError::Mkswap {
            path: path.to_path_buf(),
            detail,
        })
    }

    pub(super) fn swapon(&self, path: &Path) -> Result<(), KernelSwapError> {
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
    pub(super) fn swapoff_if_active(&self, path: &Path) -> Result<(), KernelSwapError> {
        if !is_swap_active(path) {
            return Ok(());
        }
        run_tool(&self.swapoff, &[path.as_os_str()]).map_err(|detail| KernelSwapError::Swapoff {
            path: path.to_path_buf(),
            detail,
        })
    }
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

pub(super) fn parse_proc_swaps(text: &[u8]) -> Vec<ActiveSwap> {
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

pub(super) fn is_swap_active(path: &Path) -> bool {
    active_swaps().iter().any(|s| s.path == path)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
