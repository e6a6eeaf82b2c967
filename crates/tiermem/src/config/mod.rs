//! Region configuration, its validation, and the `TIERMEM_*` environment
//! variables.
//!
//! Every option has one row in the table of [`options`] (variable,
//! `tiermem run` flag, form of value and its parser, default, help), which
//! the library, the preload and the command read, and from which `tiermem
//! env` and the reference table of `docs/configuration.md` are made. Sizes
//! accept `K`, `M`, `G`, `T` suffixes (binary). An invalid value gives a
//! warning naming the variable and keeps the default; it is never ignored
//! silently; an empty value is unset.
//!
//! The files: [`modes`] (the named values of a region's settings),
//! [`parse`] (the value parsers), [`options`] and its rows in `table.rs`,
//! and here [`Config`] itself.
//!
//! ```
//! use tiermem::config::{Config, parse_size};
//! let mut c = Config::new(parse_size("1G").unwrap(), parse_size("512M").unwrap());
//! c.evict_batch_pages = 32;
//! c.validate().unwrap();
//! ```

pub mod modes;
pub mod options;
pub mod parse;
mod table;

pub use modes::{
    DirtyTracking, FarStoreConfig, FaultPath, HugeKind, InstallMethod, KernelAccess, OnFork, PageSize,
};
pub use parse::{
    footprint_in_report, format_size, parse_count, parse_cpu_list, parse_near, parse_on_off, parse_page_size,
    parse_share, parse_size, NearSpec,
};

use crate::policy::PolicyKind;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use thiserror::Error;

fn default_true() -> bool {
    true
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
    /// are unmapped with one call (one TLB shootdown). A faulting thread's
    /// batch is at most a quarter of the near budget (so that with 2 MiB
    /// pages one thread's batch does not take every page another could
    /// evict).
    pub evict_batch_pages: usize,
    /// Handler threads (handler-thread design only).
    pub handler_threads: usize,
    /// CPUs to pin handler threads to, round robin (empty: not pinned).
    pub handler_cpus: Vec<usize>,
    /// Dedicated data-mover threads (paper 1, III.D): they prefetch ahead
    /// of demand and evict behind it. 0: all movement happens in faults.
    pub movers: usize,
    /// `movers = auto`: one mover (none on a single usable CPU) that
    /// stands down while the application keeps every CPU busy.
    #[serde(default)]
    pub movers_auto: bool,
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
            movers_auto: false,
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
        if !self.virt_bytes.is_multiple_of(ps) {
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
        self.apply_vars(|name| tiermem_sys::env::var(name))
    }

    /// Same, from any lookup (for tests). An empty value is unset; a
    /// value that is not understood is a warning, and the setting keeps
    /// what it had (the default, for a region built from the environment).
    pub fn apply_vars(&mut self, lookup: impl Fn(&str) -> Option<String>) -> Vec<String> {
        let mut warnings = Vec::new();
        for opt in options::OPTIONS.iter().filter(|o| o.is_region()) {
            if let Some(v) = opt.value_in(&lookup) {
                // A value that parses but makes the configuration invalid
                // (TIERMEM_NEAR=0, TIERMEM_FAR=5000) is refused the same
                // way: the docs promise a warning and the default kept.
                let before = self.clone();
                let valid_before = before.validate().is_ok();
                let applied = opt.apply(self, &v).and_then(|()| match self.validate() {
                    Err(e) if valid_before => Err(e.to_string()),
                    _ => Ok(()),
                });
                if let Err(e) = applied {
                    *self = before;
                    warnings.push(opt.ignoring(&v, &e, &opt.region_keeping()));
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
                if self.movers_auto {
                    "auto".to_owned()
                } else {
                    self.movers.to_string()
                },
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

/// Whether `TIERMEM_VERBOSE` asks for the effective configuration on stderr.
pub fn verbose_from_env() -> bool {
    options::VERBOSE
        .value()
        .map_or(options::VERBOSE.default_on(), |v| {
            parse_on_off(&v).unwrap_or(true)
        })
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
        assert!(options::markdown().contains("TIERMEM_NEAR"));
        assert!(c.describe().contains("handler-thread"));
    }
}
