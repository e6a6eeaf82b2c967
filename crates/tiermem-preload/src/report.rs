//! What transparent mode did, at exit: a summary on stderr (unless quiet)
//! and a JSON report (`TIERMEM_REPORT`, read back by `tiermem run`).

use crate::settings::Settings;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;
use tiermem::heap::HeapStats;
use tiermem::stats::RegionStats;

static SETTINGS: OnceLock<(Settings, Instant)> = OnceLock::new();
static HEAP_FULL: AtomicU64 = AtomicU64::new(0);
static BAD_FREES: AtomicU64 = AtomicU64::new(0);

/// A request the heap could not hold (served by the C library instead).
pub(crate) fn note_heap_full(size: usize) {
    if HEAP_FULL.fetch_add(1, Ordering::Relaxed) == 0 {
        eprintln!(
            "tiermem: warning: the heap is full ({size} bytes asked); larger allocations now come from \
             the C library, untiered (a larger heap: tiermem run --heap-size, or TIERMEM_FAR)"
        );
    }
}

/// `free` of an address inside the heap that no allocation starts at.
pub(crate) fn bad_free(addr: usize) {
    if BAD_FREES.fetch_add(1, Ordering::Relaxed) == 0 {
        eprintln!("tiermem: warning: free({addr:#x}): not an allocation of the heap (double free?); ignored");
    }
}

/// The report's contents.
#[derive(Serialize)]
pub struct Report {
    /// Process id.
    pub pid: u32,
    /// Seconds from load to exit.
    pub wall_seconds: f64,
    /// Settings in one line.
    pub settings: String,
    /// Whether the heap was tiered.
    pub tiered: bool,
    /// Page kind of the heap.
    pub page: &'static str,
    /// Threshold in bytes.
    pub threshold_bytes: usize,
    /// Heap address range in bytes.
    pub heap_bytes: u64,
    /// The heap: allocations, region or huge-page statistics.
    pub heap: HeapStats,
    /// Large static arrays taken over, and their region statistics.
    pub statics: Vec<crate::statics::StaticReport>,
    /// Requests the heap could not hold.
    pub heap_full_events: u64,
    /// Frees of heap addresses that were no allocation.
    pub bad_frees: u64,
    /// The heap's latest far-store errors.
    pub errors: Vec<tiermem::IoErrorRecord>,
    /// Why the process ended, when it did not exit: the report was
    /// written on its way to a fatal signal.
    pub ended_by: Option<&'static str>,
}

/// Registers the exit report, and the same on the way to a fatal SIGBUS
/// on a tiered page (a full far store, a failed read).
pub(crate) fn at_exit(s: Settings) {
    if SETTINGS.set((s, Instant::now())).is_ok() {
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(on_exit) };
        tiermem::set_last_words(before_fatal_sigbus);
    }
}

extern "C" fn on_exit() {
    say(None);
    // The heap is never torn down, so its far file's name goes here
    // (pages still read after this come through the open descriptor).
    // Other ends (exec, a fatal signal) leave it to the launcher or the
    // next run's sweep.
    if let Some(p) = SETTINGS.get().and_then(|(s, _)| s.named_far_file()) {
        tiermem_sys::file::remove_own_far_file(p);
    }
}

/// The report and summary of a process that a SIGBUS on a tiered page is
/// about to end (no handler of the program's catches it). Runs in the
/// faulting thread's signal handler: a best effort, which allocates and
/// writes files. It cannot wait for a lock of tiermem's (those are not
/// held across a fault), but the interrupted code may hold one of the C
/// library's (its allocator's, stdio's): tiermem's router kills the
/// process if this takes over 10 s, so a deadlock costs the report, never
/// a hang (`tiermem::set_last_words`).
fn before_fatal_sigbus() {
    say(Some("SIGBUS: a tiered page could not be brought in (see errors)"));
}

/// Writes the report and prints the summary, once.
fn say(ended_by: Option<&'static str>) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SAID.swap(true, Ordering::AcqRel) {
        return;
    }
    let Some((s, start)) = SETTINGS.get() else { return };
    let Some(h) = crate::heap() else { return };
    // A child this process forked reports nothing (the report is the
    // process's that `tiermem run` started), unless it is tiered itself
    // (follow-exec): then its report gets its pid as a suffix.
    let root = std::env::var("TIERMEM_ROOT_PID").ok() == Some(std::process::id().to_string());
    if !root && !s.follow_exec {
        return;
    }
    let r = Report {
        pid: std::process::id(),
        wall_seconds: start.elapsed().as_secs_f64(),
        settings: s.describe(),
        tiered: s.tiered(),
        page: s.page.name(),
        threshold_bytes: s.threshold,
        heap_bytes: h.len() as u64,
        heap: h.stats(),
        statics: crate::statics::reports(),
        heap_full_events: HEAP_FULL.load(Ordering::Relaxed),
        bad_frees: BAD_FREES.load(Ordering::Relaxed),
        errors: h.region().map(|r| r.errors()).unwrap_or_default(),
        ended_by,
    };
    let path = s.report.as_ref().map(|p| {
        if root {
            p.clone()
        } else {
            let mut q = p.clone().into_os_string();
            q.push(format!(".{}", std::process::id()));
            std::path::PathBuf::from(q)
        }
    });
    if let Some(path) = &path {
        match serde_json::to_string_pretty(&r) {
            Ok(j) => {
                if let Err(e) = std::fs::write(path, j) {
                    eprintln!("tiermem: cannot write the report {}: {e}", path.display());
                }
            }
            Err(e) => eprintln!("tiermem: report: {e}"),
        }
    }
    let used = !r.statics.is_empty()
        || r.heap.region.as_ref().is_some_and(|s| s.faults() > 0)
        || r.heap
            .huge
            .as_ref()
            .is_some_and(|h| h.bytes_1g + h.bytes_2m + h.bytes_thp + h.bytes_4k > 0);
    if !s.quiet && used {
        eprint!("{}", summary(&r));
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

/// The summary printed at exit.
pub fn summary(r: &Report) -> String {
    let mut out = format!(
        "tiermem: {:.2} s, {}; heap {} in {} allocations now\n",
        r.wall_seconds,
        r.settings,
        mib(r.heap.allocated_bytes),
        r.heap.allocations
    );
    if let Some(s) = r
        .heap
        .region
        .as_ref()
        .filter(|s| s.faults() > 0 || r.statics.is_empty())
    {
        out += &region_line("heap", s);
    }
    for st in &r.statics {
        match &st.stats {
            Some(s) => out += &region_line(&format!("static {} ({})", st.section, mib(st.bytes as u64)), s),
            None => {
                out += &format!(
                    "tiermem:   static {} ({}): {}\n",
                    st.section,
                    mib(st.bytes as u64),
                    st.how
                )
            }
        }
    }
    if let Some(hs) = &r.heap.huge {
        out += &format!(
            "tiermem:   pages mapped: 1g {}, 2m {}, thp {}, 4k {}; fallbacks {}\n",
            mib(hs.bytes_1g),
            mib(hs.bytes_2m),
            mib(hs.bytes_thp),
            mib(hs.bytes_4k),
            hs.fallbacks
        );
    }
    if r.heap_full_events > 0 {
        out += &format!(
            "tiermem:   heap full {} times (served untiered)\n",
            r.heap_full_events
        );
    }
    if let Some(e) = r.errors.last() {
        out += &format!("tiermem:   latest far-store error: {}\n", e.message);
    }
    if let Some(why) = r.ended_by {
        out += &format!("tiermem:   ended by {why}\n");
    }
    out
}

fn region_line(what: &str, s: &RegionStats) -> String {
    let threads: Vec<String> = s
        .faults_per_thread
        .iter()
        .take(8)
        .map(|t| format!("{}:{}", t.tid, t.faults))
        .collect();
    format!(
        "tiermem:   {what}: near high-water {}, faults {} (zero {}, far {}, wp {}), in {}, out {}, evictions {}, \
         time in faults {:.3} s, p50 {:.1} us; faults per thread [{}]{}\n",
        mib(s.resident_peak_bytes),
        s.faults(),
        s.faults_zero_fill,
        s.faults_far_fill,
        s.faults_write_protect,
        mib(s.bytes_in),
        mib(s.bytes_out),
        s.evictions,
        s.fault_ns_total as f64 * 1e-9,
        s.fault_latency.p50_ns as f64 / 1e3,
        threads.join(" "),
        if s.thp_collapses + s.thp_moves > 0 {
            format!(", THP blocks {}", s.thp_collapses + s.thp_moves)
        } else {
            String::new()
        }
    )
}
