//! Transparent mode's settings, from `TIERMEM_*` variables (what `tiermem
//! run` sets from its options):
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `TIERMEM_NEAR` | near budget of the heap: a size (`8G`) or a share of physical memory (`50%`); `100%` means no tiering (a heap on the chosen pages) | `100%` |
//! | `TIERMEM_FAR` | size of the heap's address range | twice the physical memory |
//! | `TIERMEM_PAGE_SIZE` | `4k`, `thp`, `2m` (tiered or not) or `1g` (not tiered) | `4k` |
//! | `TIERMEM_THRESHOLD` | allocations of at least this size go to the heap | `1M` |
//! | `TIERMEM_STATIC` | take over the executable's large `.bss`/`.data` (`on`/`off`) | `on` |
//! | `TIERMEM_REPORT` | write a JSON report here at exit | (none) |
//! | `TIERMEM_QUIET` | `1`: no summary on stderr at exit | `0` |
//! | `TIERMEM_FOLLOW_EXEC` | `1`: programs that this one's children `exec` are tiered too (each writes its report with its pid appended); an `exec` without `fork` (a wrapper script) always stays tiered | `0` |
//! | `TIERMEM_FALLBACK` | when the heap cannot be set up in the program the user started: `error` ends it with exit status 1 and one line naming the problem; `untiered` runs it without tiermem (a program it execs after a fork always runs untiered then, with a warning) | `error` |
//! | `TIERMEM_TRANSPARENT` | `0` turns transparent mode off | `1` |
//! | `TIERMEM_FAULT_PATH` | as for any region; an MPI rank (`OMPI_COMM_WORLD_RANK`, `PMIX_RANK`, `PMI_RANK` set) defaults to `handler-thread`, which serves its peers' `process_vm_readv`/`writev` | `in-context` |
//!
//! The region settings (`TIERMEM_POLICY`, `TIERMEM_MOVERS`,
//! `TIERMEM_MOVER_CPUS`, `TIERMEM_FAR_FILE`, `TIERMEM_PREFETCH`, ...) apply
//! to the tiered heap as they do to any region (docs/configuration.md).

use std::path::PathBuf;
use tiermem::config::{format_size, parse_share, parse_size, Config, PageSize};
use tiermem::heap::{Heap, HeapConfig, HugeKind};
use tiermem::region::NearBudget;

/// Variables this module reads itself (the rest go to `Config`).
const OWN: [&str; 10] = [
    "TIERMEM_NEAR",
    "TIERMEM_FAR",
    "TIERMEM_PAGE_SIZE",
    "TIERMEM_THRESHOLD",
    "TIERMEM_STATIC",
    "TIERMEM_REPORT",
    "TIERMEM_QUIET",
    "TIERMEM_FOLLOW_EXEC",
    "TIERMEM_TRANSPARENT",
    "TIERMEM_FALLBACK",
];

/// Default threshold: see docs/transparent.md for the measurement.
pub const DEFAULT_THRESHOLD: usize = 1 << 20;

/// The heap's near budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Near {
    /// All of it: no tiering.
    Full,
    /// This many bytes.
    Bytes(u64),
}

/// Everything transparent mode needs to know.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Transparent mode on.
    pub enabled: bool,
    /// Near budget.
    pub near: Near,
    /// Heap address range.
    pub heap_bytes: u64,
    /// Page kind of the heap.
    pub page: HugeKind,
    /// Requests of at least this many bytes go to the heap.
    pub threshold: usize,
    /// Take over large static arrays.
    pub statics: bool,
    /// JSON report path.
    pub report: Option<PathBuf>,
    /// No summary at exit.
    pub quiet: bool,
    /// Tier programs that forked children `exec`.
    pub follow_exec: bool,
    /// Run untiered when the heap cannot be set up (else exit status 1).
    pub fallback_untiered: bool,
    /// `TIERMEM_VERBOSE`.
    pub verbose: bool,
    /// The tiered region's configuration (sizes filled in by
    /// `build_heap`).
    pub region: Config,
    /// Physical memory.
    pub mem_total: u64,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

fn flag(name: &str, default: bool) -> Result<bool, String> {
    match var(name).as_deref() {
        None => Ok(default),
        Some("1" | "on" | "yes" | "true") => Ok(true),
        Some("0" | "off" | "no" | "false") => Ok(false),
        Some(v) => Err(format!("{name}={v:?}: expected on or off")),
    }
}

/// Whether this process is a rank of an MPI job (Open MPI, MPICH, Slurm's
/// PMI). Its peers may copy from and into its memory with
/// `process_vm_readv`/`writev` (single-copy shared-memory transports): a
/// remote access that the in-context path cannot serve (the kernel returns
/// EFAULT to the peer), and that a handler thread serves like any fault.
fn mpi_rank() -> bool {
    ["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MPI_LOCALRANKID"]
        .iter()
        .any(|v| var(v).is_some())
}

impl Settings {
    /// Reads the environment. Errors name the variable and the fix.
    pub fn from_env() -> Result<Settings, String> {
        let mem_total = tiermem::SystemInfo::probe().mem_total_bytes.max(1 << 30);
        let page = match var("TIERMEM_PAGE_SIZE").as_deref() {
            None => HugeKind::Base4K,
            Some(v) => HugeKind::from_name(v)
                .ok_or_else(|| format!("TIERMEM_PAGE_SIZE={v:?}: expected 4k, thp, 2m or 1g"))?,
        };
        let near = match var("TIERMEM_NEAR").as_deref() {
            None | Some("100%") => Near::Full,
            Some(v) => Near::Bytes(parse_share(v, mem_total).map_err(|e| format!("TIERMEM_NEAR: {e}"))?),
        };
        let heap_bytes = match var("TIERMEM_FAR") {
            None => (2 * mem_total).next_multiple_of(1 << 30),
            Some(v) => parse_size(&v).map_err(|e| format!("TIERMEM_FAR: {e}"))?,
        };
        let threshold = match var("TIERMEM_THRESHOLD") {
            None => DEFAULT_THRESHOLD,
            Some(v) => parse_size(&v)
                .map_err(|e| format!("TIERMEM_THRESHOLD: {e}"))?
                .max(4096) as usize,
        };
        let mut region = Config::new(heap_bytes, heap_bytes);
        // Region settings from the environment, except the ones above.
        for w in region.apply_vars(|name| if OWN.contains(&name) { None } else { var(name) }) {
            eprintln!("{w}");
        }
        if var("TIERMEM_FAULT_PATH").is_none() && mpi_rank() {
            region.fault_path = tiermem::FaultPath::HandlerThread;
        }
        Ok(Settings {
            enabled: flag("TIERMEM_TRANSPARENT", true)?,
            near,
            heap_bytes,
            page,
            threshold,
            statics: flag("TIERMEM_STATIC", true)?,
            report: var("TIERMEM_REPORT").map(PathBuf::from),
            quiet: flag("TIERMEM_QUIET", false)?,
            follow_exec: flag("TIERMEM_FOLLOW_EXEC", false)?,
            fallback_untiered: match var("TIERMEM_FALLBACK").as_deref() {
                None | Some("error") => false,
                Some("untiered") => true,
                Some(v) => return Err(format!("TIERMEM_FALLBACK={v:?}: expected error or untiered")),
            },
            verbose: tiermem::config::verbose_from_env(),
            region,
            mem_total,
        })
    }

    /// The far file's name, when the far store is a named file (not a
    /// directory's unnamed file, nor memory).
    pub fn named_far_file(&self) -> Option<&std::path::Path> {
        match &self.region.far {
            tiermem::FarStoreConfig::File { path, .. } if !path.is_dir() => Some(path),
            _ => None,
        }
    }

    /// For a program the tiered one runs (fork + exec): a named far file
    /// is the program's that the user started, so this one gets an
    /// unnamed file in the same directory instead.
    pub fn unnamed_far_file(&mut self) {
        if let Some(p) = self.named_far_file() {
            let dir = p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."))
                .to_path_buf();
            if let tiermem::FarStoreConfig::File { path, .. } = &mut self.region.far {
                *path = dir;
            }
        }
    }

    /// Whether the heap is tiered (a near budget below the whole).
    pub fn tiered(&self) -> bool {
        matches!(self.near, Near::Bytes(_))
    }

    /// The region configuration of a tiered range of `bytes`.
    pub fn region_config(&self, bytes: u64) -> Result<Config, String> {
        let Near::Bytes(near) = self.near else {
            return Err("not tiered".into());
        };
        let mut c = self.region.clone();
        c.page_size = match self.page {
            HugeKind::Base4K => PageSize::Base4K,
            HugeKind::Thp => PageSize::Thp2M,
            HugeKind::Huge2M => PageSize::Huge2M,
            HugeKind::Huge1G => {
                return Err(
                    "1 GiB pages cannot be tiered: use --page-size 2m for a tiered huge-page heap, \
                            or --near 100% for a heap on 1 GiB pages"
                        .into(),
                )
            }
        };
        // An unmodified program may fork and use its memory in the child.
        c.on_fork = tiermem::OnFork::Copy;
        let ps = c.page_size.bytes() as u64;
        c.virt_bytes = bytes.next_multiple_of(ps);
        c.near_bytes = near.min(c.virt_bytes).next_multiple_of(ps);
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    /// Builds the heap these settings describe, with its near memory from
    /// `budget` when tiered.
    pub fn build_heap(&self, budget: Option<NearBudget>) -> Result<Heap, String> {
        let config = if self.tiered() {
            let mut c = HeapConfig::tiered(self.region_config(self.heap_bytes)?);
            c.budget = budget;
            c
        } else {
            HeapConfig::huge(self.heap_bytes, self.page)
        };
        Heap::new(config).map_err(|e| e.to_string())
    }

    /// One line for messages.
    pub fn describe(&self) -> String {
        match self.near {
            Near::Full => format!("{} pages, no tiering", self.page.name()),
            Near::Bytes(n) => format!(
                "tiered: near {} over {}, {} pages, policy {}, movers {}{}",
                format_size(n),
                format_size(self.heap_bytes),
                self.page.name(),
                self.region.policy,
                self.region.movers,
                match self.region.fault_path {
                    tiermem::FaultPath::HandlerThread => ", fault path handler-thread",
                    _ => "",
                }
            ),
        }
    }
}

/// Whether this process is the one `tiermem run` (or the user) started,
/// possibly after it `exec`ed another image (a shell or Python wrapper
/// script that `exec`s the real program keeps its pid), or a child it
/// forked and that `exec`ed a program of its own. The first process that
/// loads the library records its pid in `TIERMEM_ROOT_PID`.
pub fn is_root_process() -> bool {
    let pid = std::process::id().to_string();
    match std::env::var("TIERMEM_ROOT_PID") {
        Ok(root) => root == pid,
        Err(_) => {
            // SAFETY of the environment change: this runs in the library's
            // constructor, before the program's main and its threads.
            std::env::set_var("TIERMEM_ROOT_PID", &pid);
            true
        }
    }
}
