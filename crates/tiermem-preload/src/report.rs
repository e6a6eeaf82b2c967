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

/// Whether the settings ask for no messages but errors.
pub(crate) fn quiet() -> bool {
    SETTINGS.get().is_some_and(|(s, _)| s.quiet)
}

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
    /// The MPI or Slurm rank, when a launcher started the process.
    pub rank: Option<tiermem::launcher::Ranks>,
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
    /// `io_uring_setup` calls of the program's C library refused with
    /// `ENOSYS` (io_uring cannot be used on tiered memory).
    pub io_uring_refused: u64,
    /// A language runtime whose heap is its own mapping, out of tiermem's
    /// reach (`java`: libjvm.so is loaded), if any.
    pub untiered_runtime: Option<&'static str>,
    /// Frees of heap addresses that were no allocation.
    pub bad_frees: u64,
    /// The heap's latest far-store errors.
    pub errors: Vec<tiermem::IoErrorRecord>,
    /// Why the process ended, when it did not exit: the report was
    /// written on its way to a fatal signal.
    pub ended_by: Option<&'static str>,
    /// What tiering cost and saved, over the heap and the static arrays
    /// together.
    pub cost: Cost,
    /// The run's other processes, as far as they had started.
    pub children: crate::children::Children,
    /// Programs the children exec'd were tiered too.
    pub follow_exec: bool,
    /// Near use and cumulative counters about once a second, the last
    /// taken at exit (`tiermem::live::Sample`; `tiermem report plot`
    /// draws it).
    pub timeline: Vec<tiermem::live::Sample>,
}

/// The sums the summary leads with (issue 35: the time in faults alone
/// hid the movers' CPU, and nothing said whether the budget was ever
/// reached or where evicted data went).
#[derive(Serialize, Default)]
pub struct Cost {
    /// The process's peak resident memory (VmHWM), tiermem's own included.
    pub peak_footprint_bytes: u64,
    /// The program's footprint, for a later `--near 50%fp`: the peak
    /// footprint of a run that never reached its budget, else the
    /// footprint its own `%fp` budget was a share of (null: unknown).
    pub program_footprint_bytes: Option<u64>,
    /// Resident memory at exit (VmRSS).
    pub resident_bytes: u64,
    /// The near budget (tiered runs).
    pub budget_bytes: Option<u64>,
    /// What the budget is a share of, when given as a percentage.
    pub budget_share: Option<String>,
    /// The highest near memory the heap and the static arrays held (each
    /// region's high-water mark, summed).
    pub near_high_water_bytes: u64,
    /// Whether the budget was ever reached: something was evicted.
    pub budget_reached: bool,
    /// Evictions, fills from the far store, bytes moved each way.
    pub evictions: u64,
    /// Faults served (all kinds).
    pub faults: u64,
    /// Bytes brought in from the far store.
    pub bytes_in: u64,
    /// Bytes written out to it.
    pub bytes_out: u64,
    /// Time application threads spent in faults.
    pub fault_seconds: f64,
    /// Mover threads configured.
    pub movers: usize,
    /// `--movers auto`: the mover stands down while no CPU is free, and
    /// while it does not pay.
    pub movers_auto: bool,
    /// Times the `auto` mover stood down because no CPU was free, and for
    /// how long it was stood down in all (for either reason).
    pub mover_stand_downs: u64,
    /// Trials of the `auto` mover (a few windows without it, or with it
    /// again), and how many of them found that it did not pay.
    pub mover_trials: u64,
    pub mover_unpaid: u64,
    /// See `mover_stand_downs`.
    pub mover_stood_down_seconds: f64,
    /// CPU time of the mover threads, all of it (spinning included).
    pub mover_cpu_seconds: f64,
    /// The part of it spent moving pages.
    pub mover_busy_seconds: f64,
    /// CPU time of the fault-handler threads (handler-thread fault path).
    pub handler_cpu_seconds: f64,
    /// Where evicted data lives: `memory` (a memfd in this process, in
    /// RAM), `file` (a file: on disk) or `none` (untiered).
    pub far_kind: &'static str,
    /// The far file's directory or name (file stores).
    pub far_place: Option<String>,
    /// Evicted data the far store holds at exit (allocated blocks).
    pub far_held_bytes: u64,
    /// RAM the far store holds: all of it for the memory store, none for a
    /// file (beyond the kernel's page cache, which it may reclaim).
    pub far_ram_bytes: u64,
}

/// Registers the exit report, and the same on the way to a fatal SIGBUS
/// on a tiered page (a full far store, a failed read).
/// A copy of standard error for the summary, taken at start: GNU programs
/// (sort, ls, cat) close their standard error in an `atexit` handler that
/// runs before tiermem's.
static STDERR_COPY: std::sync::OnceLock<std::os::fd::OwnedFd> = std::sync::OnceLock::new();

pub(crate) fn at_exit(s: Settings) {
    if let Some(fd) = tiermem_sys::process::keep_stderr() {
        let _ = STDERR_COPY.set(fd);
    }
    if SETTINGS.set((s, Instant::now())).is_ok() {
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(on_exit) };
        tiermem::set_last_words(before_fatal_sigbus);
    }
}

/// `_exit(2)` and `_Exit`, which run no `atexit` handlers: the program the
/// user started (dash ends `sh -c '...'` this way) still gets its summary
/// and report, bounded in time (a program may call `_exit` from a signal
/// handler that interrupted the C library's allocator: a deadlock there
/// costs the report, never a hang). Other processes (a forked child, the
/// child of a `vfork`, which shares this memory) just leave.
#[no_mangle]
pub extern "C" fn _exit(status: libc::c_int) -> ! {
    let root = crate::settings::started_program();
    if root && SETTINGS.get().is_some() {
        let _timer = tiermem_sys::process::KillTimer::arm(std::time::Duration::from_secs(10));
        on_exit();
    }
    // No atexit handlers run: the live page goes here (a forked child's too).
    tiermem::live::unlink_page();
    tiermem_sys::process::exit_group(status)
}

/// `_Exit`: the same as `_exit`.
#[no_mangle]
pub extern "C" fn _Exit(status: libc::c_int) -> ! {
    _exit(status)
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
    let root = crate::settings::started_program();
    if !root && !s.follow_exec {
        crate::children::record_io_uring_refused(tiermem::io_uring_refused());
        return;
    }
    let r = Report {
        pid: std::process::id(),
        rank: s.ranks.clone(),
        wall_seconds: start.elapsed().as_secs_f64(),
        settings: s.describe(),
        tiered: s.tiered(),
        page: s.page.name(),
        threshold_bytes: s.threshold,
        heap_bytes: h.len() as u64,
        heap: h.stats(),
        statics: crate::statics::reports(),
        heap_full_events: HEAP_FULL.load(Ordering::Relaxed),
        io_uring_refused: tiermem::io_uring_refused(),
        untiered_runtime: untiered_runtime(),
        bad_frees: BAD_FREES.load(Ordering::Relaxed),
        errors: h.region().map(|r| r.errors()).unwrap_or_default(),
        ended_by,
        cost: Cost::default(),
        children: {
            let mut c = if root {
                crate::children::take()
            } else {
                crate::children::Children::default()
            };
            (c.vfork_faults, c.vfork_loans) = tiermem::vfork::served();
            c
        },
        follow_exec: s.follow_exec,
        timeline: tiermem::live::timeline(),
    };
    let r = Report {
        cost: cost(s, &r),
        ..r
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
    // A tiered child prints its own summary only when tiering did
    // something to see; the root's summary sums the others.
    let own_summary = root || r.cost.evictions > 0 || r.ended_by.is_some() || !r.errors.is_empty();
    if !root {
        crate::children::record_tiered_end(own_summary, &r.cost);
        crate::children::record_io_uring_refused(r.io_uring_refused);
    }
    if !s.quiet && own_summary {
        let text = summary(&r);
        match STDERR_COPY.get() {
            Some(copy) if !tiermem_sys::process::stderr_open() => {
                use std::io::Write;
                if let Ok(fd) = copy.try_clone() {
                    let _ = std::fs::File::from(fd).write_all(text.as_bytes());
                }
            }
            _ => eprint!("{text}"),
        }
    }
}

/// The process's `/proc/self/status` field `name` (in kB there), in bytes.
fn status_bytes(name: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(name) && l[name.len()..].starts_with(':'))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<u64>().ok())
        })
        .map_or(0, |k| k << 10)
}

/// CPU time, in seconds, of this process's threads whose name starts
/// with `prefix` (`/proc/self/task/*/schedstat`: ns on the CPU).
fn threads_cpu_seconds(prefix: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let ns: u64 = tasks
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(prefix)))
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()))
        .sum();
    ns as f64 * 1e-9
}

/// Bytes allocated to this process's open files that `is_far` picks by
/// the target of their `/proc/self/fd` link: the far stores' (the stores
/// say nothing about their size, and their descriptors are all here).
fn far_held_bytes(is_far: impl Fn(&str) -> bool) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    fds.flatten()
        .filter(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| is_far(&l.to_string_lossy())))
        .filter_map(|fd| std::fs::metadata(fd.path()).ok())
        .map(|m| m.blocks() * 512)
        .sum()
}

/// The sums over the heap and the static arrays, and what the process
/// and its far store hold.
fn cost(s: &Settings, r: &Report) -> Cost {
    let regions: Vec<&RegionStats> = r
        .heap
        .region
        .iter()
        .chain(r.statics.iter().filter_map(|st| st.stats.as_ref()))
        .collect();
    let sum = |f: &dyn Fn(&RegionStats) -> u64| regions.iter().map(|st| f(st)).sum::<u64>();
    let evictions = sum(&|st| st.evictions);
    let (far_kind, far_place, far_held_bytes) = match (&s.near, &s.region.far) {
        (crate::settings::Near::Full, _) => ("none", None, 0),
        (_, tiermem::FarStoreConfig::Memory) => (
            "memory",
            None,
            far_held_bytes(|l| l.starts_with("/memfd:tiermem-far")),
        ),
        (_, tiermem::FarStoreConfig::File { path, .. }) => {
            let named = !path.is_dir();
            let dir = path.to_string_lossy().trim_end_matches('/').to_owned();
            // An unnamed file in DIR reads `DIR/#INODE (deleted)`.
            let held = far_held_bytes(|l| {
                if named {
                    l.strip_suffix(" (deleted)").unwrap_or(l) == dir
                } else {
                    l.strip_prefix(&dir).is_some_and(|rest| rest.starts_with("/#"))
                }
            });
            ("file", Some(path.display().to_string()), held)
        }
    };
    let peak_footprint_bytes = status_bytes("VmHWM");
    Cost {
        peak_footprint_bytes,
        program_footprint_bytes: if evictions == 0 {
            Some(peak_footprint_bytes)
        } else {
            s.footprint
        },
        resident_bytes: status_bytes("VmRSS"),
        budget_bytes: match s.near {
            crate::settings::Near::Bytes(b) => Some(b),
            crate::settings::Near::Full => None,
        },
        budget_share: s.near_share.clone(),
        near_high_water_bytes: sum(&|st| st.resident_peak_bytes),
        budget_reached: evictions > 0,
        evictions,
        faults: sum(&|st| st.faults()),
        bytes_in: sum(&|st| st.bytes_in),
        bytes_out: sum(&|st| st.bytes_out),
        fault_seconds: sum(&|st| st.fault_ns_total) as f64 * 1e-9,
        // `auto` on one usable CPU starts none (as the region decided).
        movers: if s.region.movers_auto && !tiermem::region::auto_mover_fits() {
            0
        } else {
            s.region.movers
        },
        movers_auto: s.region.movers_auto,
        mover_stand_downs: sum(&|st| st.mover.stand_downs),
        mover_trials: sum(&|st| st.mover.trials),
        mover_unpaid: sum(&|st| st.mover.unpaid),
        mover_stood_down_seconds: sum(&|st| st.mover.stood_down_ns) as f64 * 1e-9,
        mover_cpu_seconds: threads_cpu_seconds("tiermem-mover"),
        mover_busy_seconds: sum(&|st| st.mover.busy_ns) as f64 * 1e-9,
        handler_cpu_seconds: threads_cpu_seconds("tiermem-fault"),
        far_kind,
        far_place,
        far_ram_bytes: if far_kind == "memory" { far_held_bytes } else { 0 },
        far_held_bytes,
    }
}

/// The `auto` mover's stand-downs, in words: "; stood down 5.3 s in all:
/// no CPU was free 1 time, 2 of 3 trials found it did not pay".
fn auto_mover_story(c: &Cost) -> String {
    let plural = |n: u64, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
    if c.mover_stand_downs == 0 && c.mover_unpaid == 0 {
        return format!(
            "; worked throughout: {} without it ran no faster",
            plural(c.mover_trials, "trial")
        );
    }
    let mut why = Vec::new();
    if c.mover_stand_downs > 0 {
        why.push(format!("no CPU was free {}", plural(c.mover_stand_downs, "time")));
    }
    if c.mover_trials > 0 {
        why.push(format!(
            "{} of {} found it did not pay",
            c.mover_unpaid,
            plural(c.mover_trials, "trial")
        ));
    }
    format!(
        "; stood down {:.1} s in all: {}",
        c.mover_stood_down_seconds,
        why.join(", ")
    )
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

/// Whether anything went to tiermem: a fault in a tiered range, a static
/// array taken over, a huge page mapped.
fn used(r: &Report) -> bool {
    !r.statics.is_empty()
        || r.heap.region.as_ref().is_some_and(|s| s.faults() > 0)
        || r.heap
            .huge
            .as_ref()
            .is_some_and(|h| h.bytes_1g + h.bytes_2m + h.bytes_thp + h.bytes_4k > 0)
}

/// The summary printed at exit.
pub fn summary(r: &Report) -> String {
    let c = &r.cost;
    let children = crate::children::line(&r.children, r.follow_exec).unwrap_or_default();
    if !used(r) {
        // One line: the run was untiered, and why (and its children's).
        return format!(
            "tiermem: {:.2} s, {}: nothing went to tiermem (no allocation of {} or more, no static \
             array taken over); peak footprint {}, all of it untiered\n",
            r.wall_seconds,
            r.settings,
            tiermem::config::format_size(r.threshold_bytes as u64),
            mib(c.peak_footprint_bytes)
        ) + &unserved_lines(r)
            + &children;
    }
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
    match c.budget_bytes {
        Some(b) => {
            let share = c
                .budget_share
                .as_ref()
                .map_or(String::new(), |s| format!(" ({s})"));
            let b = tiermem::config::format_size(b);
            out += &if c.budget_reached {
                format!(
                    "tiermem:   budget {b}{share}: reached ({} evictions); near high-water {}; peak \
                     footprint {} (VmHWM)\n",
                    c.evictions,
                    mib(c.near_high_water_bytes),
                    mib(c.peak_footprint_bytes)
                )
            } else {
                format!(
                    "tiermem:   budget {b}{share}: budget never reached, nothing evicted (near \
                     high-water {}); peak footprint {} (VmHWM){}\n",
                    mib(c.near_high_water_bytes),
                    mib(c.peak_footprint_bytes),
                    if r.untiered_runtime.is_some() {
                        ""
                    } else {
                        ": a smaller --near tiers this program"
                    }
                )
            };
            let mut cost = format!("tiermem:   cost: time in faults {:.3} s", c.fault_seconds);
            cost += &if c.movers > 0 {
                format!(
                    ", mover CPU {:.3} s ({:.3} s of it moving pages{})",
                    c.mover_cpu_seconds,
                    c.mover_busy_seconds,
                    if c.movers_auto && (c.mover_stand_downs > 0 || c.mover_trials > 0) {
                        auto_mover_story(c)
                    } else {
                        String::new()
                    }
                )
            } else {
                ", no movers".into()
            };
            if c.handler_cpu_seconds > 0.0 {
                cost += &format!(", fault-handler threads' CPU {:.3} s", c.handler_cpu_seconds);
            }
            out += &format!("{cost}; moved in {}, out {}\n", mib(c.bytes_in), mib(c.bytes_out));
            out += &match c.far_kind {
                "memory" => format!(
                    "tiermem:   far store: memory (a memfd in this process): {} of evicted data at exit, held \
                     in RAM and counted in the peak footprint, so tiering saves no memory (it adds some); \
                     --far DIR keeps it in a file instead\n",
                    mib(c.far_held_bytes)
                ),
                _ => format!(
                    "tiermem:   far store: file {}: {} of evicted data at exit, on disk, no RAM of its own \
                     (the page cache aside)\n",
                    c.far_place.as_deref().unwrap_or("?"),
                    mib(c.far_held_bytes)
                ),
            };
        }
        None => {
            out += &format!(
                "tiermem:   untiered; peak footprint {} (VmHWM)\n",
                mib(c.peak_footprint_bytes)
            )
        }
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
    out += &unserved_lines(r);
    out += &children;
    if let Some(why) = r.ended_by {
        out += &format!("tiermem:   ended by {why}\n");
    }
    out
}

/// What tiermem could not serve: io_uring, where the program asked for it,
/// and the heap of a language runtime that maps its own.
fn unserved_lines(r: &Report) -> String {
    let mut out = String::new();
    let in_children = r.children.io_uring_refused;
    if r.io_uring_refused + in_children > 0 {
        let whose = if in_children > 0 {
            format!(", {in_children} of them in child processes")
        } else {
            String::new()
        };
        out += &format!(
            "tiermem:   io_uring refused ({} io_uring_setup calls failed with ENOSYS{whose}): the kernel uses \
             its buffers outside any system call tiermem sees, which would lose tiered data; programs \
             fall back to plain calls\n",
            r.io_uring_refused + in_children
        );
    }
    if r.untiered_runtime == Some("java") {
        out += "tiermem:   a Java VM: the Java heap is the JVM's own mapping, which tiermem does not tier; \
                only native allocations of at least the threshold are (a budget the footprint never \
                reaches says nothing of the Java heap)\n";
    }
    out
}

/// A loaded runtime that maps its heap itself (see [`Report`]).
fn untiered_runtime() -> Option<&'static str> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().any(|l| l.ends_with("/libjvm.so")).then_some("java")
}

/// What the `auto` policy chose and why, when it evicted anything.
fn auto_policy_line(what: &str, s: &RegionStats) -> String {
    let Some(a) = &s.policy_auto else {
        return String::new();
    };
    let evictions = a.evictions_fifo + a.evictions_scan;
    if evictions == 0 {
        return String::new();
    }
    let pct = |n: u64| 100.0 * n as f64 / evictions.max(1) as f64;
    let last = a.decisions.last().map_or(String::new(), |d| {
        format!(
            "; last switch to {} at eviction {} ({}: {:.0}% of evictions came back, {:.0}% in the order \
             they left, {:.0}% straight back)",
            d.to.name(),
            d.at_eviction,
            match d.reason {
                tiermem::policy::auto::Reason::CyclicRefaults => "cyclic refaults",
                tiermem::policy::auto::Reason::ScanGuard => "scan guard",
            },
            d.refault_permille as f64 / 10.0,
            d.sequential_permille as f64 / 10.0,
            d.short_permille as f64 / 10.0
        )
    });
    format!(
        "tiermem:   {what}: policy auto: fifo for {:.0}% of evictions, scan for {:.0}% ({} switches to scan, \
         {} scan-guard trips); refaults {:.0}% of evictions{last}; pin one with --policy\n",
        pct(a.evictions_fifo),
        pct(a.evictions_scan),
        a.to_scan,
        a.guard_trips,
        pct(a.refaults),
    )
}

fn region_line(what: &str, s: &RegionStats) -> String {
    let threads: Vec<String> = s
        .faults_per_thread
        .iter()
        .take(8)
        .map(|t| format!("{}:{}", t.tid, t.faults))
        .collect();
    let policy = auto_policy_line(what, s);
    format!(
        "tiermem:   {what}: near high-water {}{}, faults {} (zero {}, far {}, wp {}), in {}, out {}, evictions {}, \
         time in faults {:.3} s, p50 {:.1} us; faults per thread [{}]{}{}\n{policy}",
        mib(s.resident_peak_bytes),
        match (s.held_peak_bytes, s.pinned_refusals) {
            (0, _) => String::new(),
            (b, 0) => format!(
                " (with stacks and buffers of I/O in flight held outside the budget, at most {})",
                mib(b)
            ),
            (b, n) => format!(
                " (with stacks, buffers of I/O in flight and pages the kernel had pinned held outside \
                 the budget, at most {}; {n} evictions of pinned pages refused)",
                mib(b)
            ),
        },
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
        },
        installed_ahead(s)
    )
}

/// Pages fault-around and stride detection installed with faults, if any.
fn installed_ahead(s: &RegionStats) -> String {
    let (fa, st) = (&s.fault_around, &s.stride);
    let mut out = String::new();
    if fa.installed > 0 {
        out += &format!(", fault-around {} pages ({} known used)", fa.installed, fa.used);
    }
    if st.installed + st.neighbours > 0 {
        out += &format!(
            ", stride {} points + {} neighbours ({} points known used, {} streams)",
            st.installed, st.neighbours, st.used, st.streams
        );
    }
    out
}
