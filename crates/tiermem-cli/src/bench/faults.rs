//! `tiermem bench faults`: latency of one 4 KiB fault by kind and design.

use crate::common::{list, progress_printer, save_chart};
use clap::Args;
use std::path::PathBuf;
use tiermem_workloads::faults::{self, FaultBenchParams};

#[derive(Args)]
pub struct FaultsArgs {
    /// Pages timed per kind, design and round.
    #[arg(long, default_value_t = 8192)]
    pages: usize,
    /// Measured rounds (after one warm-up round).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Eviction batch (pages) for the evict kinds.
    #[arg(long, default_value_t = 64)]
    evict_batch: usize,
    /// Designs (comma-separated) among in-context, handler-thread,
    /// handler-thread-same-cpu, handler-thread-other-cpu.
    #[arg(long)]
    designs: Option<String>,
    /// Kinds (comma-separated) among zero-fill, zero-fill-read,
    /// fill-memory, fill-evict-clean, fill-evict-dirty, write-protect,
    /// read-syscall-resident, read-syscall-evicted.
    #[arg(long)]
    kinds: Option<String>,
    /// CPU of the faulting thread (default: the first allowed).
    #[arg(long)]
    cpu: Option<usize>,
    /// Keep a second thread of the process spinning on this CPU during the
    /// run (as a mover or another application thread would): every TLB
    /// flush in the fault path then costs an IPI to it.
    #[arg(long)]
    spinner_cpu: Option<usize>,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw an SVG chart.
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn run(a: FaultsArgs) -> Result<(), String> {
    let allowed = tiermem_sys::thread::affinity().map_err(|e| e.to_string())?;
    let app_cpu = a.cpu.unwrap_or(allowed[0]);
    if !allowed.contains(&app_cpu) {
        return Err(format!(
            "--cpu {app_cpu} is not one of the allowed CPUs {allowed:?}"
        ));
    }
    let mut designs = faults::designs(app_cpu, &allowed);
    if let Some(d) = &a.designs {
        let want = list(d, "design", |x| {
            designs.iter().any(|d| d.name == x).then(|| x.to_owned())
        })?;
        designs.retain(|d| want.contains(&d.name));
    }
    let kinds: Vec<&str> = match &a.kinds {
        Some(k) => list(k, "kind", |x| faults::KINDS.iter().copied().find(|k| *k == x))?,
        None => faults::KINDS.to_vec(),
    };
    let params = FaultBenchParams {
        pages: a.pages,
        rounds: a.rounds.max(1),
        evict_batch: a.evict_batch,
        app_cpu,
        spinner_cpu: a.spinner_cpu,
    };
    if let Some(c) = a.spinner_cpu {
        if !allowed.contains(&c) || c == app_cpu {
            return Err(format!(
                "--spinner-cpu {c} must be an allowed CPU other than the faulting thread's ({app_cpu}); allowed: {allowed:?}"
            ));
        }
    }
    eprintln!(
        "bench faults: {} pages x {} rounds, faulting thread on CPU {app_cpu}",
        a.pages, params.rounds
    );
    let mut p = progress_printer();
    let r = faults::run(&params, &designs, &kinds, &mut p).map_err(|e| e.to_string())?;
    print!("{}", faults::table(&r));
    save_chart(&r, &a.json, &a.plot, faults::plot)?;
    Ok(())
}
