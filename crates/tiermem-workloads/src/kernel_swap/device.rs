//! [`SwapDevice`], the swap area of a run, and the kernel's swap tables (`/proc/swaps`, `/proc/vmstat`).

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use super::control::{find_tool, fmt_bytes, parse_key_values, run_tool};
use super::mounts::unescape_octal;
use super::{swap_file, zram, KernelSwapError, SwapKind, MIN_SWAP_BYTES, SWAP_PRIORITY};

const PROC_SWAPS: &str = "/proc/swaps";

/// Swap sizes are rounded up to this multiple, which is a multiple of every
/// page size Linux uses (4, 16 and 64 KiB), so the zram disk size we write is
/// the one the kernel keeps (it page-aligns) and the marker can compare it.
const SIZE_ALIGN_BYTES: u64 = 64 << 10;

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

/// What backs a [`SwapDevice`], with what its teardown must undo.
#[derive(Debug)]
pub(super) enum Backing {
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
            SwapKind::Zram => zram::setup_zram(size_bytes, tools),
            SwapKind::File(dir) => swap_file::setup_file(dir, size_bytes, tools),
        }
    }

    /// The guard of a swap area that exists but is not swapped on yet (a
    /// zram device we got, a swap file we created): from here on, dropping
    /// it removes the area.
    pub(super) fn new(backing: Backing, path: PathBuf, size_bytes: u64, tools: Tools) -> SwapDevice {
        SwapDevice {
            backing,
            path,
            size_bytes,
            tools,
            torn_down: false,
        }
    }

    /// What backs the area, for the setup to fill in.
    pub(super) fn backing_mut(&mut self) -> &mut Backing {
        &mut self.backing
    }

    /// What backs the area.
    #[cfg(test)]
    pub(super) fn backing(&self) -> &Backing {
        &self.backing
    }

    /// Writes the swap signature and swaps the area on at [`SWAP_PRIORITY`].
    pub(super) fn activate(self) -> Result<SwapDevice, KernelSwapError> {
        self.tools.mkswap(&self.path)?;
        self.tools.swapon(&self.path)?;
        Ok(self)
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
                zram::zram_reset(*index)?;
                if *hot_added {
                    // Only after the reset: an initialised device answers EBUSY.
                    zram::zram_hot_remove(*index)?;
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

    #[test]
    fn rejects_tiny_swap() {
        assert!(matches!(
            SwapDevice::setup(&SwapKind::Zram, 4096),
            Err(KernelSwapError::InvalidSize { .. })
        ));
    }
}
