//! `tiermem bench faults`: latency of one 4 KiB page fault, as the
//! application sees it (timed around the faulting access), by kind and by
//! fault-serving design, beside the kernel's own first-touch fault.
//!
//! Kinds:
//! - `zero-fill`: first write to a never-written page;
//! - `zero-fill-read`: first read of a never-written page (wp-fault maps
//!   the shared zero page and write-protects it);
//! - `fill-memory`: read of a page in the memory store, budget not full;
//! - `fill-evict-clean`: the same with the budget full, so that every
//!   `evict_batch` faults one evicts a batch of clean pages;
//! - `fill-evict-dirty`: the same with dirty victims (written back);
//! - `write-protect`: first write to a clean resident page (wp-fault);
//! - `read-syscall-resident`: `read(2)` of 4 KiB from `/dev/zero` into a
//!   resident dirty page (in-context: trapped by the kernel-access filter,
//!   pinned, run from the SIGSYS handler);
//! - `read-syscall-evicted`: the same into an evicted page (brought in
//!   first);
//! - `kernel-first-touch`: first write to plain anonymous memory (no tiermem);
//! - `kernel-read-syscall`: the same `read(2)` into plain memory.
//!
//! The application thread is pinned to the first allowed CPU; handler
//! threads are unpinned, pinned to the same CPU, or to another one.
//! Designs and kinds are interleaved round by round so that machine noise
//! hits them alike; the first round only warms up.

use crate::report::{quantile, Machine, Table};
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tiermem::{Config, FaultPath, Region};

/// A fault-serving design under test.
#[derive(Clone, Debug, Serialize)]
pub struct Design {
    /// Name in tables and JSON.
    pub name: String,
    /// Fault path.
    #[serde(skip)]
    pub fault_path: FaultPath,
    /// CPUs of the handler thread (empty: unpinned).
    pub handler_cpus: Vec<usize>,
}

/// The designs measured: in-context, and a handler thread unpinned, on the
/// application's CPU, and on another CPU (when there is one).
pub fn designs(app_cpu: usize, cpus: &[usize]) -> Vec<Design> {
    let mut v = vec![
        Design {
            name: "in-context".into(),
            fault_path: FaultPath::InContext,
            handler_cpus: vec![],
        },
        Design {
            name: "handler-thread".into(),
            fault_path: FaultPath::HandlerThread,
            handler_cpus: vec![],
        },
        Design {
            name: "handler-thread-same-cpu".into(),
            fault_path: FaultPath::HandlerThread,
            handler_cpus: vec![app_cpu],
        },
    ];
    if let Some(&other) = cpus.iter().find(|&&c| c != app_cpu) {
        v.push(Design {
            name: "handler-thread-other-cpu".into(),
            fault_path: FaultPath::HandlerThread,
            handler_cpus: vec![other],
        });
    }
    v
}

/// The fault kinds measured.
pub const KINDS: &[&str] = &[
    "zero-fill",
    "zero-fill-read",
    "fill-memory",
    "fill-evict-clean",
    "fill-evict-dirty",
    "write-protect",
    "read-syscall-resident",
    "read-syscall-evicted",
];

/// One line of results.
#[derive(Clone, Debug, Serialize)]
pub struct FaultRecord {
    /// Design name (`kernel` for the kernel's own fault).
    pub design: String,
    /// Fault kind.
    pub kind: String,
    /// Faults timed.
    pub samples: usize,
    /// Median latency.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Faults that tiermem itself counted for the timed accesses.
    pub faults_counted: u64,
    /// Mean time inside tiermem's fault handler per counted fault, us
    /// (the rest of `mean_us` is the trap, the signal delivery and return,
    /// or the handler thread's wake-ups).
    pub handler_us: f64,
    /// `handler_us` split by cost category (paper 1, Fig. 6), us.
    pub split_us: Vec<(String, f64)>,
}

/// Parameters.
#[derive(Clone, Debug, Serialize)]
pub struct FaultBenchParams {
    /// Pages timed per kind and round.
    pub pages: usize,
    /// Measured rounds (after one warm-up round).
    pub rounds: usize,
    /// Eviction batch for the evict kinds.
    pub evict_batch: usize,
    /// CPU of the application thread.
    pub app_cpu: usize,
    /// A second thread of the process spins on this CPU during the run (as
    /// a mover or another application thread would): a TLB flush by the
    /// fault path then interrupts it (an IPI), as in a multi-threaded
    /// program. None: the faulting thread is alone.
    pub spinner_cpu: Option<usize>,
}

/// The whole result file.
#[derive(Clone, Debug, Serialize)]
pub struct FaultBenchResult {
    /// Always "faults".
    pub benchmark: &'static str,
    /// The command line.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// Parameters.
    pub params: FaultBenchParams,
    /// Designs measured.
    pub designs: Vec<Design>,
    /// One record per design and kind.
    pub results: Vec<FaultRecord>,
}

const PAGE: usize = 4096;
const WORDS_PER_PAGE: usize = PAGE / 8;

fn time_accesses(
    words: &[std::sync::atomic::AtomicU64],
    pages: std::ops::Range<usize>,
    write: bool,
    out: &mut Vec<f64>,
) {
    for p in pages {
        let w = &words[p * WORDS_PER_PAGE];
        let t = Instant::now();
        if write {
            w.store(p as u64 + 1, Ordering::Relaxed);
        } else {
            std::hint::black_box(w.load(Ordering::Relaxed));
        }
        out.push(t.elapsed().as_secs_f64() * 1e6);
    }
}

fn region(pages: usize, near_pages: usize, d: &Design, batch: usize) -> Result<Region, tiermem::Error> {
    let mut c = Config::new((pages * PAGE) as u64, (near_pages * PAGE) as u64);
    c.fault_path = d.fault_path;
    c.handler_cpus = d.handler_cpus.clone();
    c.evict_batch_pages = batch;
    // The cost of one fault: no neighbours installed with it, and a
    // write-protect fault at every first write after a read (the rewrite
    // hint would install pages written before writable).
    c.fault_around = false;
    c.rewrite_hint = false;
    c.install = tiermem::InstallMethod::Copy;
    // TIERMEM_KERNEL_ACCESS=off measures without the seccomp filter that
    // traps system calls on tiered buffers (it stays installed for the
    // rest of the process once an in-context region made it).
    if let Some(k) = std::env::var("TIERMEM_KERNEL_ACCESS")
        .ok()
        .and_then(|v| tiermem::KernelAccess::from_name(&v))
    {
        c.kernel_access = k;
    }
    Region::new(c)
}

/// What tiermem's own statistics say about the timed faults: how many,
/// the time inside the handler, and its split by cost category (ns).
#[derive(Clone, Debug, Default)]
struct Counted {
    faults: u64,
    handler_ns: u64,
    split_ns: Vec<(String, u64)>,
}

impl Counted {
    fn add(&mut self, o: Counted) {
        self.faults += o.faults;
        self.handler_ns += o.handler_ns;
        if self.split_ns.is_empty() {
            self.split_ns = o.split_ns;
        } else {
            for (a, b) in self.split_ns.iter_mut().zip(o.split_ns) {
                a.1 += b.1;
            }
        }
    }
}

/// Measures one kind with one design; returns latencies (us) and what
/// tiermem counted during the timed accesses.
fn measure(kind: &str, d: &Design, n: usize, batch: usize) -> Result<(Vec<f64>, Counted), tiermem::Error> {
    let mut lat = Vec::with_capacity(n);
    let r = match kind {
        "zero-fill" => {
            let r = region(n, n, d, batch)?;
            r.reset_stats();
            time_accesses(r.as_atomic_u64(), 0..n, true, &mut lat);
            r
        }
        "zero-fill-read" => {
            let r = region(n, n, d, batch)?;
            r.reset_stats();
            time_accesses(r.as_atomic_u64(), 0..n, false, &mut lat);
            r
        }
        "fill-memory" => {
            let r = region(n, n, d, batch)?;
            time_accesses(r.as_atomic_u64(), 0..n, true, &mut Vec::new());
            r.evict_all()?;
            r.reset_stats();
            time_accesses(r.as_atomic_u64(), 0..n, false, &mut lat);
            r
        }
        "fill-evict-clean" | "fill-evict-dirty" => {
            // 2n pages over an n-page budget, all in the far store. Read the
            // first half to fill the budget (clean pages, or dirty ones
            // written after the read), then time reads of the second half:
            // each fault must make room.
            let r = region(2 * n, n, d, batch)?;
            let w = r.as_atomic_u64();
            time_accesses(w, 0..2 * n, true, &mut Vec::new());
            r.evict_all()?;
            time_accesses(w, 0..n, kind == "fill-evict-dirty", &mut Vec::new());
            r.reset_stats();
            time_accesses(w, n..2 * n, false, &mut lat);
            r
        }
        "write-protect" => {
            let r = region(n, n, d, batch)?;
            let w = r.as_atomic_u64();
            time_accesses(w, 0..n, true, &mut Vec::new());
            r.evict_all()?;
            time_accesses(w, 0..n, false, &mut Vec::new());
            r.reset_stats();
            time_accesses(w, 0..n, true, &mut lat);
            r
        }
        "read-syscall-resident" | "read-syscall-evicted" => {
            let mut r = region(n, n, d, batch)?;
            time_accesses(r.as_atomic_u64(), 0..n, true, &mut Vec::new());
            if kind == "read-syscall-evicted" {
                r.evict_all()?;
            }
            r.reset_stats();
            read_syscalls(r.as_mut_slice(), n, &mut lat);
            r
        }
        other => panic!("unknown fault kind {other}"),
    };
    r.settle();
    let s = r.stats();
    Ok((
        lat,
        Counted {
            faults: s.faults(),
            handler_ns: s.fault_ns_total,
            split_ns: s.cost.iter().map(|c| (c.category.to_owned(), c.ns)).collect(),
        },
    ))
}

/// Times one `read(2)` of 4 KiB from `/dev/zero` into each of the first
/// `n` pages of `buf`.
fn read_syscalls(buf: &mut [u8], n: usize, out: &mut Vec<f64>) {
    use std::io::Read;
    let mut zero = std::fs::File::open("/dev/zero").expect("/dev/zero");
    for p in 0..n {
        let page = &mut buf[p * PAGE..(p + 1) * PAGE];
        let t = Instant::now();
        let got = zero.read(page);
        out.push(t.elapsed().as_secs_f64() * 1e6);
        assert_eq!(got.ok(), Some(PAGE), "read(2) into page {p}");
    }
}

/// The same `read(2)` into plain anonymous memory (touched first).
fn kernel_read_syscall(n: usize) -> Vec<f64> {
    let mut buf = vec![1u8; n * PAGE];
    let mut lat = Vec::with_capacity(n);
    read_syscalls(&mut buf, n, &mut lat);
    lat
}

/// The kernel's own first-touch write fault on anonymous memory.
fn kernel_first_touch(n: usize) -> Vec<f64> {
    let (map, user) = tiermem_sys::mm::Mapping::anonymous(n * PAGE, &Default::default()).expect("mmap");
    let mut lat = Vec::with_capacity(n);
    time_accesses(map.user_atomics(&user), 0..n, true, &mut lat);
    lat
}

fn record(design: &str, kind: &str, mut v: Vec<f64>, counted: Counted) -> FaultRecord {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    let per = |ns: u64| ns as f64 / 1e3 / counted.faults.max(1) as f64;
    FaultRecord {
        design: design.into(),
        kind: kind.into(),
        samples: v.len(),
        p50_us: quantile(&mut v, 0.5),
        p90_us: quantile(&mut v, 0.9),
        p99_us: quantile(&mut v, 0.99),
        mean_us: mean,
        faults_counted: counted.faults,
        handler_us: per(counted.handler_ns),
        split_us: counted
            .split_ns
            .iter()
            .map(|(c, ns)| (c.clone(), per(*ns)))
            .collect(),
    }
}

/// Runs the benchmark. `progress` receives one line per step.
pub fn run(
    params: &FaultBenchParams,
    designs: &[Design],
    kinds: &[&str],
    mut progress: impl FnMut(&str),
) -> Result<FaultBenchResult, tiermem::Error> {
    let prev = tiermem_sys::thread::affinity().unwrap_or_default();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinner = params.spinner_cpu.map(|cpu| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let _ = tiermem_sys::thread::set_affinity(&[cpu]);
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    });
    let _ = tiermem_sys::thread::set_affinity(&[params.app_cpu]);
    let mut samples: Vec<(String, String, Vec<f64>, Counted)> = Vec::new();
    for round in 0..=params.rounds {
        let warm = round == 0;
        progress(&format!(
            "round {round}/{}{}",
            params.rounds,
            if warm { " (warm-up)" } else { "" }
        ));
        let kt = kernel_first_touch(params.pages);
        let kr = kernel_read_syscall(params.pages);
        if !warm {
            push(
                &mut samples,
                "kernel",
                "kernel-first-touch",
                kt,
                Counted::default(),
            );
            push(
                &mut samples,
                "kernel",
                "kernel-read-syscall",
                kr,
                Counted::default(),
            );
        }
        for &kind in kinds {
            for d in designs {
                let (lat, counted) = measure(kind, d, params.pages, params.evict_batch)?;
                if !warm {
                    push(&mut samples, &d.name, kind, lat, counted);
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(t) = spinner {
        let _ = t.join();
    }
    let _ = tiermem_sys::thread::set_affinity(&prev);
    let results = samples
        .into_iter()
        .map(|(d, k, v, c)| record(&d, &k, v, c))
        .collect();
    Ok(FaultBenchResult {
        benchmark: "faults",
        command: crate::report::command_line(),
        machine: Machine::collect(),
        params: params.clone(),
        designs: designs.to_vec(),
        results,
    })
}

fn push(samples: &mut Vec<(String, String, Vec<f64>, Counted)>, d: &str, k: &str, v: Vec<f64>, c: Counted) {
    if let Some(e) = samples.iter_mut().find(|e| e.0 == d && e.1 == k) {
        e.2.extend(v);
        e.3.add(c);
    } else {
        samples.push((d.into(), k.into(), v, c));
    }
}

/// The results as a table.
pub fn table(r: &FaultBenchResult) -> String {
    let mut t = Table::new(&[
        "kind", "design", "p50 us", "p90 us", "p99 us", "mean us", "samples",
    ]);
    let mut rows: Vec<&FaultRecord> = r.results.iter().collect();
    rows.sort_by_key(|x| {
        (
            std::iter::once("kernel-first-touch")
                .chain(KINDS.iter().copied())
                .position(|k| k == x.kind)
                .unwrap_or(99),
            r.designs.iter().position(|d| d.name == x.design).unwrap_or(0),
        )
    });
    for x in rows {
        t.row(vec![
            x.kind.clone(),
            x.design.clone(),
            format!("{:.2}", x.p50_us),
            format!("{:.2}", x.p90_us),
            format!("{:.2}", x.p99_us),
            format!("{:.2}", x.mean_us),
            x.samples.to_string(),
        ]);
    }
    let mut s = t.render();
    // Where the time goes: inside the handler by category, and outside it
    // (trap, signal delivery and return, or the handler thread's wake-ups).
    let cats: Vec<String> = r
        .results
        .iter()
        .find(|x| !x.split_us.is_empty())
        .map(|x| x.split_us.iter().map(|c| c.0.clone()).collect())
        .unwrap_or_default();
    if !cats.is_empty() {
        let mut hdr = vec![
            "kind".to_owned(),
            "design".into(),
            "mean us".into(),
            "in handler".into(),
        ];
        hdr.extend(cats.iter().cloned());
        hdr.push("outside handler".into());
        let h: Vec<&str> = hdr.iter().map(String::as_str).collect();
        let mut t = Table::new(&h);
        for x in r
            .results
            .iter()
            .filter(|x| !x.split_us.is_empty() && x.faults_counted > 0)
        {
            let mut row = vec![
                x.kind.clone(),
                x.design.clone(),
                format!("{:.2}", x.mean_us),
                format!("{:.2}", x.handler_us),
            ];
            row.extend(x.split_us.iter().map(|c| format!("{:.2}", c.1)));
            row.push(format!("{:.2}", x.mean_us - x.handler_us));
            t.row(row);
        }
        s += "\nmean time per fault, inside tiermem's handler by category and outside it (us):\n";
        s += &t.render();
    }
    s
}

/// The p50 bars with p99 whiskers, one group per kind.
pub fn plot(r: &FaultBenchResult, path: &std::path::Path) -> Result<(), String> {
    let bars: Vec<crate::plot::Bar> = r
        .results
        .iter()
        .map(|x| crate::plot::Bar {
            group: x.kind.clone(),
            series: x.design.clone(),
            value: x.p50_us,
            upper: Some(x.p99_us),
        })
        .collect();
    crate::plot::grouped_bars(
        path,
        "tiermem: latency of one 4 KiB fault (p50, whisker p99)",
        "microseconds (log)",
        &bars,
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_and_design_runs_and_counts_its_faults() {
        let cpus = tiermem_sys::thread::affinity().unwrap();
        let params = FaultBenchParams {
            pages: 256,
            rounds: 1,
            evict_batch: 16,
            app_cpu: cpus[0],
            spinner_cpu: None,
        };
        let ds = designs(cpus[0], &cpus);
        let r = run(&params, &ds, KINDS, |_| {}).unwrap();
        assert_eq!(r.results.len(), 2 + KINDS.len() * ds.len());
        for x in &r.results {
            assert_eq!(x.samples, 256, "{x:?}");
            assert!(x.p50_us > 0.0 && x.p50_us <= x.p99_us, "{x:?}");
            if x.kind == "read-syscall-resident" {
                // The kernel wrote into resident pages: no fault at all.
                assert_eq!(x.faults_counted, 0, "{x:?}");
            } else if x.design != "kernel" {
                // Every timed access was one fault tiermem served.
                assert_eq!(x.faults_counted, 256, "{x:?}");
            }
        }
        let t = table(&r);
        assert!(t.contains("fill-evict-dirty") && t.contains("kernel-first-touch"));
        let json = serde_json::to_value(&r).unwrap();
        let rec = &json["results"][1];
        for k in ["design", "kind", "p50_us", "p90_us", "p99_us"] {
            assert!(!rec[k].is_null(), "{k}");
        }
    }
}
