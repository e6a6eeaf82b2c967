//! `PAGEMAP_SCAN` on `/proc/self/pagemap` (Linux 6.7+): find written,
//! present or zero-page ptes of a range in one call, and optionally
//! write-protect the matches atomically (for `UFFD_FEATURE_WP_ASYNC`).
//!
//! ```no_run
//! use tiermem_sys::pagemap::{Categories, PagemapScanner, ScanRequest, PageRegion};
//! # let (addr, len) = (0usize, 0usize);
//! let scanner = PagemapScanner::open().unwrap();
//! let mut out = [PageRegion::default(); 16];
//! let req = ScanRequest::new(addr, addr + len).require(Categories::WRITTEN);
//! let found = scanner.scan(&req, &mut out).unwrap();
//! ```

use crate::errno::{check, Errno};
use crate::uapi;
use bitflags::bitflags;
use std::os::fd::{AsRawFd, OwnedFd};

bitflags! {
    /// `PAGE_IS_*` categories.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct Categories: u64 {
        /// Async write protection is possible here.
        const WPALLOWED = 1 << 0;
        /// Written since write-protected (no uffd-wp bit).
        const WRITTEN = 1 << 1;
        /// File backed.
        const FILE = 1 << 2;
        /// Present in memory.
        const PRESENT = 1 << 3;
        /// Swapped out.
        const SWAPPED = 1 << 4;
        /// Maps the zero page.
        const PFNZERO = 1 << 5;
        /// THP or hugetlb.
        const HUGE = 1 << 6;
        /// Soft-dirty.
        const SOFT_DIRTY = 1 << 7;
        /// Every category above (the kernel rejects unknown bits in masks).
        const KNOWN = 0xff;
        const _ = !0;
    }
}

bitflags! {
    /// `PM_SCAN_*` flags.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct ScanFlags: u64 {
        /// Write-protect the matching pages atomically with reporting them.
        const WP_MATCHING = 1 << 0;
        /// Abort on pages without async write protection.
        const CHECK_WPASYNC = 1 << 1;
    }
}

/// One run of pages with the same categories.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageRegion {
    /// Start address.
    pub start: usize,
    /// End address (exclusive).
    pub end: usize,
    /// Categories of the run (masked by the request's return mask).
    pub categories: Categories,
}

/// What to scan for: a page matches when all of `mask` (after inverting the
/// `inverted` bits) holds and, if `anyof` is non-empty, one of `anyof` does.
#[derive(Clone, Copy, Debug)]
pub struct ScanRequest {
    start: usize,
    end: usize,
    flags: ScanFlags,
    inverted: Categories,
    mask: Categories,
    anyof: Categories,
    ret: Categories,
    max_pages: u64,
}

impl ScanRequest {
    /// Scan `[start, end)`, reporting every page (no filter yet).
    pub fn new(start: usize, end: usize) -> ScanRequest {
        ScanRequest {
            start,
            end,
            flags: ScanFlags::empty(),
            inverted: Categories::empty(),
            mask: Categories::empty(),
            anyof: Categories::empty(),
            ret: Categories::KNOWN,
            max_pages: 0,
        }
    }
    /// Pages must have all of `c`.
    pub fn require(mut self, c: Categories) -> Self {
        self.mask |= c;
        self
    }
    /// Pages must lack all of `c`.
    pub fn exclude(mut self, c: Categories) -> Self {
        self.mask |= c;
        self.inverted |= c;
        self
    }
    /// Pages must have one of `c`.
    pub fn any_of(mut self, c: Categories) -> Self {
        self.anyof |= c;
        self
    }
    /// Report only these categories.
    pub fn report(mut self, c: Categories) -> Self {
        self.ret = c;
        self
    }
    /// Scan flags.
    pub fn flags(mut self, f: ScanFlags) -> Self {
        self.flags = f;
        self
    }
    /// Stop after this many matching pages.
    pub fn max_pages(mut self, n: u64) -> Self {
        self.max_pages = n;
        self
    }
}

/// The result of a scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanResult {
    /// Entries of the output filled.
    pub regions: usize,
    /// Where the walk stopped (== end when the range was fully walked).
    pub walk_end: usize,
}

/// An open `/proc/self/pagemap` for `PAGEMAP_SCAN`.
#[derive(Debug)]
pub struct PagemapScanner {
    fd: OwnedFd,
}

impl PagemapScanner {
    /// Opens `/proc/self/pagemap`.
    pub fn open() -> std::io::Result<PagemapScanner> {
        let f = std::fs::File::open("/proc/self/pagemap")?;
        Ok(PagemapScanner { fd: f.into() })
    }

    /// Whether this kernel has `PAGEMAP_SCAN`.
    pub fn supported() -> bool {
        let Ok(s) = Self::open() else { return false };
        let probe = [0u64; 1];
        let a = probe.as_ptr() as usize & !4095;
        let mut out = [PageRegion::default(); 1];
        s.scan(&ScanRequest::new(a, a + 4096), &mut out).is_ok()
    }

    /// Runs one scan, filling `out` (which bounds the number of runs found;
    /// the walk stops early when it is full: see `walk_end`).
    pub fn scan(&self, req: &ScanRequest, out: &mut [PageRegion]) -> Result<ScanResult, Errno> {
        let mut raw = [uapi::PageRegionRaw::default(); 64];
        let cap = out.len().min(raw.len());
        let mut arg = uapi::PmScanArg {
            size: std::mem::size_of::<uapi::PmScanArg>() as u64,
            flags: req.flags.bits(),
            start: req.start as u64,
            end: req.end as u64,
            walk_end: 0,
            vec: raw.as_mut_ptr() as u64,
            vec_len: cap as u64,
            max_pages: req.max_pages,
            category_inverted: req.inverted.bits(),
            category_mask: req.mask.bits(),
            category_anyof_mask: req.anyof.bits(),
            return_mask: req.ret.bits(),
        };
        // SAFETY: arg and the output vector are ours and sized as declared;
        // the kernel writes at most vec_len entries.
        let n =
            check(unsafe { libc::ioctl(self.fd.as_raw_fd(), uapi::PAGEMAP_SCAN as _, &mut arg) })? as usize;
        for (o, r) in out.iter_mut().zip(&raw[..n]) {
            *o = PageRegion {
                start: r.start as usize,
                end: r.end as usize,
                categories: Categories::from_bits_retain(r.categories),
            };
        }
        Ok(ScanResult {
            regions: n,
            walk_end: arg.walk_end as usize,
        })
    }
}

/// Whether the page at `addr` is present and mapped by this process alone
/// (`/proc/self/pagemap`'s exclusive bit): false for a page shared
/// copy-on-write with a `fork()`ed child, which `UFFDIO_MOVE` refuses with
/// the same EBUSY as a pinned page (a page pinned for writing is never
/// shared: the pin unshares it first). None when the entry cannot be read.
/// Async-signal-safe (no allocation) and no cancellation point (raw
/// system calls, never trapped): evictions run in fault handlers, where a
/// pending deferred cancellation would otherwise unwind the thread with
/// the page it serves still busy.
pub fn mapped_exclusively(addr: usize) -> Option<bool> {
    const PRESENT: u64 = 1 << 63;
    const EXCLUSIVE: u64 = 1 << 56;
    let path = c"/proc/self/pagemap";
    // SAFETY: a constant NUL-terminated path; the descriptor is closed below.
    let fd = unsafe {
        crate::trampoline::untrapped_syscall(
            libc::SYS_openat,
            [
                libc::AT_FDCWD as u64,
                path.as_ptr() as u64,
                (libc::O_RDONLY | libc::O_CLOEXEC) as u64,
                0,
                0,
                0,
            ],
        )
    };
    if fd < 0 {
        return None;
    }
    let mut entry = 0u64;
    let at = (addr / 4096 * 8) as u64;
    // SAFETY: reads 8 bytes into a u64 we own.
    let n = unsafe {
        crate::trampoline::untrapped_syscall(
            libc::SYS_pread64,
            [fd as u64, &mut entry as *mut u64 as u64, 8, at, 0, 0],
        )
    };
    // SAFETY: our descriptor, closed once.
    unsafe { crate::trampoline::untrapped_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]) };
    (n == 8).then_some(entry & PRESENT != 0 && entry & EXCLUSIVE != 0)
}

/// Bytes of the mapping containing `addr` that are backed by transparent
/// huge pages (`AnonHugePages` in `/proc/self/smaps`); None if no mapping
/// contains `addr`.
pub fn anon_huge_bytes(addr: usize) -> std::io::Result<Option<u64>> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                inside = (a..b).contains(&addr);
                continue;
            }
        }
        if inside {
            if let Some(kb) = line.strip_prefix("AnonHugePages:") {
                let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                return Ok(Some(kb * 1024));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::{MapOptions, Mapping};

    #[test]
    fn a_page_is_exclusive_until_a_fork_shares_it() {
        let (m, _) = Mapping::anonymous(2 * 4096, &MapOptions::default()).unwrap();
        let p = m.addr() as *mut u8;
        // SAFETY: the mapping is ours and two pages long.
        unsafe { p.write_volatile(1) };
        assert_eq!(mapped_exclusively(m.addr()), Some(true), "written: ours alone");
        assert_eq!(
            mapped_exclusively(m.addr() + 4096),
            Some(false),
            "never touched: not present"
        );
        // SAFETY: the child only sleeps and exits.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: plain calls in the child, which then exits.
            unsafe {
                libc::sleep(2);
                libc::_exit(0);
            }
        }
        assert!(child > 0);
        let shared = mapped_exclusively(m.addr());
        // SAFETY: the child we forked.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        assert_eq!(shared, Some(false), "shared copy-on-write with a live child");
    }

    #[test]
    fn scan_reports_present_and_zero_pages() {
        let (m, _) = Mapping::anonymous(8 * 4096, &MapOptions::default()).unwrap();
        m.fill(4096, 4096, 1); // page 1 present
        let mut z = [0u8; 1];
        m.copy_out(3 * 4096, &mut z); // page 3 maps the zero page
        assert_eq!(std::hint::black_box(z)[0], 0); // keeps the read in optimised builds
        let s = PagemapScanner::open().unwrap();
        let mut out = [PageRegion::default(); 8];
        let r = s
            .scan(
                &ScanRequest::new(m.addr(), m.addr() + m.len()).require(Categories::PRESENT),
                &mut out,
            )
            .unwrap();
        assert_eq!(r.walk_end, m.addr() + m.len());
        let found: Vec<_> = out[..r.regions]
            .iter()
            .map(|p| (p.start - m.addr()) / 4096)
            .collect();
        assert_eq!(found, vec![1, 3], "{:?}", &out[..r.regions]);
        assert!(out[1].categories.contains(Categories::PFNZERO));
        assert!(!out[0].categories.contains(Categories::PFNZERO));
        assert!(PagemapScanner::supported());
    }
}
