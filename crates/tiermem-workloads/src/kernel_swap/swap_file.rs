//! Swap files: naming, allocating without holes, and the filesystems that cannot hold one.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::control::{find_tool, run_tool};
use super::error::KernelSwapError;
use super::mounts::fstype_of;
use super::owners::{owner_pid, pid_alive};
use super::swaps::Tools;

pub(super) const SWAP_FILE_PREFIX: &str = "tiermem-bench-swap-";

/// Sequence number making swap-file names unique within one process.
/// Relaxed: only the uniqueness of the values matters, nothing is published.
static SWAP_FILE_SEQ: AtomicU64 = AtomicU64::new(0);

/// Creates an empty swap file `tiermem-bench-swap-<pid>-<seq>` in `dir`
/// (absolute, resolved), after removing those of dead runs.
pub(super) fn create_swap_file(dir: &Path, tools: &Tools) -> Result<(PathBuf, File), KernelSwapError> {
    // /proc/swaps lists absolute, resolved paths: use the same form.
    let dir = dir
        .canonicalize()
        .map_err(|source| KernelSwapError::CreateSwapFile {
            path: dir.to_path_buf(),
            source,
        })?;
    clean_leftover_swap_files(&dir, tools)?;
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
            remove_leftover_swap_file(&path, tools)?;
            open()
        }
        other => other,
    }
    .map_err(|source| KernelSwapError::CreateSwapFile {
        path: path.clone(),
        source,
    })?;
    Ok((path, file))
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

/// Gives the file `size_bytes` of allocated blocks with no holes: swapon
/// refuses sparse files.
pub(super) fn allocate_swap_file(
    mut file: fs::File,
    path: &Path,
    size_bytes: u64,
) -> Result<(), KernelSwapError> {
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

/// Filesystems that cannot hold an active swap file.
pub(super) const NO_SWAPFILE_FSTYPES: [&str; 6] = ["tmpfs", "ramfs", "overlay", "squashfs", "proc", "sysfs"];

/// Why `dir` cannot hold our swap file, if it cannot: it does not exist, or
/// its filesystem cannot hold swap files.
pub(super) fn unavailable(dir: &Path) -> Option<String> {
    if !dir.is_dir() {
        return Some(format!("swap-file directory {} does not exist", dir.display()));
    }
    let fstype = fstype_of(dir).filter(|t| NO_SWAPFILE_FSTYPES.contains(&t.as_str()))?;
    Some(format!(
        "swap-file directory {} is on {fstype}, which cannot hold swap files",
        dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_directory_cannot_hold_swap() {
        assert!(
            unavailable(Path::new("/nonexistent/dir")).is_some_and(|why| why.contains("/nonexistent/dir"))
        );
    }
}
