//! Transparent mode's settings, from `TIERMEM_*` variables (what `tiermem
//! run` sets from its options, or the user under `LD_PRELOAD`). Each is a
//! row of the one option table (`tiermem::config::options`: its name,
//! parser and default, printed by `tiermem env`, docs/configuration.md),
//! read through it here; this module reads `TIERMEM_NEAR`,
//! `TIERMEM_FAR`, `TIERMEM_PAGE_SIZE`, `TIERMEM_THRESHOLD`,
//! `TIERMEM_STATIC`, `TIERMEM_REPORT`, `TIERMEM_QUIET`,
//! `TIERMEM_FOLLOW_EXEC`, `TIERMEM_FALLBACK` and `TIERMEM_TRANSPARENT`
//! itself; the region settings (`TIERMEM_POLICY`, `TIERMEM_MOVERS`,
//! `TIERMEM_FAR_FILE`, ...) apply to the tiered heap as to any region. A
//! value that is not understood is a warning and the default, never the
//! end of tiering. Under a job launcher (`tiermem::launcher`: mpirun,
//! srun) a share of physical memory (`TIERMEM_NEAR=50%`,
//! `TIERMEM_NEAR_NODE`) and the heap's default size are of the node,
//! divided among its ranks, and the report and a named far file get the
//! rank in their names. An MPI rank (`OMPI_COMM_WORLD_RANK`, `PMIX_RANK`,
//! `PMI_RANK` set) defaults to `TIERMEM_FAULT_PATH` = `handler-thread`,
//! which serves its peers' `process_vm_readv`/`writev`, and says so.

use std::path::PathBuf;
use tiermem::config::options::{self, Opt};
use tiermem::config::{format_size, parse_on_off, Config, PageSize};
use tiermem::heap::{Heap, HeapConfig, HugeKind};
use tiermem::launcher::{per_rank_path, NodeShare};
use tiermem::region::NearBudget;

/// Region settings this module reads itself (the other region settings
/// go to `Config`).
const OWN: [&Opt; 3] = [&options::NEAR, &options::FAR, &options::PAGE_SIZE];

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
    /// What the budget was a share of, when given as one (`25% of
    /// physical memory (23.5G)`).
    pub near_share: Option<String>,
    /// The program's footprint that a `%fp` budget was a share of.
    pub footprint: Option<u64>,
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
    /// This process's place in its job, when a launcher started it.
    pub ranks: Option<tiermem::launcher::Ranks>,
    /// The launcher's variables that could not be used.
    pub launch_warnings: Vec<String>,
    /// Why the fault path is handler-thread when nobody asked for it.
    pub fault_path_why: Option<String>,
}

fn var(name: &str) -> Option<String> {
    tiermem_sys::env::var(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// On/off option `o`, by the one on/off parser; its default when unset
/// or not understood (warned about).
fn flag(o: &Opt) -> bool {
    parsed(o, o.default_on(), parse_on_off)
}

/// Option `o` parsed by `parse`, else (unset, or not understood: one line
/// on stderr naming the variable, the documented rule) `default`, which
/// is the table's.
fn parsed<T>(o: &Opt, default: T, parse: impl Fn(&str) -> Result<T, String>) -> T {
    match o.value() {
        None => default,
        Some(v) => parse(&v).unwrap_or_else(|why| {
            eprintln!("{}", o.ignoring(&v, &why, &o.keeping()));
            default
        }),
    }
}

/// Option `o` parsed by `parse`, else the table's default (a value; a
/// test checks that each parses with the option's parser).
fn with_table_default<T>(o: &Opt, parse: impl Fn(&str) -> Result<T, String>) -> T {
    let v = o.default_value().expect("the option's default is a value");
    let default = parse(v).unwrap_or_else(|e| panic!("{}'s default {v:?}: {e}", o.var));
    parsed(o, default, parse)
}

/// A relative report path, made absolute against the directory the
/// program started in (and so passed on to the programs it runs): a
/// program that changes directory, or a helper it runs elsewhere, would
/// otherwise look for it, and write it, somewhere else.
fn absolute_report(p: PathBuf) -> PathBuf {
    if p.is_absolute() {
        return p;
    }
    match std::env::current_dir() {
        Ok(d) => {
            let abs = d.join(p);
            // SAFETY of the environment change: the library's constructor
            // runs before the program's main and its threads.
            tiermem_sys::env::set_var(options::REPORT.var, &abs);
            abs
        }
        Err(_) => p,
    }
}

/// Whether this process is a rank of an MPI job (Open MPI, MPICH, Slurm's
/// PMI). Its peers may copy from and into its memory with
/// `process_vm_readv`/`writev` (single-copy shared-memory transports): a
/// remote access that the in-context path cannot serve (the kernel returns
/// EFAULT to the peer), and that a handler thread serves like any fault.
fn mpi_rank() -> Option<&'static str> {
    ["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MPI_LOCALRANKID"]
        .into_iter()
        .find(|v| var(v).is_some())
}

impl Settings {
    /// Reads the environment. A value that is not understood is one
    /// warning naming the variable, and its default is kept (the same
    /// rule as every `TIERMEM_*` variable's, docs/configuration.md).
    pub fn from_env() -> Settings {
        let mem_total = tiermem::SystemInfo::probe().mem_total_bytes.max(1 << 30);
        let page = with_table_default(&options::PAGE_SIZE, options::parse_page);
        let min_near = 4 * match page {
            HugeKind::Base4K => 4096,
            _ => 2 << 20,
        };
        let launch = tiermem::launcher::from_env();
        let node = NodeShare::new(mem_total, launch.ranks.as_ref());
        // The name as given stays in the environment (a program this one
        // runs names its own the same way); this rank's is substituted.
        let report = options::REPORT
            .value()
            .map(|v| per_rank_path(&absolute_report(PathBuf::from(v)), launch.ranks.as_ref()).0);
        let near_node = options::NEAR_NODE.value().filter(|v| {
            let both = options::NEAR.value().is_some();
            if both {
                eprintln!(
                    "tiermem: ignoring TIERMEM_NEAR_NODE={v:?}: TIERMEM_NEAR is set too; \
                     that per-process budget is used"
                );
            }
            !both
        });
        let near_opt = if near_node.is_some() {
            &options::NEAR_NODE
        } else {
            &options::NEAR
        };
        let full = options::NEAR.default_value();
        let spec = parsed(near_opt, None, |v| {
            if Some(v) == full && near_node.is_none() {
                return Ok(None);
            }
            let n = match near_node {
                Some(_) => node.near_node(v)?,
                None => node.near(v, report.as_deref())?,
            };
            let b = n.bytes;
            if page == HugeKind::Huge1G {
                return Err("1 GiB pages cannot be tiered (TIERMEM_PAGE_SIZE=2m tiers on huge pages)".into());
            }
            if b < min_near {
                return Err(format!("below the minimum of 4 pages ({min_near} bytes)"));
            }
            Ok(Some(n))
        });
        let near = spec.as_ref().map_or(Near::Full, |n| Near::Bytes(n.bytes));
        let (near_share, footprint) = spec.map_or((None, None), |n| (n.share, n.footprint));
        let heap_default = node.default_heap_bytes();
        let heap_bytes = parsed(&options::FAR, heap_default, |v| options::FAR.kind.size(v));
        let threshold_of = |v: &str| Ok(options::THRESHOLD.kind.size(v)?.max(4096) as usize);
        let threshold = with_table_default(&options::THRESHOLD, threshold_of);
        let mut region = Config::new(heap_bytes, heap_bytes);
        // Region settings from the environment, except the ones above.
        for w in region.apply_vars(|name| {
            if OWN.iter().any(|o| o.var == name) {
                None
            } else {
                var(name)
            }
        }) {
            eprintln!("{w}");
        }
        // A named far file, one per rank.
        if let tiermem::FarStoreConfig::File { path, .. } = &mut region.far {
            if !path.is_dir() {
                *path = per_rank_path(path, launch.ranks.as_ref()).0;
            }
        }
        let mut fault_path_why = None;
        if let Some(v) = mpi_rank().filter(|_| options::FAULT_PATH.value().is_none()) {
            region.fault_path = tiermem::FaultPath::HandlerThread;
            fault_path_why = Some(format!(
                "{v} is set: an MPI rank's peers' single-copy transfers need it; TIERMEM_FAULT_PATH=in-context \
                 overrides"
            ));
        }
        Settings {
            enabled: flag(&options::TRANSPARENT),
            near,
            near_share,
            heap_bytes,
            page,
            threshold,
            statics: flag(&options::STATIC),
            report,
            footprint,
            quiet: flag(&options::QUIET),
            follow_exec: flag(&options::FOLLOW_EXEC),
            fallback_untiered: with_table_default(&options::FALLBACK, options::parse_fallback),
            verbose: tiermem::config::verbose_from_env(),
            region,
            mem_total,
            ranks: launch.ranks,
            launch_warnings: launch.warnings,
            fault_path_why,
        }
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
        // Valgrind runs the program on its own CPU and does not emulate
        // userfaultfd: tiered pages read zeros or the run hangs.
        // (It preloads its own core into every program it runs.)
        if std::env::var("LD_PRELOAD").is_ok_and(|p| p.contains("/vgpreload_")) {
            return Err(
                "the program runs under valgrind, which cannot emulate userfaultfd \
                        (tiered pages would read wrong, or the run hang)"
                    .into(),
            );
        }
        let config = if self.tiered() {
            let mut c = HeapConfig::tiered(self.region_config(self.heap_bytes)?);
            c.budget = budget;
            c
        } else {
            HeapConfig::huge(self.heap_bytes, self.page)
        };
        Heap::new(config).map_err(|e| match tiermem_sys::mm::address_space_limit() {
            // A batch system's h_vmem or `ulimit -v`: say so, and what fits.
            Some(limit) if e.to_string().contains("mmap of") => format!(
                "{e} (the address-space limit, ulimit -v, is {}: a smaller --heap-size fits, \
                 with --far DIR so that the far store is a file and not memory)",
                format_size(limit)
            ),
            _ => e.to_string(),
        })
    }

    /// One line for messages: the rank (under a launcher), then the heap.
    pub fn describe(&self) -> String {
        let rank = self.ranks.as_ref().map_or(String::new(), |r| r.describe() + ": ");
        rank + &self.describe_heap()
    }

    fn describe_heap(&self) -> String {
        match self.near {
            Near::Full => format!("{} pages, no tiering", self.page.name()),
            Near::Bytes(n) => format!(
                "tiered: near {}{} over {}, {} pages, policy {}, movers {}{}",
                format_size(n),
                match &self.near_share {
                    Some(s) => format!(" ({s})"),
                    None => String::new(),
                },
                format_size(self.heap_bytes),
                self.page.name(),
                self.region.policy,
                if self.region.movers_auto {
                    "auto".to_owned()
                } else {
                    self.region.movers.to_string()
                },
                match (self.region.fault_path, &self.fault_path_why) {
                    (tiermem::FaultPath::HandlerThread, Some(why)) => {
                        format!(", fault path handler-thread ({why})")
                    }
                    (tiermem::FaultPath::HandlerThread, None) => ", fault path handler-thread".into(),
                    _ => String::new(),
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
///
/// A process may find no `TIERMEM_ROOT_PID` and still not be the first: its
/// parent passed it the environment it was itself started with (Go's
/// `exec.Command`, a copy of `/proc/self/environ`), from before the
/// library set the variable. Such a process is the first if its parent is
/// `tiermem run` (`TIERMEM_LAUNCHER_PID`), or if its parent has not loaded
/// this library (a static wrapper started it); otherwise its parent's pid
/// stands in for the root's (any pid but its own says "not the program
/// the user started", to it and to what it runs).
pub fn is_root_process() -> bool {
    if tiermem_sys::env::var_os(options::ROOT_PID.var).is_none() {
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        let launcher = tiermem_sys::env::var(options::LAUNCHER_PID.var).and_then(|v| v.parse::<u32>().ok());
        let root = if launcher != Some(parent) && maps_this_library(parent) == Some(true) {
            parent
        } else {
            std::process::id()
        };
        // SAFETY of the environment change: this runs in the library's
        // constructor, before the program's main and its threads.
        tiermem_sys::env::set_var(options::ROOT_PID.var, root.to_string());
    }
    started_program()
}

/// Whether process `pid` has loaded this library: mapped the same file (by
/// device and inode) as code. A debugger maps the libraries of the program
/// it runs to read them, but not executable. None where its maps cannot be
/// read.
fn maps_this_library(pid: u32) -> Option<bool> {
    // Device and inode of a maps line of code.
    let file = |line: &str| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() >= 6 && f[4] != "0" && f[1].contains('x')).then(|| (f[3].to_owned(), f[4].to_owned()))
    };
    let here = maps_this_library as *const () as usize;
    let own = std::fs::read_to_string("/proc/self/maps").ok()?;
    let ours = own.lines().find_map(|l| {
        let (lo, hi) = l.split_whitespace().next()?.split_once('-')?;
        let (lo, hi) = (
            usize::from_str_radix(lo, 16).ok()?,
            usize::from_str_radix(hi, 16).ok()?,
        );
        (lo..hi).contains(&here).then(|| file(l)).flatten()
    })?;
    let theirs = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    Some(theirs.lines().any(|l| file(l).as_ref() == Some(&ours)))
}

/// Whether this process is the program the user started (see
/// [`is_root_process`], which records it). `getpid` each time: the child of
/// a `vfork` shares this memory.
pub fn started_program() -> bool {
    tiermem_sys::env::var(options::ROOT_PID.var) == Some(std::process::id().to_string())
}
