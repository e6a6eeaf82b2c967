//! Region configuration, its validation, and the `TIERMEM_*` environment
//! variables.
//!
//! Every option has one descriptor in [`ENV_OPTIONS`] (name, unit,
//! default, help), from which the environment parser and the reference
//! page in `docs/configuration.md` are derived. Sizes accept `K`, `M`, `G`,
//! `T` suffixes (binary). An invalid value gives a warning naming the
//! variable and keeps the default; it is never ignored silently.
//!
//! ```
//! use tiermem::config::{Config, parse_size};
//! let mut c = Config::new(parse_size("1G").unwrap(), parse_size("512M").unwrap());
//! c.evict_batch_pages = 32;
//! c.validate().unwrap();
//! ```

use crate::policy::PolicyKind;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use thiserror::Error;

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
    /// [`PageSize::name`] prints, and sizes in bytes.
    pub fn parse(s: &str) -> Option<PageSize> {
        match s.trim().to_ascii_uppercase().as_str() {
            "THP" | "2M-THP" | "2MTHP" => Some(PageSize::Thp2M),
            other => PageSize::from_bytes(parse_size(other).ok()?),
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
    /// `Move` where it was measured to pay: on the synchronous path (no
    /// movers), where faulting threads evict into the ring and fill from
    /// it (NPB class A at near = 50%, one thread: 8-33% faster than
    /// `Copy`), while one thread at a time faults; `Copy` with movers,
    /// whose ring would take a quarter of a small budget, and while
    /// threads take turns at faulting (a move out of the region is a TLB
    /// shootdown of every other CPU; copies unmap a batch's victims with
    /// one: random updates at 2 threads 1.46x faster).
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

/// Smallest near budget, in pages: one x86 instruction can touch up to four
/// data pages (a `movs` between two page-crossing operands), and all of
/// them must be resident at once for it to complete.
pub const MIN_NEAR_PAGES: usize = 4;
/// Largest eviction batch, in pages.
pub const MAX_EVICT_BATCH: usize = 512;

/// Everything that defines a region.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Size of the virtual range (a multiple of the page size).
    pub virt_bytes: u64,
    /// Near-memory budget: at most this many bytes are resident at once.
    /// Larger than `virt_bytes` means no data movement ever.
    pub near_bytes: u64,
    /// Page size.
    pub page_size: PageSize,
    /// Far store.
    pub far: FarStoreConfig,
    /// Replacement policy.
    pub policy: PolicyKind,
    /// Fault-serving design.
    pub fault_path: FaultPath,
    /// Dirty tracking.
    pub dirty_tracking: DirtyTracking,
    /// Serving kernel-mode accesses (in-context path).
    pub kernel_access: KernelAccess,
    /// What a forked child gets.
    #[serde(default)]
    pub on_fork: OnFork,
    /// Pages evicted together when the budget is reached; contiguous victims
    /// are unmapped with one call (one TLB shootdown).
    pub evict_batch_pages: usize,
    /// Handler threads (handler-thread design only).
    pub handler_threads: usize,
    /// CPUs to pin handler threads to, round robin (empty: not pinned).
    pub handler_cpus: Vec<usize>,
    /// Dedicated data-mover threads (paper 1, III.D): they prefetch ahead
    /// of demand and evict behind it. 0: all movement happens in faults.
    pub movers: usize,
    /// CPUs to pin mover threads to, round robin (empty: not pinned).
    pub mover_cpus: Vec<usize>,
    /// Fault-triggered stream prefetch (needs movers).
    pub prefetch: bool,
    /// Largest prefetch window, in pages.
    pub prefetch_max_pages: usize,
    /// Fault-around: a demand fault outside any prefetch stream installs
    /// up to 16 missing neighbours with the page, in one call, while the
    /// thread's faults show spatial locality (4 KiB pages only).
    #[serde(default = "default_true")]
    pub fault_around: bool,
    /// Stride detection (part of fault-around, off with it): a thread
    /// whose demand faults fall at a regular stride beyond fault-around's
    /// reach (FT's 1 MiB) gets the next points of the stride, each with its
    /// aligned window of neighbours, installed with each fault, into free
    /// near slots only.
    #[serde(default = "default_true")]
    pub stride: bool,
    /// Rewrite hint (`wp-fault` dirty tracking, 4 KiB or hugetlb pages, a
    /// far store that compares in place): a page that was written during
    /// its last stay in near memory is installed writable at its next read
    /// fill, so that writing it again costs no write-protect fault; eviction
    /// compares it with its far copy and writes it back only if it changed.
    #[serde(default = "default_true")]
    pub rewrite_hint: bool,
    /// How pages are installed: frame recycling or copies (see
    /// [`InstallMethod`]).
    pub install: InstallMethod,
    /// Huge pages to reserve once per process before the first region is
    /// created (paper 3's static pool; needs root). Empty: those of
    /// `TIERMEM_HUGEPAGES`, if set.
    pub reserve_huge_pages: Vec<crate::pool_request::PoolRequest>,
    /// **Tests only**: make the far store fail on purpose
    /// (`read:0.01,write:0.01,short:0.01,full:after=N`, see
    /// [`crate::store::inject`]). `None`: `TIERMEM_FAULT_INJECT` if set,
    /// else off.
    #[serde(default)]
    pub fault_inject: Option<String>,
}

impl Config {
    /// A configuration with defaults for everything but the two sizes.
    pub fn new(virt_bytes: u64, near_bytes: u64) -> Config {
        Config {
            virt_bytes,
            near_bytes,
            page_size: PageSize::Base4K,
            far: FarStoreConfig::Memory,
            policy: PolicyKind::Fifo,
            fault_path: FaultPath::InContext,
            dirty_tracking: DirtyTracking::WpFault,
            kernel_access: KernelAccess::Trap,
            on_fork: OnFork::Absent,
            evict_batch_pages: 64,
            handler_threads: 1,
            handler_cpus: Vec::new(),
            movers: 0,
            mover_cpus: Vec::new(),
            prefetch: true,
            prefetch_max_pages: 512,
            fault_around: true,
            stride: true,
            rewrite_hint: true,
            install: InstallMethod::Auto,
            reserve_huge_pages: Vec::new(),
            fault_inject: None,
        }
    }

    /// Pages the scan-resistant policy protects from eviction: the working
    /// neighbourhood plus what the prefetcher may have brought in ahead.
    pub fn protected_window_pages(&self) -> usize {
        let want = 4 * self.prefetch_max_pages + 2 * MAX_EVICT_BATCH;
        want.min(self.near_pages() / 4).max(1)
    }

    /// Pages of the virtual range.
    pub fn virt_pages(&self) -> usize {
        (self.virt_bytes / self.page_size.bytes() as u64) as usize
    }

    /// Pages of the near budget (capped at the virtual range).
    pub fn near_pages(&self) -> usize {
        ((self.near_bytes / self.page_size.bytes() as u64) as usize).min(self.virt_pages())
    }

    /// Checks sizes and options; the error names the offending setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let ps = self.page_size.bytes() as u64;
        if self.virt_bytes == 0 {
            return Err(ConfigError::Zero { what: "virt_bytes" });
        }
        if self.virt_bytes % ps != 0 {
            return Err(ConfigError::Unaligned {
                what: "virt_bytes",
                value: self.virt_bytes,
                page: ps,
            });
        }
        if self.virt_bytes > 1 << 46 {
            return Err(ConfigError::TooLarge {
                value: self.virt_bytes,
            });
        }
        if self.near_bytes == 0 {
            return Err(ConfigError::Zero { what: "near_bytes" });
        }
        if self.near_bytes < ps * MIN_NEAR_PAGES as u64 && self.near_bytes < self.virt_bytes {
            return Err(ConfigError::BudgetTooSmall {
                near: self.near_bytes,
                min: ps * MIN_NEAR_PAGES as u64,
                page: ps,
            });
        }
        if self.evict_batch_pages == 0 || self.evict_batch_pages > MAX_EVICT_BATCH {
            return Err(ConfigError::BadValue {
                name: "evict_batch_pages",
                value: self.evict_batch_pages.to_string(),
                expected: "1 to 512",
            });
        }
        if self.fault_path == FaultPath::HandlerThread && self.handler_threads == 0 {
            return Err(ConfigError::BadValue {
                name: "handler_threads",
                value: "0".into(),
                expected: "at least 1",
            });
        }
        if self.prefetch_max_pages < 4 || self.prefetch_max_pages > 4 * MAX_EVICT_BATCH {
            return Err(ConfigError::BadValue {
                name: "prefetch_max_pages",
                value: self.prefetch_max_pages.to_string(),
                expected: "4 to 2048",
            });
        }
        if self.movers > 64 {
            return Err(ConfigError::BadValue {
                name: "movers",
                value: self.movers.to_string(),
                expected: "0 to 64",
            });
        }
        if let Some(spec) = &self.fault_inject {
            if crate::store::inject::FaultInjectSpec::parse(spec).is_err() {
                return Err(ConfigError::BadValue {
                    name: "fault_inject",
                    value: spec.clone(),
                    expected: "read:P,write:P,short:P,full:after=N,seed:S (P from 0 to 1)",
                });
            }
        }
        if let FarStoreConfig::File { path, .. } = &self.far {
            if path.as_os_str().is_empty() {
                return Err(ConfigError::BadValue {
                    name: "far path",
                    value: String::new(),
                    expected: "a directory or a new file name",
                });
            }
        }
        Ok(())
    }

    /// Applies the `TIERMEM_*` variables of the process environment on top
    /// of `self`, returning warnings for values that were not understood.
    pub fn apply_env(&mut self) -> Vec<String> {
        self.apply_vars(|name| std::env::var(name).ok())
    }

    /// Same, from any lookup (for tests).
    pub fn apply_vars(&mut self, lookup: impl Fn(&str) -> Option<String>) -> Vec<String> {
        let mut warnings = Vec::new();
        for opt in ENV_OPTIONS {
            if let Some(v) = lookup(opt.name) {
                // A value that parses but makes the configuration invalid
                // (TIERMEM_NEAR=0, TIERMEM_FAR=5000) is refused the same
                // way: the docs promise a warning and the default kept.
                let before = self.clone();
                let valid_before = before.validate().is_ok();
                let applied = (opt.apply)(self, v.trim()).and_then(|()| match self.validate() {
                    Err(e) if valid_before => Err(e.to_string()),
                    _ => Ok(()),
                });
                if let Err(e) = applied {
                    *self = before;
                    warnings.push(format!(
                        "tiermem: ignoring {}={:?}: {e}; keeping {}",
                        opt.name, v, opt.default
                    ));
                }
            }
        }
        warnings
    }

    /// One line per setting, for verbose output.
    pub fn describe(&self) -> String {
        let far = match &self.far {
            FarStoreConfig::Memory => "memory".to_owned(),
            FarStoreConfig::File { path, direct } => {
                format!(
                    "file:{}{}",
                    path.display(),
                    if *direct { " (O_DIRECT)" } else { "" }
                )
            }
        };
        let movers = if self.movers == 0 {
            "movers=0".to_owned()
        } else {
            format!(
                "movers={}{} prefetch={} install={}",
                self.movers,
                if self.mover_cpus.is_empty() {
                    String::new()
                } else {
                    format!("@{:?}", self.mover_cpus)
                },
                if self.prefetch {
                    format!("up-to-{}-pages", self.prefetch_max_pages)
                } else {
                    "off".to_owned()
                },
                self.install.name()
            )
        };
        format!(
            "virt={} near={} page={} far={} policy={} fault-path={} dirty={} evict-batch={} handler-threads={} {movers}",
            format_size(self.virt_bytes),
            format_size(self.near_bytes),
            self.page_size,
            far,
            self.policy,
            self.fault_path.name(),
            self.dirty_tracking.name(),
            self.evict_batch_pages,
            self.handler_threads
        )
    }
}

/// A configuration mistake.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// A size is zero.
    #[error("{what} must not be zero")]
    Zero {
        /// Which setting.
        what: &'static str,
    },
    /// A size is not a multiple of the page size.
    #[error("{what} = {value} is not a multiple of the page size ({page} bytes)")]
    Unaligned {
        /// Which setting.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The page size.
        page: u64,
    },
    /// The virtual range is larger than the address space allows.
    #[error("virt_bytes = {value} is larger than 64 TiB")]
    TooLarge {
        /// Its value.
        value: u64,
    },
    /// The near budget holds fewer pages than one instruction may need.
    #[error(
        "near budget of {near} bytes is below the minimum of {min} bytes \
         (4 pages of {page} bytes: one instruction can need 4 pages resident)"
    )]
    BudgetTooSmall {
        /// The budget.
        near: u64,
        /// The minimum.
        min: u64,
        /// The page size.
        page: u64,
    },
    /// A value out of range or not understood.
    #[error("{name} = {value:?}: expected {expected}")]
    BadValue {
        /// Which setting.
        name: &'static str,
        /// What was given.
        value: String,
        /// What is allowed.
        expected: &'static str,
    },
}

/// A near budget as `tiermem run --near` and `TIERMEM_NEAR` take it: a
/// size (`8G`), a share of physical memory (`50%`), or a share of the
/// program's footprint (`50%fp`) as a previous run measured it in its
/// JSON report (`report`).
///
/// ```
/// let mem = 8 << 30;
/// let b = tiermem::config::parse_near("25%", mem, None).unwrap();
/// assert_eq!(b.bytes, 2 << 30);
/// assert_eq!(b.share.as_deref(), Some("25% of 8G physical memory"));
/// assert!(tiermem::config::parse_near("50%fp", mem, None).is_err());
/// ```
pub fn parse_near(v: &str, mem_total: u64, report: Option<&std::path::Path>) -> Result<NearSpec, String> {
    let v = v.trim();
    if let Some(p) = v.strip_suffix("%fp") {
        let share = parse_share(&format!("{p}%"), 1 << 40)? as f64 / (1u64 << 40) as f64;
        let path = report.ok_or(
            "a share of the footprint (%fp) is of the footprint a previous run measured: give that run's \
             --report FILE (TIERMEM_REPORT)",
        )?;
        let footprint = footprint_in_report(path)?;
        return Ok(NearSpec {
            bytes: (footprint as f64 * share) as u64,
            share: Some(format!(
                "{p}% of the {} footprint in {}",
                format_size(footprint),
                path.display()
            )),
            footprint: Some(footprint),
        });
    }
    let bytes = parse_share(v, mem_total)?;
    Ok(NearSpec {
        bytes,
        share: v
            .ends_with('%')
            .then(|| format!("{v} of {} physical memory", format_size(mem_total))),
        footprint: None,
    })
}

/// A near budget in bytes, and what it was a share of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NearSpec {
    /// The budget.
    pub bytes: u64,
    /// What it was a share of (`50% of the 240M footprint in r.json`),
    /// when given as a share.
    pub share: Option<String>,
    /// The program's footprint it was a share of (`%fp`).
    pub footprint: Option<u64>,
}

/// The program's footprint that the `tiermem run --report` file at `path`
/// recorded: `cost.program_footprint_bytes`, which a run knows when its
/// budget was never reached (its peak resident memory) or when its own
/// budget was a share of a footprint measured before.
pub fn footprint_in_report(path: &std::path::Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "{}: {e}: measure the footprint first with a run without tiering: tiermem run --report {} -- PROGRAM",
            path.display(),
            path.display()
        )
    })?;
    let j: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not a tiermem report: {e}", path.display()))?;
    match j["cost"]["program_footprint_bytes"].as_u64() {
        Some(b) if b > 0 => Ok(b),
        _ => Err(format!(
            "{} is the report of a run that reached its budget, so it does not know the program's \
             footprint: measure it with a run without tiering: tiermem run --report {} -- PROGRAM",
            path.display(),
            path.display()
        )),
    }
}

/// A size (`8G`), or a percentage of `total` (`50%`).
pub fn parse_share(v: &str, total: u64) -> Result<u64, String> {
    if let Some(p) = v.trim().strip_suffix('%') {
        let p: f64 = p
            .trim()
            .parse()
            .map_err(|_| format!("{v:?} is not a percentage"))?;
        if !(p > 0.0 && p <= 100.0) {
            return Err(format!("{v:?}: a percentage must be above 0 and at most 100"));
        }
        return Ok((total as f64 * p / 100.0) as u64);
    }
    parse_size(v)
}

/// Parses `4096`, `4K`, `512M`, `1G`, `2T`, `1.5G`, `64KiB` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let stripped = lower.trim_end_matches("ib").trim_end_matches('b');
    let (num, mult) = match stripped.chars().last() {
        Some('k') => (&stripped[..stripped.len() - 1], 1u64 << 10),
        Some('m') => (&stripped[..stripped.len() - 1], 1 << 20),
        Some('g') => (&stripped[..stripped.len() - 1], 1 << 30),
        Some('t') => (&stripped[..stripped.len() - 1], 1 << 40),
        _ => (stripped, 1),
    };
    let num = num.trim();
    if num.is_empty() {
        return Err(format!("{s:?} is not a size"));
    }
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult).ok_or_else(|| format!("{s:?} overflows"));
    }
    match num.parse::<f64>() {
        Ok(f) if f >= 0.0 && f.is_finite() && f * (mult as f64) < u64::MAX as f64 => {
            Ok((f * mult as f64) as u64)
        }
        _ => Err(format!("{s:?} is not a size (use e.g. 4096, 64K, 512M, 1G)")),
    }
}

/// Formats a byte count with a binary unit (`512M`, `1G`, `4K`, `1.5G`).
pub fn format_size(b: u64) -> String {
    for (unit, m) in [("T", 1u64 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)] {
        if b >= m {
            return if b % m == 0 {
                format!("{}{unit}", b / m)
            } else {
                format!("{:.2}{unit}", b as f64 / m as f64)
            };
        }
    }
    format!("{b}")
}

fn parse_cpus(s: &str) -> Result<Vec<usize>, String> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            let (a, b): (usize, usize) = (
                a.trim().parse().map_err(|_| format!("bad CPU {a:?}"))?,
                b.trim().parse().map_err(|_| format!("bad CPU {b:?}"))?,
            );
            if a > b {
                return Err(format!("bad CPU range {part:?}"));
            }
            v.extend(a..=b);
        } else {
            v.push(part.trim().parse().map_err(|_| format!("bad CPU {part:?}"))?);
        }
    }
    Ok(v)
}

/// Parses a CPU list such as `0,2-3`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    parse_cpus(s)
}

fn default_true() -> bool {
    true
}

fn parse_bool(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "1" | "yes" | "true" | "on" => Ok(true),
        "0" | "no" | "false" | "off" | "" => Ok(false),
        _ => Err(format!("{s:?} is not a boolean (0/1)")),
    }
}

/// One environment variable.
pub struct EnvOption {
    /// The variable's name.
    pub name: &'static str,
    /// Unit or value form.
    pub unit: &'static str,
    /// Default, as text.
    pub default: &'static str,
    /// What it does.
    pub help: &'static str,
    apply: fn(&mut Config, &str) -> Result<(), String>,
}

/// Every `TIERMEM_*` variable. Never renumber or rename: C users and job
/// scripts depend on the names.
pub const ENV_OPTIONS: &[EnvOption] = &[
    EnvOption {
        name: "TIERMEM_FAR",
        unit: "bytes (K/M/G/T)",
        default: "twice the physical memory (whole GiB; the preload divides it among the node's MPI ranks)",
        help: "Size of the far store, i.e. of the virtual range: of the process-wide region behind tm_malloc_global, and of the preload's heap (`tiermem run --heap-size`). A large range costs address space, not memory: region metadata grows with the pages used (docs/design.md, \"metadata grows with use\").",
        apply: |c, v| {
            c.virt_bytes = parse_size(v)?;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_NEAR",
        unit: "bytes (K/M/G/T), a share of physical memory (50%), or of the program's footprint (50%fp)",
        default: "1G for tm_malloc_global; 100% (no tiering) for the preload",
        help: "Near-memory budget: of the process-wide region, and of the preload's heap and static arrays together (`tiermem run --near`; 100% means no tiering there; under an MPI or Slurm launcher the preload divides a share of physical memory among the node's ranks, docs/mpi.md). `50%fp` is half the program's footprint as a previous run measured it in its report (`TIERMEM_REPORT`, `tiermem run --report`): transparent mode only.",
        apply: |c, v| {
            c.near_bytes = parse_near(v, crate::SystemInfo::probe().mem_total_bytes, None)?.bytes;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_PAGE_SIZE",
        unit: "4K, 2M or THP (the preload also 1G)",
        default: "4K",
        help: "Page size; 2M uses the hugetlbfs pool (reserve pages first), THP transparent huge pages; under the preload (`tiermem run --page-size`) 1G too, without tiering.",
        apply: |c, v| {
            c.page_size = PageSize::parse(v).ok_or("page size must be 4K, 2M or THP")?;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_HUGEPAGES",
        unit: "SIZE:PAGES list (2M:512,1G:2)",
        default: "(unset: no reservation)",
        help: "Huge pages to reserve once at start-up, before the first region (a static pool; needs root).",
        apply: |c, v| {
            c.reserve_huge_pages = crate::pool_request::parse_requests(v)?;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_FAR_FILE",
        unit: "path",
        default: "(unset: memory store)",
        help: "Use a file far store: a directory (an unnamed file is created in it) or a new file name.",
        apply: |c, v| {
            if v.is_empty() {
                return Err("empty path".into());
            }
            let direct = matches!(&c.far, FarStoreConfig::File { direct: true, .. });
            c.far = FarStoreConfig::File {
                path: v.into(),
                direct,
            };
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_FAR_DIRECT",
        unit: "0 or 1",
        default: "0",
        help: "Open the far file with O_DIRECT.",
        apply: |c, v| {
            let d = parse_bool(v)?;
            if let FarStoreConfig::File { direct, .. } = &mut c.far {
                *direct = d;
                Ok(())
            } else if d {
                Err("only applies with TIERMEM_FAR_FILE (set it first)".into())
            } else {
                Ok(())
            }
        },
    },
    EnvOption {
        name: "TIERMEM_POLICY",
        unit: "fifo, clock or scan",
        default: "fifo",
        help: "Replacement policy: FIFO (paper 1), CLOCK (second chance), scan (scan-resistant, for sweeps larger than the budget).",
        apply: |c, v| {
            c.policy = PolicyKind::from_name(v).ok_or("unknown policy")?;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_FAULT_PATH",
        unit: "in-context or handler-thread",
        default: "in-context",
        help: "Where faults are served: in a SIGBUS handler on the faulting thread, or by handler threads.",
        apply: |c, v| {
            c.fault_path = FaultPath::from_name(v).ok_or("expected in-context or handler-thread")?;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_DIRTY",
        unit: "wp-fault or wp-async",
        default: "wp-fault",
        help: "Dirty tracking: write-protect faults, or WP_ASYNC with PAGEMAP_SCAN at eviction.",
        apply: |c, v| {
            c.dirty_tracking = DirtyTracking::from_name(v).ok_or("expected wp-fault or wp-async")?;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_KERNEL_ACCESS",
        unit: "trap or off",
        default: "trap",
        help: "In-context path: trap read/write/recv/send-style system calls on tiered buffers (seccomp) and serve them (pinned on regular files, through a bounce buffer on pipes, sockets and devices), so they do not fail with EFAULT, and guard SIGBUS/SIGSEGV/SIGSYS from the C library's internal signal calls (aio and timer helper threads, `sigvec`, `setcontext`); off: no filter (EFAULT on pages not resident; glibc's `aio_*` helper threads die on tiered buffers) (design.md, \"Kernel accesses\", \"Signals\").",
        apply: |c, v| {
            c.kernel_access = KernelAccess::from_name(v).ok_or("expected trap or off")?;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_EVICT_BATCH",
        unit: "pages (1-512)",
        default: "64",
        help: "Pages evicted together when the budget is full; contiguous victims share one unmap call.",
        apply: |c, v| {
            let n: usize = v.parse().map_err(|_| "not a number")?;
            if n == 0 || n > MAX_EVICT_BATCH {
                return Err("must be 1 to 512".into());
            }
            c.evict_batch_pages = n;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_HANDLER_THREADS",
        unit: "count",
        default: "1",
        help: "Handler threads in the handler-thread design.",
        apply: |c, v| {
            let n: usize = v.parse().map_err(|_| "not a number")?;
            if n == 0 {
                return Err("must be at least 1".into());
            }
            c.handler_threads = n;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_MOVERS",
        unit: "count",
        default: "0",
        help: "Dedicated data-mover threads: prefetch ahead of demand, evict behind it (0: movement in faults only).",
        apply: |c, v| {
            let n: usize = v.parse().map_err(|_| "not a number")?;
            if n > 64 {
                return Err("must be 0 to 64".into());
            }
            c.movers = n;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_MOVER_CPUS",
        unit: "CPU list (0,2-3)",
        default: "(unpinned)",
        help: "CPUs the mover threads are pinned to, round robin.",
        apply: |c, v| {
            c.mover_cpus = parse_cpus(v)?;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_PREFETCH",
        unit: "0 or 1",
        default: "1",
        help: "Fault-triggered stream prefetch by the movers.",
        apply: |c, v| {
            c.prefetch = parse_bool(v)?;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_PREFETCH_MAX",
        unit: "pages (4-2048)",
        default: "512",
        help: "Largest prefetch window.",
        apply: |c, v| {
            let n: usize = v.parse().map_err(|_| "not a number")?;
            if !(4..=2048).contains(&n) {
                return Err("must be 4 to 2048".into());
            }
            c.prefetch_max_pages = n;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_FAULT_AROUND",
        unit: "on or off",
        default: "on",
        help: "Fault-around: a demand fault outside any prefetch stream also installs up to 16 missing neighbours, in the same call, while the thread's faults show spatial locality (4 KiB pages).",
        apply: |c, v| {
            c.fault_around = parse_bool(v)?;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_STRIDE",
        unit: "on or off",
        default: "on",
        help: "Stride detection, part of fault-around (off with TIERMEM_FAULT_AROUND=off): a thread whose faults fall at a regular stride beyond fault-around's window (any distance, e.g. 1 MiB) gets up to 32 next points of the stride, each with its aligned window of up to 16 pages, installed with each fault, into free near slots only (4 KiB pages).",
        apply: |c, v| {
            c.stride = parse_bool(v)?;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_REWRITE_HINT",
        unit: "on or off",
        default: "on",
        help: "Install a page written during its last stay in near memory writable at its next read fill (no write-protect fault when it is written again; eviction compares it with its far copy). wp-fault dirty tracking with the memory far store.",
        apply: |c, v| {
            c.rewrite_hint = parse_bool(v)?;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_INSTALL",
        unit: "auto, copy or move",
        default: "auto",
        help: "How pages are installed: frame recycling with UFFDIO_MOVE (evicted frames receive new data and are moved into place), UFFDIO_COPY from the far store, or auto: recycling without movers while one thread at a time faults, copies with movers or while threads take turns at faulting (each move out is a TLB shootdown of the other CPUs; copies unmap a batch's victims with one).",
        apply: |c, v| {
            c.install = InstallMethod::from_name(v).ok_or("expected auto, copy or move")?;
            Ok(())
        },
    },
    EnvOption {
        name: "TIERMEM_HANDLER_CPUS",
        unit: "CPU list (0,2-3)",
        default: "(unpinned)",
        help: "CPUs the handler threads are pinned to, round robin.",
        apply: |c, v| {
            c.handler_cpus = parse_cpus(v)?;
            Ok(())
        },
    },
];

/// Whether `TIERMEM_VERBOSE` asks for the effective configuration on stderr.
pub fn verbose_from_env() -> bool {
    std::env::var("TIERMEM_VERBOSE")
        .map(|v| parse_bool(&v).unwrap_or(true))
        .unwrap_or(false)
}

/// The default of `TIERMEM_FAR`, for the process-wide region and the
/// preload's heap alike: twice the physical memory, in whole GiB.
pub fn default_far_bytes(mem_total: u64) -> u64 {
    (2 * mem_total.max(1 << 30)).next_multiple_of(1 << 30)
}

/// The file in which the processes of a transparent run (`tiermem run`)
/// record themselves for the root process's exit summary, named by the
/// root's pid (`TIERMEM_CHILDREN_LOG`).
pub fn children_log_path(root_pid: u32) -> PathBuf {
    std::env::temp_dir().join(format!("tiermem-children-{root_pid}"))
}

/// A variable read outside [`Config`] (transparent mode, the command,
/// the process-wide heap, the SVM over MPI): listed with the region's in
/// one table, the one `tiermem env` prints.
pub struct EnvVar {
    /// The variable's name.
    pub name: &'static str,
    /// Unit or value form.
    pub unit: &'static str,
    /// Default, as text.
    pub default: &'static str,
    /// What it does.
    pub help: &'static str,
}

/// Every `TIERMEM_*` variable that is not a region setting.
pub const OTHER_VARS: &[EnvVar] = &[
    EnvVar {
        name: "TIERMEM_THRESHOLD",
        unit: "bytes (K/M/G/T)",
        default: "1M",
        help: "Preload: allocations (and anonymous `mmap`s) of at least this size go to the tiered heap (`tiermem run --threshold`).",
    },
    EnvVar {
        name: "TIERMEM_NEAR_NODE",
        unit: "bytes (K/M/G/T) or a share of physical memory (50%)",
        default: "(unset: TIERMEM_NEAR)",
        help: "Preload: the near budget of the whole node, divided among the job's ranks on it as the launcher (Open MPI, MPICH/Hydra, Slurm srun) counts them (`tiermem run --near-node`; docs/mpi.md). Instead of `TIERMEM_NEAR`.",
    },
    EnvVar {
        name: "TIERMEM_STATIC",
        unit: "on or off",
        default: "on",
        help: "Preload: take over the executable's large `.bss`/`.data` arrays (`tiermem run --static`).",
    },
    EnvVar {
        name: "TIERMEM_REPORT",
        unit: "path",
        default: "(none)",
        help: "Preload: write the JSON report there at exit (`tiermem run --report`); a program that a tiered one forks and execs writes it with its pid appended. `%r` is the MPI rank, `%l` the local rank, `%%` a percent sign; several ranks and no `%r`: `.rank<N>` before the extension (docs/mpi.md).",
    },
    EnvVar {
        name: "TIERMEM_QUIET",
        unit: "on or off",
        default: "off",
        help: "Preload: no summary on stderr at exit (`tiermem run --quiet`).",
    },
    EnvVar {
        name: "TIERMEM_FOLLOW_EXEC",
        unit: "on or off",
        default: "off",
        help: "Preload: programs that the tiered program's children exec are tiered too (`tiermem run --follow-exec`); an exec without fork (a wrapper script) always stays tiered.",
    },
    EnvVar {
        name: "TIERMEM_FALLBACK",
        unit: "error or untiered",
        default: "error",
        help: "Preload: when the heap cannot be set up in the program the user started, `error` ends it with exit status 1 and one line naming the problem, `untiered` warns and runs it without tiermem (`tiermem run --fallback`). A program the tiered one forks and execs runs untiered with a warning either way.",
    },
    EnvVar {
        name: "TIERMEM_TRANSPARENT",
        unit: "on or off",
        default: "on",
        help: "Preload: off loads the library without tiering anything.",
    },
    EnvVar {
        name: "TIERMEM_PRELOAD",
        unit: "path",
        default: "(libtiermem_preload.so next to the tiermem binary, else in its ../lib)",
        help: "The preload library `tiermem run` uses.",
    },
    EnvVar {
        name: "TIERMEM_ROOT_PID",
        unit: "pid",
        default: "(set by the preload)",
        help: "Internal: the pid of the program the user started, set by the first process that loads the preload, so that the programs it runs know they are not that program. Do not set it.",
    },
    EnvVar {
        name: "TIERMEM_CHILDREN_LOG",
        unit: "path",
        default: "(set by the preload)",
        help: "Internal: the file in which the processes a tiered program forks and execs record themselves, for its exit summary's line on its children. Do not set it.",
    },
    EnvVar {
        name: "TIERMEM_GLOBAL_HEAP",
        unit: "tiered, 2m, 1g or thp",
        default: "tiered",
        help: "What serves `tm_malloc_global`: the tiered process-wide region, or a huge-page heap without tiering (paper 3) of `TIERMEM_FAR` bytes on pages of that size from the pool, falling back 1g -> 2m -> THP -> 4k with one warning line.",
    },
    EnvVar {
        name: "TIERMEM_VERBOSE",
        unit: "0 or 1",
        default: "0",
        help: "Print the effective configuration of each region (and the preload's heap) on stderr.",
    },
    EnvVar {
        name: "TIERMEM_LIVE",
        unit: "on or off",
        default: "on",
        help: "Each process with a tiered region publishes a page of live counters for `tiermem top` (a thread updates it every 250 ms and keeps the report's time series; docs/live.md); off publishes nothing.",
    },
    EnvVar {
        name: "TIERMEM_LIVE_DIR",
        unit: "path",
        default: "/dev/shm/tiermem-UID",
        help: "Where the live pages are (`<pid>.page`, mode 0600, in a directory of mode 0700) and where `tiermem top` reads them.",
    },
    EnvVar {
        name: "TIERMEM_SVM_RANKS_PER_NODE",
        unit: "count",
        default: "(all ranks of a node)",
        help: "SVM over MPI: treat groups of this many ranks of a node as nodes (a test switch for the cross-node paths on one machine; docs/svm.md).",
    },
    EnvVar {
        name: "TIERMEM_SVM_PROGRESS_US",
        unit: "microseconds",
        default: "50",
        help: "SVM over MPI: the progress thread's period.",
    },
    EnvVar {
        name: "TIERMEM_SVM_TIMEOUT_S",
        unit: "seconds",
        default: "600",
        help: "SVM over MPI: the bound of every wait.",
    },
    EnvVar {
        name: "TIERMEM_FAULT_INJECT",
        unit: "`read:P,write:P,short:P,full:after=N,seed:S`",
        default: "off",
        help: "**Tests only.** Every region's far store fails a fraction P of reads (EIO: page poisoned, SIGBUS, error recorded) and of writes (EIO: victim kept resident), shortens a fraction P of the file store's pread/pwrite calls, and refuses writes (ENOSPC) after N successful ones until space is made. Never set it in production.",
    },
];

/// The default of variable `name`, as the table states it.
pub fn env_default(name: &str) -> Option<&'static str> {
    ENV_OPTIONS
        .iter()
        .find(|o| o.name == name)
        .map(|o| o.default)
        .or_else(|| OTHER_VARS.iter().find(|o| o.name == name).map(|o| o.default))
}

/// The reference table of all variables, as Markdown.
pub fn env_reference_markdown() -> String {
    let mut s = String::from("| variable | unit | default | meaning |\n|---|---|---|---|\n");
    for o in ENV_OPTIONS {
        s += &format!("| `{}` | {} | {} | {} |\n", o.name, o.unit, o.default, o.help);
    }
    for o in OTHER_VARS {
        s += &format!("| `{}` | {} | {} | {} |\n", o.name, o.unit, o.default, o.help);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 18.6: values that parse but make the configuration invalid
    /// warn, name the variable, and keep the default (the global heap
    /// stayed unusable before).
    #[test]
    fn invalid_env_values_warn_and_keep_the_default() {
        for (name, value) in [
            ("TIERMEM_NEAR", "0"),
            ("TIERMEM_NEAR", "12K"),
            ("TIERMEM_NEAR", "5000"),
            ("TIERMEM_FAR", "0"),
            ("TIERMEM_FAR", "5000"),
            ("TIERMEM_FAR", "65T"),
        ] {
            let mut c = Config::new(4 << 30, 1 << 30);
            let w = c.apply_vars(|n| (n == name).then(|| value.to_owned()));
            assert_eq!(w.len(), 1, "{name}={value}: {w:?}");
            assert!(
                w[0].contains(name) && w[0].contains(value) && w[0].contains("keeping"),
                "{}",
                w[0]
            );
            assert_eq!(
                (c.virt_bytes, c.near_bytes),
                (4 << 30, 1 << 30),
                "{name}={value} kept the default"
            );
            c.validate().unwrap();
        }
        // Valid ones still apply, in any order.
        let mut c = Config::new(4 << 30, 1 << 30);
        let w = c.apply_vars(|n| match n {
            "TIERMEM_FAR" => Some("16M".into()),
            "TIERMEM_NEAR" => Some("4M".into()),
            _ => None,
        });
        assert!(w.is_empty(), "{w:?}");
        assert_eq!((c.virt_bytes, c.near_bytes), (16 << 20, 4 << 20));
    }

    #[test]
    fn sizes_parse_and_format() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("512m").unwrap(), 512 << 20);
        assert_eq!(parse_size(" 1G ").unwrap(), 1 << 30);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert!(parse_size("").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(format_size(512 << 20), "512M");
        assert_eq!(format_size(3 << 29), "1.50G");
        assert_eq!(format_size(100), "100");
    }

    #[test]
    fn validation_names_the_problem() {
        let ok = Config::new(1 << 30, 512 << 20);
        ok.validate().unwrap();
        assert_eq!(
            Config::new(0, 4096).validate(),
            Err(ConfigError::Zero { what: "virt_bytes" })
        );
        assert!(matches!(
            Config::new(4097, 4096 * 4).validate(),
            Err(ConfigError::Unaligned { .. })
        ));
        assert!(matches!(
            Config::new(1 << 20, 100).validate(),
            Err(ConfigError::BudgetTooSmall { .. })
        ));
        assert!(matches!(
            Config::new(1 << 20, 0).validate(),
            Err(ConfigError::Zero { what: "near_bytes" })
        ));
        let mut c = Config::new(1 << 20, 1 << 20);
        c.page_size = PageSize::Huge2M;
        assert!(matches!(c.validate(), Err(ConfigError::Unaligned { .. })));
        let mut c = Config::new(1 << 20, 1 << 19);
        c.evict_batch_pages = 0;
        assert!(matches!(c.validate(), Err(ConfigError::BadValue { .. })));
        // A region smaller than the minimum budget is fine: it never evicts.
        Config::new(4096, 4096).validate().unwrap();
        let e = Config::new(1 << 20, 4096).validate().unwrap_err().to_string();
        assert!(e.contains("minimum"), "{e}");
    }

    #[test]
    fn env_overrides_and_warns() {
        let mut c = Config::new(1 << 30, 1 << 29);
        let vars = [
            ("TIERMEM_NEAR", "64M"),
            ("TIERMEM_FAR", "2G"),
            ("TIERMEM_PAGE_SIZE", "3K"),
            ("TIERMEM_FAR_FILE", "/tmp"),
            ("TIERMEM_FAR_DIRECT", "1"),
            ("TIERMEM_EVICT_BATCH", "999"),
            ("TIERMEM_FAULT_PATH", "handler-thread"),
            ("TIERMEM_HANDLER_CPUS", "0,2-3"),
        ];
        let w = c.apply_vars(|n| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string()));
        assert_eq!(c.near_bytes, 64 << 20);
        assert_eq!(c.virt_bytes, 2 << 30);
        assert_eq!(c.page_size, PageSize::Base4K, "bad value keeps the default");
        assert_eq!(
            c.far,
            FarStoreConfig::File {
                path: "/tmp".into(),
                direct: true
            }
        );
        assert_eq!(c.evict_batch_pages, 64);
        assert_eq!(c.fault_path, FaultPath::HandlerThread);
        assert_eq!(c.handler_cpus, vec![0, 2, 3]);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("TIERMEM_PAGE_SIZE") && w[1].contains("TIERMEM_EVICT_BATCH"));
        assert!(env_reference_markdown().contains("TIERMEM_NEAR"));
        assert!(c.describe().contains("handler-thread"));
    }
}
