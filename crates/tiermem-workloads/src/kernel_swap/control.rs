//! Shared I/O helpers: control files, `EBUSY` retries, helper programs, `key value` parsing.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::error::KernelSwapError;

/// How long `EBUSY` from zram `reset`/`hot_remove`/`disksize` or cgroup
/// `rmdir` is retried before giving up.
pub(super) const BUSY_RETRY: Duration = Duration::from_secs(5);

pub(super) fn find_tool(tool: &'static str) -> Result<PathBuf, KernelSwapError> {
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
pub(super) fn run_tool(tool: &Path, args: &[&OsStr]) -> Result<(), String> {
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
pub(super) fn write_control(path: &Path, value: &str) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

pub(super) fn read_trimmed(path: &Path) -> io::Result<String> {
    Ok(fs::read_to_string(path)?.trim().to_string())
}

pub(super) fn read_u64(path: &Path) -> Result<u64, ()> {
    read_trimmed(path).map_err(drop)?.parse().map_err(drop)
}

/// Retries `op` while it fails with `EBUSY`, for up to [`BUSY_RETRY`].
pub(super) fn retry_busy(mut op: impl FnMut() -> io::Result<()>) -> io::Result<()> {
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
pub(super) fn parse_key_values(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// `2.00 GiB`, `256.00 MiB`, `512 B`.
pub(super) fn fmt_bytes(bytes: u64) -> String {
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

    #[test]
    fn parses_key_values_and_formats_bytes() {
        let kv = parse_key_values("pgmajfault 12\ntotal_swap 4096\nbad line x\n");
        assert_eq!(kv.get("pgmajfault"), Some(&12));
        assert_eq!(kv.get("total_swap"), Some(&4096));
        assert_eq!(kv.get("bad"), None);
        assert_eq!(fmt_bytes(2 << 30), "2.00 GiB");
        assert_eq!(fmt_bytes(256 << 20), "256.00 MiB");
        assert_eq!(fmt_bytes(100), "100 B");
    }
}
