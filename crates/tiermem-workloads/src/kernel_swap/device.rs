//! [`SwapDevice`], the swap area of a run, and the kernel's swap tables (`/proc/swaps`, `/proc/vmstat`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::control::fmt_bytes;
use super::error::KernelSwapError;
use super::kind::{SwapKind, MIN_SWAP_BYTES};
use super::swap_file;
use super::swaps::Tools;
use super::zram::{
    self, clean_leftover_zram, configure_zram, try_claim_zram0, wait_for_node, zram_dev, zram_hot_add,
    ZramMarker,
};

/// Swap sizes are rounded up to this multiple, which is a multiple of every
/// page size Linux uses (4, 16 and 64 KiB), so the zram disk size we write is
/// the one the kernel keeps (it page-aligns) and the marker can compare it.
const SIZE_ALIGN_BYTES: u64 = 64 << 10;

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
            SwapKind::Zram => setup_zram(size_bytes, tools),
            SwapKind::File(dir) => setup_file(dir, size_bytes, tools),
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

/// Sets up zram swap: `/dev/zram0` if it is free, else a hot-added device.
fn setup_zram(size_bytes: u64, tools: Tools) -> Result<SwapDevice, KernelSwapError> {
    clean_leftover_zram(&tools)?;
    let zram = |index, hot_added, algorithm, marker| {
        let backing = Backing::Zram {
            index,
            hot_added,
            algorithm,
            marker,
        };
        SwapDevice::new(backing, zram_dev(index), size_bytes, tools.clone())
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
        if let Backing::Zram { marker, .. } = dev.backing_mut() {
            *marker = Some(marker_path);
        }
        wait_for_node(dev.path())?;
        let chosen = configure_zram(index, size_bytes)?;
        if let Backing::Zram { algorithm, .. } = dev.backing_mut() {
            *algorithm = chosen;
        }
        dev
    };
    dev.activate()
}

/// Sets up a swap file in `dir`.
fn setup_file(dir: &Path, size_bytes: u64, tools: Tools) -> Result<SwapDevice, KernelSwapError> {
    let (path, file) = swap_file::create_swap_file(dir, &tools)?;
    // The guard exists before the file has content: any error below deletes it.
    let dev = SwapDevice::new(Backing::File, path, size_bytes, tools);
    swap_file::allocate_swap_file(file, dev.path(), size_bytes)?;
    dev.activate()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_tiny_swap() {
        assert!(matches!(
            SwapDevice::setup(&SwapKind::Zram, 4096),
            Err(KernelSwapError::InvalidSize { .. })
        ));
    }
}
