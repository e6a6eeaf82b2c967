//! The NAS Parallel Benchmarks (NPB-CPP, the OpenMP version) as unmodified
//! external programs: built with their own Makefiles from a tree the user
//! has, and run plain, under `tiermem run`, or under a kernel-swap memory
//! limit. Every run is judged by the benchmark's own verification.
//!
//! The source tree stays where the user keeps it: [`prepare`] copies its
//! `NPB-OMP` directory into a build directory (the Makefiles build in
//! place), once per [`Variant`]. `tiermem bench npb` drives the experiments.

use crate::kernel_swap::{LimitedRun, SwapKind};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The eight kernels and pseudo-applications, in the order of NPB's reports.
pub const KERNELS: [&str; 8] = ["cg", "mg", "ft", "sp", "bt", "lu", "is", "ep"];

/// The define that makes NPB-CPP keep its arrays in static storage
/// (`.bss`) instead of allocating them.
pub const STATIC_ARRAYS_DEFINE: &str = "DO_NOT_ALLOCATE_ARRAYS_WITH_DYNAMIC_MEMORY_AND_AS_SINGLE_DIMENSION";

/// Where a build keeps its arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// The default build: arrays from `malloc`/`new` (the heap).
    Dynamic,
    /// Built with [`STATIC_ARRAYS_DEFINE`]: arrays in `.bss`.
    Static,
}

impl Variant {
    /// `dynamic` or `static`.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Dynamic => "dynamic",
            Variant::Static => "static",
        }
    }

    /// Parses `dynamic` or `static`.
    pub fn parse(s: &str) -> Option<Variant> {
        match s {
            "dynamic" => Some(Variant::Dynamic),
            "static" => Some(Variant::Static),
            _ => None,
        }
    }
}

/// Finds the `NPB-OMP` directory under what the user gave: the repository
/// root or `NPB-OMP` itself.
pub fn find_omp_tree(npb_dir: &Path) -> Result<PathBuf, String> {
    for cand in [npb_dir.join("NPB-OMP"), npb_dir.to_path_buf()] {
        if cand.join("config/make.def").is_file() && cand.join("CG").is_dir() {
            return Ok(cand);
        }
    }
    Err(format!(
        "--npb-dir {}: no NPB-OMP tree there (expected NPB-OMP/config/make.def and NPB-OMP/CG; \
         the NPB-CPP sources are at https://github.com/GMAP/NPB-CPP)",
        npb_dir.display()
    ))
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// The build tree of `variant` under `build_dir`, copied from the user's
/// tree on first use.
pub fn prepare(npb_dir: &Path, build_dir: &Path, variant: Variant) -> Result<PathBuf, String> {
    let source = find_omp_tree(npb_dir)?;
    let tree = build_dir.join(variant.name()).join("NPB-OMP");
    if !tree.join("config/make.def").is_file() {
        let _ = std::fs::remove_dir_all(&tree);
        copy_tree(&source, &tree)
            .map_err(|e| format!("copying {} to {}: {e}", source.display(), tree.display()))?;
    }
    std::fs::create_dir_all(tree.join("bin")).map_err(|e| format!("{}: {e}", tree.display()))?;
    Ok(tree)
}

/// Builds `kernel` of `class` in `tree` (from [`prepare`]) with NPB's own
/// Makefiles, unless it is already built; returns the binary.
pub fn build(tree: &Path, variant: Variant, kernel: &str, class: char) -> Result<PathBuf, String> {
    let binary = tree.join("bin").join(format!("{kernel}.{class}"));
    if binary.is_file() {
        return Ok(binary);
    }
    let log_path = tree.join(format!("build-{kernel}.{class}.log"));
    let log = std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let mut make = Command::new("make");
    make.current_dir(tree)
        .arg(kernel)
        .arg(format!("CLASS={class}"))
        .stdout(log)
        .stderr(log2);
    if variant == Variant::Static {
        // make.def's flags plus the define; a command-line variable reaches
        // the sub-makes too.
        let flags = format!("-O3 -fopenmp -mcmodel=medium -D{STATIC_ARRAYS_DEFINE}");
        make.arg(format!("CFLAGS={flags}"));
    }
    let status = make.status().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            "make not found: install make and g++ (apt-get install build-essential)".to_string()
        }
        _ => format!("make: {e}"),
    })?;
    if !status.success() || !binary.is_file() {
        return Err(format!(
            "building {kernel}.{class} ({}) failed ({status}): see {}",
            variant.name(),
            log_path.display()
        ));
    }
    Ok(binary)
}

/// How a benchmark is started.
#[derive(Clone, Debug)]
pub enum Launch {
    /// Directly, with no memory limit.
    Plain,
    /// Under `tiermem run`; the harness adds `--quiet --report`.
    Tiermem {
        /// The `tiermem` binary.
        exe: PathBuf,
        /// `tiermem run`'s options.
        options: Vec<String>,
    },
    /// Inside a memory cgroup limited to `limit_bytes`, swapping to zram
    /// ([`LimitedRun`]).
    KernelSwap {
        /// The cgroup's memory limit.
        limit_bytes: u64,
        /// Size of the zram swap device.
        swap_bytes: u64,
    },
}

/// What `tiermem run`'s report says about a run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TiermemFigures {
    /// Bytes served by tiermem: heap allocations plus static sections.
    pub tiered_bytes: u64,
    /// Page faults served (all kinds, heap and static sections).
    pub faults: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Bytes brought in from the far store.
    pub bytes_in: u64,
    /// Bytes written out to the far store.
    pub bytes_out: u64,
    /// Time the application's threads spent in faults, in seconds.
    pub fault_seconds: f64,
    /// Heap bytes mapped on 1 GiB, 2 MiB, THP and 4 KiB pages.
    pub bytes_1g: u64,
    /// See `bytes_1g`.
    pub bytes_2m: u64,
    /// See `bytes_1g`.
    pub bytes_thp: u64,
    /// See `bytes_1g`.
    pub bytes_4k: u64,
    /// Allocations that fell back to a smaller page size.
    pub fallbacks: u64,
    /// What the static sections became (`tiered`, `thp` or why nothing).
    pub statics: Vec<String>,
}

impl TiermemFigures {
    fn from_report(v: &serde_json::Value) -> TiermemFigures {
        let n = |v: &serde_json::Value, k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
        let mut f = TiermemFigures::default();
        let heap = &v["heap"];
        f.tiered_bytes = n(heap, "allocated_bytes");
        let mut add_region = |r: &serde_json::Value| {
            if r.is_null() {
                return;
            }
            f.faults += n(r, "faults_zero_fill") + n(r, "faults_far_fill") + n(r, "faults_write_protect");
            f.evictions += n(r, "evictions");
            f.bytes_in += n(r, "bytes_in");
            f.bytes_out += n(r, "bytes_out");
            f.fault_seconds += n(r, "fault_ns_total") as f64 * 1e-9;
        };
        add_region(&heap["region"]);
        for st in v["statics"].as_array().into_iter().flatten() {
            f.tiered_bytes += n(st, "bytes");
            f.statics.push(format!(
                "{} {} {}",
                st["section"].as_str().unwrap_or("?"),
                crate::report::mib(n(st, "bytes")),
                st["how"].as_str().unwrap_or("?")
            ));
            add_region(&st["stats"]);
        }
        let huge = &heap["huge"];
        f.bytes_1g = n(huge, "bytes_1g");
        f.bytes_2m = n(huge, "bytes_2m");
        f.bytes_thp = n(huge, "bytes_thp");
        f.bytes_4k = n(huge, "bytes_4k");
        f.fallbacks = n(huge, "fallbacks");
        f
    }
}

/// What the kernel-swap baseline reports.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SwapFigures {
    /// The cgroup's memory limit.
    pub limit_bytes: u64,
    /// Pages swapped out and in (system-wide counters over the run).
    pub swapped_out_pages: u64,
    /// See `swapped_out_pages`.
    pub swapped_in_pages: u64,
    /// The cgroup's peak usage.
    pub peak_bytes: u64,
    /// Killed by the OOM killer.
    pub oom_kill: bool,
}

/// One run of one benchmark.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResult {
    /// The benchmark's own timed section ("Time in seconds").
    pub npb_seconds: Option<f64>,
    /// The benchmark's "Mop/s total".
    pub mops: Option<f64>,
    /// From start to exit, including initialisation and tiermem's set-up.
    pub wall_seconds: f64,
    /// The benchmark printed its verification as successful.
    pub verified: bool,
    /// How the process ended.
    pub status: String,
    /// Killed at the time limit.
    pub timed_out: bool,
    #[serde(default)]
    /// User plus system CPU time of the process and its threads (plain and
    /// tiermem runs; `None` for kernel swap): on a machine shared with
    /// other work, steadier than any wall time.
    pub cpu_seconds: Option<f64>,
    /// Peak resident set (plain and tiermem runs: rusage of the process).
    pub max_rss_bytes: u64,
    /// `tiermem run`'s report.
    pub tiermem: Option<TiermemFigures>,
    /// The kernel-swap baseline's counters.
    pub swap: Option<SwapFigures>,
    /// The end of the output, kept when the run failed.
    pub output_tail: Option<String>,
}

impl RunResult {
    /// The benchmark's time if it verified, else `None`.
    /// NPB prints two decimals: a run under 10 ms has no usable time.
    pub fn seconds(&self) -> Option<f64> {
        self.npb_seconds.filter(|&s| self.verified && s >= 0.01)
    }

    /// CPU time if it verified, else `None`.
    pub fn cpu(&self) -> Option<f64> {
        self.cpu_seconds.filter(|&s| self.verified && s > 0.0)
    }

    /// Wall time if it verified, else `None`.
    pub fn wall(&self) -> Option<f64> {
        self.verified.then_some(self.wall_seconds)
    }
}

fn field(out: &str, key: &str) -> Option<f64> {
    out.lines()
        .find(|l| l.trim_start().starts_with(key))
        .and_then(|l| l.split('=').nth(1))
        .and_then(|v| v.trim().parse().ok())
}

/// Whether NPB's output says the run verified ("Verification = SUCCESSFUL"
/// in the results block; the kernels also print "VERIFICATION SUCCESSFUL").
pub fn verified(out: &str) -> bool {
    let says = |l: &str| {
        let l = l.trim();
        l.starts_with("Verification") && l.ends_with("SUCCESSFUL") && !l.contains("UNSUCCESSFUL")
    };
    out.lines().any(says) || out.contains("VERIFICATION SUCCESSFUL")
}

fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

fn reader(stream: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut r) = stream {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            s = String::from_utf8_lossy(&buf).into_owned();
        }
        s
    })
}

/// The files a run of `binary` maps from the page cache: the program and
/// the shared libraries `ldd` names.
fn program_files(binary: &Path) -> Vec<PathBuf> {
    let mut files = vec![binary.to_path_buf()];
    if let Ok(out) = Command::new("ldd").arg(binary).stderr(Stdio::null()).output() {
        let text = String::from_utf8_lossy(&out.stdout);
        files.extend(
            text.split_whitespace()
                .filter(|w| w.starts_with('/'))
                .map(PathBuf::from),
        );
    }
    files
}

/// Starts every run from a cold page cache for the program and its
/// libraries (those no other process maps: the kernel keeps mapped pages),
/// as a freshly started job does. Under a memory cgroup the run then reads
/// them in and they are charged to it, as a job's own text is. This matters
/// for the kernel-swap baseline: on Linux 6.18 (cgroup v1), a cgroup
/// charged with anonymous memory only was OOM-killed at its first swap-in
/// storm (reclaim found every anonymous page active and freed nothing in
/// its retries), at shares up to 87.5% of the footprint; with the program's
/// own ~3.4 MiB of text charged it swaps and completes (CG.A at 51%: OOM in
/// 0.5-1.3 s against VERIFICATION SUCCESSFUL in 35 s). Best effort: a file
/// that cannot be opened or dropped stays cached, and the run goes on.
pub fn cold_page_cache(binary: &Path) {
    for file in program_files(binary) {
        if let Ok(f) = std::fs::File::open(&file) {
            use std::os::fd::AsFd;
            let _ = tiermem_sys::file::drop_cache(f.as_fd());
        }
    }
}

static REPORT_SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Runs `binary` with `threads` OpenMP threads (pinned one per CPU from
/// CPU 0) as `launch` says, killing it after `limit`.
pub fn run(binary: &Path, threads: usize, launch: &Launch, limit: Duration) -> Result<RunResult, String> {
    cold_page_cache(binary);
    let mut cmd;
    let mut report = None;
    match launch {
        Launch::Plain | Launch::KernelSwap { .. } => cmd = Command::new(binary),
        Launch::Tiermem { exe, options } => {
            let seq = REPORT_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("tiermem-npb-{}-{seq}.json", std::process::id()));
            cmd = Command::new(exe);
            cmd.arg("run")
                .args(options)
                .arg("--quiet")
                .arg("--report")
                .arg(&path)
                .arg("--")
                .arg(binary);
            report = Some(path);
        }
    }
    cmd.env("OMP_NUM_THREADS", threads.to_string())
        .env("OMP_PROC_BIND", "true")
        .env("OMP_PLACES", "cores")
        .stdin(Stdio::null());
    let mut result = match launch {
        Launch::KernelSwap {
            limit_bytes,
            swap_bytes,
        } => {
            let out = LimitedRun::new(SwapKind::Zram, *limit_bytes)
                .swap_bytes(*swap_bytes)
                .capture_output()
                .timeout(limit)
                .run(&mut cmd)
                .map_err(|e| format!("kernel-swap baseline: {e}"))?;
            let text = out.stdout_text() + &out.stderr_text();
            RunResult {
                npb_seconds: field(&text, "Time in seconds"),
                mops: field(&text, "Mop/s total"),
                wall_seconds: out.wall.as_secs_f64(),
                verified: verified(&text),
                status: out.status.to_string(),
                timed_out: out.timed_out,
                cpu_seconds: None,
                max_rss_bytes: out.cgroup.max_usage_bytes,
                tiermem: None,
                swap: Some(SwapFigures {
                    limit_bytes: *limit_bytes,
                    swapped_out_pages: out.swapped_out_pages,
                    swapped_in_pages: out.swapped_in_pages,
                    peak_bytes: out.cgroup.max_usage_bytes,
                    oom_kill: out.cgroup.oom_kill > 0,
                }),
                output_tail: Some(tail(&text, 20)),
            }
        }
        _ => spawn_and_wait(&mut cmd, limit)?,
    };
    if let Some(path) = report {
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                result.tiermem = Some(TiermemFigures::from_report(&v));
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    if result.verified {
        result.output_tail = None;
    }
    Ok(result)
}

fn spawn_and_wait(cmd: &mut Command, limit: Duration) -> Result<RunResult, String> {
    use std::os::unix::process::CommandExt;
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    let pid = child.id();
    let out = reader(child.stdout.take());
    let err = reader(child.stderr.take());
    let mut timed_out = false;
    let (status, usage) = loop {
        match tiermem_sys::process::try_wait_usage(pid) {
            Ok(Some(done)) => break done,
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for {pid}: {e}")),
        }
        if !timed_out && start.elapsed() > limit {
            timed_out = true;
            let _ = tiermem_sys::process::kill_group(pid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let wall = start.elapsed().as_secs_f64();
    // Whatever the program left in its group would hold the pipes open.
    let _ = tiermem_sys::process::kill_group(pid, libc::SIGKILL);
    let text = out.join().unwrap_or_default() + &err.join().unwrap_or_default();
    Ok(RunResult {
        npb_seconds: field(&text, "Time in seconds"),
        mops: field(&text, "Mop/s total"),
        wall_seconds: wall,
        verified: verified(&text) && status.success(),
        status: status.to_string(),
        timed_out,
        cpu_seconds: Some((usage.user_us + usage.system_us) as f64 * 1e-6),
        max_rss_bytes: usage.max_rss_bytes,
        tiermem: None,
        swap: None,
        output_tail: Some(tail(&text, 20)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CG_S: &str = " CG Benchmark Completed.\n Class           =                        S\n \
        Time in seconds =                     0.03\n Mop/s total     =                  2211.92\n \
        Verification    =               SUCCESSFUL\n";

    #[test]
    fn parses_time_rate_and_verification() {
        assert_eq!(field(CG_S, "Time in seconds"), Some(0.03));
        assert_eq!(field(CG_S, "Mop/s total"), Some(2211.92));
        assert!(verified(CG_S));
        assert!(!verified(&CG_S.replace("SUCCESSFUL", "UNSUCCESSFUL")));
        assert!(verified(" VERIFICATION SUCCESSFUL\n"));
        assert!(!verified(" VERIFICATION FAILED\n"));
        assert_eq!(field("no such line", "Time in seconds"), None);
    }

    #[test]
    fn a_run_starts_with_the_program_out_of_the_page_cache() {
        let exe = std::env::current_exe().unwrap();
        let files = program_files(&exe);
        assert_eq!(files[0], exe);
        assert!(
            files.iter().any(|f| f.to_string_lossy().contains("libc.so")),
            "ldd's libraries: {files:?}"
        );
        // A file nobody maps: read in, then dropped by cold_page_cache.
        // Beside the test binary: on disk, where /tmp may be tmpfs.
        let path = exe.with_file_name(format!("tiermem-npb-cold-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 256 << 10]).unwrap();
        let cached = |p: &Path| {
            use std::os::fd::AsFd;
            let f = std::fs::File::open(p).unwrap();
            tiermem_sys::file::cached_pages(f.as_fd(), 0, 256 << 10).unwrap()
        };
        assert!(cached(&path) > 0, "just written");
        cold_page_cache(&path);
        let left = cached(&path);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(left, 0);
    }

    #[test]
    fn a_missing_tree_is_named_with_the_fix() {
        let e = find_omp_tree(Path::new("/nonexistent")).unwrap_err();
        assert!(e.contains("/nonexistent") && e.contains("NPB-OMP"), "{e}");
    }

    #[test]
    fn report_figures_add_heap_and_static_sections() {
        let v = serde_json::json!({
            "heap": {"allocated_bytes": 100, "region": {"faults_zero_fill": 1, "faults_far_fill": 2,
                "faults_write_protect": 3, "evictions": 4, "bytes_in": 5, "bytes_out": 6,
                "fault_ns_total": 1_000_000_000u64},
                "huge": {"bytes_2m": 7, "fallbacks": 1}},
            "statics": [{"section": ".bss", "bytes": 50, "how": "tiered",
                "stats": {"faults_far_fill": 10, "evictions": 20}}]
        });
        let f = TiermemFigures::from_report(&v);
        assert_eq!((f.tiered_bytes, f.faults, f.evictions), (150, 16, 24));
        assert_eq!((f.bytes_in, f.bytes_out, f.bytes_2m, f.fallbacks), (5, 6, 7, 1));
        assert!((f.fault_seconds - 1.0).abs() < 1e-9);
        assert_eq!(f.statics.len(), 1);
    }
}
