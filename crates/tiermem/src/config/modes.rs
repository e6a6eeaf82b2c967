//! The settings of a region that take one of a few named values.

use super::parse::parse_page_size;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The page size of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum PageSize {
    /// 4 KiB base pages.
    #[default]
    #[serde(rename = "4K")]
    Base4K,
    /// 2 MiB pages from the hugetlbfs pool; data moves 2 MiB at a time.
    #[serde(rename = "2M")]
    Huge2M,
    /// 2 MiB transparent huge pages: each 2 MiB block is filled with 512
    /// small pages at once, then collapsed (`MADV_COLLAPSE`) into one huge
    /// page; data moves 2 MiB at a time. No pool needed; a block the kernel
    /// cannot collapse (no free huge page) stays mapped with small pages.
    #[serde(rename = "THP")]
    Thp2M,
}

impl PageSize {
    /// Bytes per page.
    pub fn bytes(self) -> usize {
        match self {
            PageSize::Base4K => 4096,
            PageSize::Huge2M | PageSize::Thp2M => 2 << 20,
        }
    }
    /// The hugetlbfs page size of `bytes` bytes (4 KiB or 2 MiB; THP has
    /// no size of its own, see [`PageSize::parse`]).
    pub fn from_bytes(bytes: u64) -> Option<PageSize> {
        match bytes {
            4096 => Some(PageSize::Base4K),
            b if b == 2 << 20 => Some(PageSize::Huge2M),
            _ => None,
        }
    }
    /// `4K`, `2M` (hugetlbfs), `THP` (or `thp`, `2M-THP`): the names
    /// [`PageSize::name`] prints, and sizes in bytes ([`parse_page_size`]
    /// without 1G).
    pub fn parse(s: &str) -> Option<PageSize> {
        match parse_page_size(s)? {
            HugeKind::Huge1G => None,
            k => Some(k.page_size()),
        }
    }
    /// `4K`, `2M` or `THP`.
    pub fn name(self) -> &'static str {
        match self {
            PageSize::Base4K => "4K",
            PageSize::Huge2M => "2M",
            PageSize::Thp2M => "THP",
        }
    }
}

impl std::fmt::Display for PageSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where evicted pages go.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FarStoreConfig {
    /// A memfd-backed pool in this process (paper 1's host memory); data
    /// moves by copy.
    #[default]
    Memory,
    /// A file (`pread`/`pwrite`). A directory gets an unnamed temporary
    /// file in it; a new file name is created (mode 0600) and removed when
    /// the region goes. An existing file is refused.
    File {
        /// Directory or new file name.
        path: PathBuf,
        /// Open with `O_DIRECT` (bypass the page cache).
        direct: bool,
    },
}

/// Where page faults are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultPath {
    /// On the faulting thread, in a SIGBUS handler (`UFFD_FEATURE_SIGBUS`):
    /// no thread wake-up, about 5-7 us per 4 KiB fill on our machines.
    /// Kernel-mode accesses (a `read(2)` into a non-resident page) fail with
    /// `EFAULT` instead of faulting the page in.
    #[default]
    InContext,
    /// Classic handler threads reading the userfaultfd (as UMap): serves
    /// kernel-mode accesses too, but a wake-up costs 10-120 us here.
    HandlerThread,
}

impl FaultPath {
    /// Every design.
    pub const ALL: &'static [FaultPath] = &[FaultPath::InContext, FaultPath::HandlerThread];
    /// The design's name.
    pub fn name(self) -> &'static str {
        match self {
            FaultPath::InContext => "in-context",
            FaultPath::HandlerThread => "handler-thread",
        }
    }
    /// Looks a design up by name.
    pub fn from_name(s: &str) -> Option<FaultPath> {
        Self::ALL.iter().copied().find(|f| f.name() == s)
    }
}

/// How writes to clean pages are noticed, so clean pages are dropped
/// without write-back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DirtyTracking {
    /// Pages are installed write-protected; the first write takes a
    /// userfaultfd WP fault that marks the page dirty. Eviction of clean
    /// pages needs no extra work.
    #[default]
    WpFault,
    /// `UFFD_FEATURE_WP_ASYNC`: writes clear protection in the kernel
    /// without a fault; eviction asks `PAGEMAP_SCAN` which pages were
    /// written, freezing the victims read-only around the scan so that no
    /// write can slip between the scan and the unmap.
    WpAsync,
}

impl DirtyTracking {
    /// Every mode.
    pub const ALL: &'static [DirtyTracking] = &[DirtyTracking::WpFault, DirtyTracking::WpAsync];
    /// The mode's name.
    pub fn name(self) -> &'static str {
        match self {
            DirtyTracking::WpFault => "wp-fault",
            DirtyTracking::WpAsync => "wp-async",
        }
    }
    /// Looks a mode up by name.
    pub fn from_name(s: &str) -> Option<DirtyTracking> {
        Self::ALL.iter().copied().find(|f| f.name() == s)
    }
}

/// How system calls that read or write tiered memory in kernel mode
/// (`read(2)` into a region, `write(2)` from it, `fread`, `recv`, ...) are
/// served on the in-context fault path, where the kernel cannot raise a
/// fault signal for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KernelAccess {
    /// In-context regions live in a window of the address space whose
    /// buffers a seccomp filter traps: the SIGSYS handler brings the
    /// buffer's pages in (writable for a read into them), pins them, runs
    /// the call and unpins them (see docs/design.md, "Kernel accesses").
    #[default]
    Trap,
    /// No filter: such a call into a missing or write-protected page fails
    /// with `EFAULT`.
    Off,
}

impl KernelAccess {
    /// Every mode.
    pub const ALL: &'static [KernelAccess] = &[KernelAccess::Trap, KernelAccess::Off];
    /// The mode's name.
    pub fn name(self) -> &'static str {
        match self {
            KernelAccess::Trap => "trap",
            KernelAccess::Off => "off",
        }
    }
    /// Looks a mode up by name.
    pub fn from_name(s: &str) -> Option<KernelAccess> {
        Self::ALL.iter().copied().find(|f| f.name() == s)
    }
}

/// What a `fork()`ed child gets of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFork {
    /// Nothing: the range is `MADV_DONTFORK`, absent in the child
    /// (docs/fork.md). Regions made through the API.
    #[default]
    Absent,
    /// A private, untiered copy of the data as of the fork: resident pages
    /// copy-on-write, far pages read by the child before `fork` returns
    /// while the parent's page transitions pause. The transparent heap and
    /// static arrays (an unmodified program may fork and use them).
    Copy,
}

/// How pages are installed, and how evicted pages leave.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstallMethod {
    /// The method measured to pay, today `Copy` everywhere. Frame
    /// recycling on the synchronous path was 8-33% faster than copies
    /// when it came (NPB class A at near = 50%, one thread); since dirty
    /// victims leave through a pipe after one batched unmap, copies are
    /// faster (Linux 6.18, 2026-12-02, one thread: CG.A 9.15/7.45 s
    /// against 11.58/9.55, IS.A 3.85 against 4.39-4.49, MG.A 8.28-8.57
    /// against 9.05-9.51, FT.A even; docs/results/i36-install-batch.txt),
    /// and with several faulting threads a move out of the region is a
    /// TLB shootdown of every other CPU where copies unmap a batch's
    /// victims with one.
    #[default]
    Auto,
    /// `UFFDIO_COPY` of whole runs straight from the far store; evicted
    /// pages are freed with `MADV_DONTNEED`.
    Copy,
    /// Frame recycling: evicted pages are moved (`UFFDIO_MOVE`) into a ring
    /// of staging frames, new data is copied into those frames off the
    /// critical path and moved into place: no page allocation, no kernel
    /// copy.
    Move,
}

impl InstallMethod {
    /// Every method.
    pub const ALL: &'static [InstallMethod] =
        &[InstallMethod::Auto, InstallMethod::Copy, InstallMethod::Move];
    /// The method's name.
    pub fn name(self) -> &'static str {
        match self {
            InstallMethod::Auto => "auto",
            InstallMethod::Copy => "copy",
            InstallMethod::Move => "move",
        }
    }
    /// Looks a method up by name.
    pub fn from_name(s: &str) -> Option<InstallMethod> {
        Self::ALL.iter().copied().find(|m| m.name() == s)
    }
}

/// Page sizes of the huge heap, in fallback order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum HugeKind {
    /// 1 GiB hugetlb pages.
    Huge1G,
    /// 2 MiB hugetlb pages.
    Huge2M,
    /// Transparent huge pages (`MADV_HUGEPAGE`).
    Thp,
    /// Base pages.
    Base4K,
}

impl HugeKind {
    /// From the most to the least preferred.
    pub const ORDER: [HugeKind; 4] = [
        HugeKind::Huge1G,
        HugeKind::Huge2M,
        HugeKind::Thp,
        HugeKind::Base4K,
    ];

    /// The name (`1g`, `2m`, `thp`, `4k`).
    pub fn name(self) -> &'static str {
        match self {
            HugeKind::Huge1G => "1g",
            HugeKind::Huge2M => "2m",
            HugeKind::Thp => "thp",
            HugeKind::Base4K => "4k",
        }
    }

    /// From a name.
    pub fn from_name(s: &str) -> Option<HugeKind> {
        Self::ORDER
            .iter()
            .copied()
            .find(|k| k.name() == s.to_ascii_lowercase())
    }

    /// The page size, in the region configuration's terms (1g maps to the
    /// 2 MiB hugetlb size for regions, which have no 1 GiB pages).
    pub fn page_size(self) -> PageSize {
        match self {
            HugeKind::Huge1G | HugeKind::Huge2M => PageSize::Huge2M,
            HugeKind::Thp => PageSize::Thp2M,
            HugeKind::Base4K => PageSize::Base4K,
        }
    }

    /// Bytes per page (THP counts as its 2 MiB block).
    pub fn page_bytes(self) -> usize {
        match self {
            HugeKind::Huge1G => 1 << 30,
            HugeKind::Huge2M | HugeKind::Thp => 2 << 20,
            HugeKind::Base4K => 4096,
        }
    }
}
