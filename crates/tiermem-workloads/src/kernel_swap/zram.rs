//! zram devices: claiming zram0 or hot-adding one, compression algorithm, disk size, reset, hot-remove.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::control::{read_u64, retry_busy, write_control};
use super::error::KernelSwapError;
use super::owners::{boot_id, marker_dir, proc_start_time};
use super::swaps::{is_swap_active, Tools};

pub(super) const ZRAM_CONTROL: &str = "/sys/class/zram-control";
const SYS_BLOCK: &str = "/sys/block";

/// zram compression algorithms in order of preference: lzo-rle is the kernel
/// default and the fastest of the common ones on these machines.
const PREFERRED_ZRAM_ALGORITHMS: [&str; 3] = ["lzo-rle", "lz4", "lzo"];

/// How long we wait for `/dev/zram<N>` to appear after `hot_add`.
const DEVICE_NODE_WAIT: Duration = Duration::from_secs(5);

/// Why zram cannot be used here, if it cannot: neither `hot_add` (the zram
/// module is not loaded) nor a free `/dev/zram0`.
pub(super) fn unavailable() -> Option<String> {
    let hot_add = Path::new(ZRAM_CONTROL).join("hot_add");
    let zram0_free = read_u64(&zram_sys(0).join("disksize")) == Ok(0) && !is_swap_active(&zram_dev(0));
    (!hot_add.exists() && !zram0_free).then(|| {
        format!(
            "zram: no {} (zram module not loaded?) and no free /dev/zram0",
            hot_add.display()
        )
    })
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
pub(super) fn try_claim_zram0(size_bytes: u64) -> Result<Option<(PathBuf, String)>, KernelSwapError> {
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
pub(super) fn configure_zram(index: u32, size_bytes: u64) -> Result<String, KernelSwapError> {
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

pub(super) fn zram_sys(index: u32) -> PathBuf {
    Path::new(SYS_BLOCK).join(format!("zram{index}"))
}

pub(super) fn zram_dev(index: u32) -> PathBuf {
    PathBuf::from(format!("/dev/zram{index}"))
}

pub(super) fn zram_hot_add() -> Result<u32, KernelSwapError> {
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

pub(super) fn zram_reset(index: u32) -> Result<(), KernelSwapError> {
    let path = zram_sys(index).join("reset");
    retry_busy(|| write_control(&path, "1")).map_err(|source| KernelSwapError::ZramReset { path, source })
}

pub(super) fn zram_hot_remove(index: u32) -> Result<(), KernelSwapError> {
    let path = Path::new(ZRAM_CONTROL).join("hot_remove");
    retry_busy(|| write_control(&path, &index.to_string())).map_err(|source| KernelSwapError::ZramHotRemove {
        path,
        index,
        source,
    })
}

/// devtmpfs creates the node of a hot-added device asynchronously (and udev,
/// where it runs, may recreate it): wait until it is there.
pub(super) fn wait_for_node(path: &Path) -> Result<(), KernelSwapError> {
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

const ZRAM_MARKER_PREFIX: &str = "tiermem-bench-zram";

/// The marker that ties a zram device to the run that configured it, so that
/// a later run can clean up after a crash (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ZramMarker {
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
    pub(super) fn new(index: u32, hot_added: bool, disksize_bytes: u64) -> ZramMarker {
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

    pub(super) fn path(&self) -> PathBuf {
        marker_dir().join(format!("{ZRAM_MARKER_PREFIX}{}", self.index))
    }

    pub(super) fn to_text(&self) -> String {
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

    pub(super) fn parse(text: &str) -> Option<ZramMarker> {
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

    /// The same marker with another owner.
    #[cfg(test)]
    pub(super) fn owned_by(self, pid: u32) -> ZramMarker {
        ZramMarker { pid, ..self }
    }

    pub(super) fn owner_alive(&self) -> bool {
        proc_start_time(self.pid) == Some(self.start_time)
    }
}

/// Removes zram devices whose marker names a dead owner of this boot.
pub(super) fn clean_leftover_zram(tools: &Tools) -> Result<(), KernelSwapError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel_swap::tests::dead_pid;

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
        let dead = m.owned_by(dead_pid());
        assert!(!dead.owner_alive());
        assert_eq!(ZramMarker::parse("pid=1\n"), None);
    }
}
