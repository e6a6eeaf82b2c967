//! Segment regions: tiermem's form of paper 4's segmentation on x86-64,
//! where long mode cannot turn paging off. A segment is one contiguous
//! range backed by 1 GiB hugetlb pages (one TLB entry covers a gigabyte, and
//! a page walk is two levels instead of four), populated and `mlock`ed when
//! it is created, and never tiered, remapped or faulted afterwards: the
//! application's cores take no page faults on it and no memory service
//! runs on them.
//!
//! When the 1 GiB pool is short, a segment falls back to 2 MiB pages with a
//! warning on stderr, unless [`SegmentConfig::fallback`] is off; when both
//! pools are short it fails with a message naming `tiermem hugepages
//! reserve`.
//!
//! ```no_run
//! use tiermem::Segment;
//! let mut seg = Segment::new(1 << 30).unwrap(); // one 1 GiB page
//! let table: &mut [u64] = seg.as_mut_slice();
//! table[0] = 42;
//! println!("{} bytes in {} pages", seg.len(), seg.page_size());
//! ```

use crate::hugepages::{self, HugePageSize};
use crate::Error;
use std::time::{Duration, Instant};
use tiermem_sys::mm::{MapOptions, Mapping, UserAccess};

/// How to create a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentConfig {
    /// Size in bytes; rounded up to whole pages of the size used.
    pub bytes: usize,
    /// Page size wanted: 1 GiB (default) or 2 MiB.
    pub page: HugePageSize,
    /// Use 2 MiB pages (with a warning) when the 1 GiB pool is short.
    pub fallback: bool,
    /// `mlock` the range (hugetlb pages are never swapped anyway; this
    /// documents the intent and fails loudly under a too small
    /// RLIMIT_MEMLOCK only as a warning).
    pub lock: bool,
}

impl SegmentConfig {
    /// `bytes` on 1 GiB pages, falling back to 2 MiB pages, locked.
    pub fn new(bytes: usize) -> SegmentConfig {
        SegmentConfig {
            bytes,
            page: HugePageSize::Size1G,
            fallback: true,
            lock: true,
        }
    }
}

/// A populated, locked range of huge pages. Dropping it unmaps the range
/// and returns the pages to their pool.
pub struct Segment {
    mapping: Mapping,
    user: UserAccess,
    page: HugePageSize,
    fell_back: bool,
    locked: bool,
    setup: Duration,
}

impl Segment {
    /// A segment of `bytes` (rounded up to whole pages) on 1 GiB pages, or
    /// 2 MiB pages with a warning if the 1 GiB pool is short.
    pub fn new(bytes: usize) -> Result<Segment, Error> {
        Self::with_config(&SegmentConfig::new(bytes))
    }

    /// A segment as `config` says.
    pub fn with_config(config: &SegmentConfig) -> Result<Segment, Error> {
        if config.bytes == 0 {
            return Err(crate::config::ConfigError::Zero { what: "segment size" }.into());
        }
        if let Err(e) = hugepages::reserve_static(&[]) {
            eprintln!("tiermem: warning: {e}");
        }
        let start = Instant::now();
        let mut page = config.page;
        let mut fell_back = false;
        let pages = |p: HugePageSize| config.bytes.div_ceil(p.bytes()) as u64;
        if let Err(short) = hugepages::check_available(page, pages(page), "a segment") {
            let fallback = config.fallback && page == HugePageSize::Size1G;
            if !fallback || hugepages::pool(HugePageSize::Size2M).available() < pages(HugePageSize::Size2M) {
                return Err(short);
            }
            eprintln!("tiermem: warning: {short}; using 2 MiB pages for this segment instead");
            page = HugePageSize::Size2M;
            fell_back = true;
        }
        let len = pages(page) as usize * page.bytes();
        let (mapping, user) = Mapping::anonymous(
            len,
            &MapOptions {
                huge: Some(page),
                populate: true,
                ..Default::default()
            },
        )
        .map_err(|e| match e {
            // The pool changed between the check and the mapping.
            tiermem_sys::mm::MmError::Map { .. } => {
                hugepages::check_available(page, pages(page), "a segment")
                    .err()
                    .unwrap_or(e.into())
            }
            e => e.into(),
        })?;
        let locked = config.lock
            && match mapping.lock(0, len) {
                Ok(()) => true,
                Err(e) => {
                    eprintln!("tiermem: warning: segment not locked ({e}); raise RLIMIT_MEMLOCK (ulimit -l)");
                    false
                }
            };
        Ok(Segment {
            mapping,
            user,
            page,
            fell_back,
            locked,
            setup: start.elapsed(),
        })
    }

    /// Start address (aligned to the page size).
    pub fn base(&self) -> usize {
        self.mapping.addr()
    }

    /// Start as a pointer, for C.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mapping.as_ptr()
    }

    /// Size in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.mapping.len()
    }

    /// Never true: a segment has at least one page.
    pub fn is_empty(&self) -> bool {
        self.mapping.is_empty()
    }

    /// The page size in use.
    pub fn page_size(&self) -> HugePageSize {
        self.page
    }

    /// Whether 2 MiB pages replaced the 1 GiB pages asked for.
    pub fn fell_back(&self) -> bool {
        self.fell_back
    }

    /// Whether the range is `mlock`ed.
    pub fn locked(&self) -> bool {
        self.locked
    }

    /// Time spent creating the segment: mapping, populating (zeroing every
    /// page) and locking.
    pub fn setup_time(&self) -> Duration {
        self.setup
    }

    /// The whole segment as a slice.
    pub fn as_mut_slice<T: bytemuck::Pod>(&mut self) -> &mut [T] {
        self.mapping.user_slice_mut(&mut self.user)
    }
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("base", &format_args!("{:#x}", self.base()))
            .field("len", &self.len())
            .field("page", &self.page)
            .field("fell_back", &self.fell_back)
            .finish()
    }
}
