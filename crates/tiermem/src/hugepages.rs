//! Huge page pools: what the kernel holds, growing and shrinking them, and
//! the static reservation at start-up that paper 3 uses for OpenMP programs
//! (`TIERMEM_HUGEPAGES=2M:512,1G:2`, or [`Config::reserve_huge_pages`]).
//!
//! hugetlb pages come only from these pools: a 2 MiB tiered region needs
//! its near budget there, a segment its whole size. Changing a pool needs
//! root; the kernel may hold fewer pages than asked when memory is
//! fragmented, so every change reports what it really got.
//!
//! ```no_run
//! use tiermem::hugepages::{self, PoolRequest};
//! let change = hugepages::reserve(&"2M:64".parse::<PoolRequest>().unwrap()).unwrap();
//! println!("{change}");
//! ```
//!
//! [`Config::reserve_huge_pages`]: crate::Config::reserve_huge_pages

pub use crate::pool_request::{parse_requests, PoolRequest};
use crate::Error;
use std::fmt;
use std::sync::OnceLock;
pub use tiermem_sys::hugetlb::{HugePageSize, PoolInfo};
use tiermem_sys::Errno;

/// Both pool sizes, smaller first.
pub const SIZES: [HugePageSize; 2] = [HugePageSize::Size2M, HugePageSize::Size1G];

/// The sysfs file that sets the pool of `size` ("2M" or "1G").
pub fn nr_path(size: &str) -> String {
    let kb = match size {
        "1G" => 1 << 20,
        _ => 2048,
    };
    format!("/sys/kernel/mm/hugepages/hugepages-{kb}kB/nr_hugepages")
}

/// Whether transparent huge pages can be used: THP is not disabled
/// outright (`[never]` in `/sys/kernel/mm/transparent_hugepage/enabled`);
/// `madvise` is enough, regions advise themselves.
pub fn thp_enabled() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .map(|s| !s.contains("[never]"))
        .unwrap_or(false)
}

/// The state of the pool of `size`; an empty pool if the kernel has none.
pub fn pool(size: HugePageSize) -> PoolInfo {
    tiermem_sys::hugetlb::pool(size).unwrap_or_default()
}

/// Fails with a message naming the command that fixes it unless `need`
/// pages of `size` are available (free and not promised to a mapping).
pub fn check_available(size: HugePageSize, need: u64, purpose: &'static str) -> Result<(), Error> {
    let p = pool(size);
    if p.available() >= need {
        return Ok(());
    }
    // No pool can help: do not suggest reserving more than the machine has.
    let mem_total = mem_total_bytes();
    if mem_total > 0 && need > mem_total / size.bytes() as u64 {
        return Err(Error::Usage(format!(
            "{purpose} needs {need} huge pages of {}, more than this machine's memory \
             (MemTotal {} MiB)",
            size_name(size),
            mem_total >> 20
        )));
    }
    Err(Error::HugePages {
        size: size_name(size),
        purpose,
        need,
        available: p.available(),
        suggest: p.total + (need - p.available()),
    })
}

fn size_name(size: HugePageSize) -> &'static str {
    match size {
        HugePageSize::Size2M => "2M",
        HugePageSize::Size1G => "1G",
    }
}

/// What a pool change did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolChange {
    /// Page size.
    pub size: HugePageSize,
    /// The pool before.
    pub before: PoolInfo,
    /// The pool size asked of the kernel.
    pub target: u64,
    /// The pool after.
    pub after: PoolInfo,
}

impl PoolChange {
    /// Whether the kernel holds the pool size asked for.
    pub fn complete(&self) -> bool {
        self.after.total == self.target
    }
}

impl fmt::Display for PoolChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: pool {} -> {} pages (asked {}), {} available",
            self.size,
            self.before.total,
            self.after.total,
            self.target,
            self.after.available()
        )?;
        if !self.complete() {
            write!(
                f,
                "; the kernel gave {} fewer than asked (memory fragmented or in use: \
                 try again early after boot, or `echo 1 > /proc/sys/vm/compact_memory` first)",
                self.target.abs_diff(self.after.total)
            )?;
        }
        Ok(())
    }
}

/// Sets the pool of `size` to `target` pages and reports what the kernel
/// really holds afterwards.
pub fn set_pool(size: HugePageSize, target: u64) -> Result<PoolChange, Error> {
    let before = pool(size);
    tiermem_sys::hugetlb::set_pool_pages(size, target).map_err(|e| Error::Sys {
        what: "setting a huge page pool (needs root)",
        errno: Errno(e.raw_os_error().unwrap_or(libc::EIO)),
    })?;
    Ok(PoolChange {
        size,
        before,
        target,
        after: pool(size),
    })
}

/// Makes `req.pages` pages available (free and unpromised) beyond what is
/// already used, growing the pool as needed; never shrinks it.
///
/// A pool larger than the machine's memory is refused before the pool is
/// touched: the kernel would otherwise turn all free memory into huge pages
/// (and keep them) before reporting that it fell short.
pub fn reserve(req: &PoolRequest) -> Result<PoolChange, Error> {
    let p = pool(req.size);
    let target = p.total.saturating_add(req.pages.saturating_sub(p.available()));
    let mem_total = mem_total_bytes();
    let most = mem_total / req.size.bytes() as u64;
    if mem_total > 0 && target > most {
        return Err(Error::Usage(format!(
            "{req}: a pool of {target} pages of {} is more than this machine's memory \
             (MemTotal {} MiB holds at most {most}); the pool was left at {} pages",
            req.size,
            mem_total >> 20,
            p.total
        )));
    }
    set_pool(req.size, target)
}

/// MemTotal from /proc/meminfo in bytes (0 if unreadable).
fn mem_total_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// Gives `pages` free pages back to the kernel (all free ones for None).
/// Pages in use or promised to mappings stay.
pub fn release(size: HugePageSize, pages: Option<u64>) -> Result<PoolChange, Error> {
    let p = pool(size);
    let give = pages.unwrap_or(u64::MAX).min(p.available());
    set_pool(size, p.total - give)
}

/// Applies a static reservation once per process: the first call reserves
/// `requests` (or, if empty, those of `TIERMEM_HUGEPAGES`), later calls do
/// nothing and return the first outcome. A failure is returned so the
/// caller can report it; the reservation is not retried.
pub fn reserve_static(requests: &[PoolRequest]) -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let from_env;
        let requests = if requests.is_empty() {
            let var = &crate::config::options::HUGEPAGES;
            from_env = match var.value() {
                Some(v) => parse_requests(&v).map_err(|e| format!("{}: {e}", var.var))?,
                None => Vec::new(),
            };
            &from_env[..]
        } else {
            requests
        };
        for r in requests {
            let c = reserve(r).map_err(|e| {
                format!(
                    "static huge page pool {r}: {e}; reserve it beforehand with `tiermem hugepages reserve {r}`"
                )
            })?;
            if crate::config::verbose_from_env() || !c.complete() {
                eprintln!("tiermem: static huge page pool: {c}");
            }
        }
        Ok(())
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortage_names_the_fix() {
        let p = pool(HugePageSize::Size1G);
        let e = check_available(HugePageSize::Size1G, p.available() + 3, "a segment").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("tiermem hugepages reserve 1G:{}", p.total + 3)),
            "{msg}"
        );
        assert!(msg.contains("hugepages-1048576kB/nr_hugepages"), "{msg}");
        assert_eq!(e.code(), crate::ErrorCode::HugePages);
    }
}
