//! `tiermem bench team-evict`: evicting pages only one team worker maps.

use crate::common::{list, save};
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct TeamEvictArgs {
    /// Pages per eviction call, comma-separated.
    #[arg(long, default_value = "1,64")]
    evict_batch: String,
    /// Write the results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(a: TeamEvictArgs) -> Result<(), String> {
    use tiermem::team::TeamKind;
    use tiermem_workloads::team_stencil::evict_own_pages;
    let batches = list(&a.evict_batch, "batch", |x| {
        x.parse::<usize>().ok().filter(|&b| b > 0)
    })?;
    let n = tiermem_sys::thread::online_cpus();
    if n < 2 {
        return Err("needs 2 CPUs: one evicting worker, one busy worker".into());
    }
    let cpus = vec![0, 1];
    eprintln!("bench team-evict: worker 0 (CPU 0) evicts pages only it maps; worker 1 (CPU 1) stays busy on its own pages");
    let mut runs = Vec::new();
    for &b in &batches {
        for kind in [TeamKind::Threads, TeamKind::Processes] {
            let r = evict_own_pages(kind, b, &cpus)?;
            eprintln!(
                "[{} batch {b}] {} evictions, {:.3} IPIs/page",
                r.mode, r.evictions, r.ipis_per_eviction
            );
            runs.push(r);
        }
    }
    let mut t = tiermem_workloads::report::Table::new(&[
        "mode",
        "batch",
        "evicted pages",
        "of them shared",
        "TLB IPIs/page",
        "unmap us/page",
        "evict us/page",
    ]);
    for r in &runs {
        t.row(vec![
            r.mode.clone(),
            r.evict_batch.to_string(),
            r.evictions.to_string(),
            r.victims_shared.to_string(),
            format!("{:.3}", r.ipis_per_eviction),
            format!("{:.2}", r.unmap_ns_per_page / 1e3),
            format!("{:.2}", r.evict_ns_per_page / 1e3),
        ]);
    }
    print!("{}", t.render());
    println!("regular: workers are threads of one process (one page table); pspt: processes (a page table each); CPUs: worker 0 on 0, worker 1 on 1");
    #[derive(serde::Serialize)]
    struct Out {
        benchmark: &'static str,
        machine: tiermem_workloads::report::Machine,
        runs: Vec<tiermem_workloads::team_stencil::OwnEviction>,
    }
    let out = Out {
        benchmark: "team-evict",
        machine: tiermem_workloads::report::Machine::collect(),
        runs,
    };
    save(
        &out,
        &a.json,
        &None,
        |_: &Out, _: &std::path::Path| Ok(Vec::new()),
    )
}
