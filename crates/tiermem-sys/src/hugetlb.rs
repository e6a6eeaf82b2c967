//! Huge page pools (`/sys/kernel/mm/hugepages`).
//!
//! ```no_run
//! use tiermem_sys::hugetlb::{HugePageSize, pool};
//! let p = pool(HugePageSize::Size2M).unwrap();
//! println!("2 MiB pages: {} total, {} free", p.total, p.free);
//! ```

use crate::uapi;
use std::fmt;
use std::path::PathBuf;

/// A huge page size this library can map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HugePageSize {
    /// 2 MiB (x86-64 PMD level).
    Size2M,
    /// 1 GiB (x86-64 PUD level).
    Size1G,
}

impl HugePageSize {
    /// Size in bytes.
    pub fn bytes(self) -> usize {
        match self {
            HugePageSize::Size2M => 2 << 20,
            HugePageSize::Size1G => 1 << 30,
        }
    }

    /// The size whose byte count is `bytes`.
    pub fn from_bytes(bytes: usize) -> Option<HugePageSize> {
        match bytes {
            b if b == 2 << 20 => Some(HugePageSize::Size2M),
            b if b == 1 << 30 => Some(HugePageSize::Size1G),
            _ => None,
        }
    }

    pub(crate) fn mmap_flag(self) -> libc::c_int {
        match self {
            HugePageSize::Size2M => uapi::MAP_HUGE_2MB,
            HugePageSize::Size1G => uapi::MAP_HUGE_1GB,
        }
    }

    fn sysfs_dir(self) -> PathBuf {
        PathBuf::from(format!(
            "/sys/kernel/mm/hugepages/hugepages-{}kB",
            self.bytes() / 1024
        ))
    }
}

impl fmt::Display for HugePageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HugePageSize::Size2M => "2M",
            HugePageSize::Size1G => "1G",
        })
    }
}

/// The state of one huge page pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolInfo {
    /// Pages in the pool (`nr_hugepages`).
    pub total: u64,
    /// Pages not in use (`free_hugepages`).
    pub free: u64,
    /// Free pages already promised to mappings (`resv_hugepages`).
    pub reserved: u64,
    /// Overcommitted pages (`surplus_hugepages`).
    pub surplus: u64,
}

impl PoolInfo {
    /// Pages a new mapping can still get.
    pub fn available(&self) -> u64 {
        self.free.saturating_sub(self.reserved)
    }
}

fn read_u64(path: PathBuf) -> std::io::Result<u64> {
    let s = std::fs::read_to_string(&path)?;
    s.trim().parse().map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

/// Reads the pool of one size. Fails if the kernel has no such pool.
pub fn pool(size: HugePageSize) -> std::io::Result<PoolInfo> {
    let dir = size.sysfs_dir();
    Ok(PoolInfo {
        total: read_u64(dir.join("nr_hugepages"))?,
        free: read_u64(dir.join("free_hugepages"))?,
        reserved: read_u64(dir.join("resv_hugepages"))?,
        surplus: read_u64(dir.join("surplus_hugepages"))?,
    })
}

/// Asks the kernel for a pool of `pages` pages (needs root) and returns the
/// number it really holds afterwards, which can be fewer when memory is
/// fragmented.
pub fn set_pool_pages(size: HugePageSize, pages: u64) -> std::io::Result<u64> {
    std::fs::write(size.sysfs_dir().join("nr_hugepages"), format!("{pages}\n"))?;
    Ok(pool(size)?.total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_trip() {
        for s in [HugePageSize::Size2M, HugePageSize::Size1G] {
            assert_eq!(HugePageSize::from_bytes(s.bytes()), Some(s));
        }
        assert_eq!(HugePageSize::from_bytes(4096), None);
        assert_eq!(HugePageSize::Size2M.to_string(), "2M");
    }

    #[test]
    fn pool_of_2m_pages_is_readable() {
        let p = pool(HugePageSize::Size2M).expect("this kernel has a 2 MiB pool");
        assert!(p.free <= p.total + p.surplus);
        assert!(p.available() <= p.free);
    }
}
