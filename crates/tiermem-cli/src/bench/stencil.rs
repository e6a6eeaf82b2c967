//! `tiermem bench stencil`: the 2D heat stencil across tiering modes, and
//! its hidden kernel-swap child.

use crate::common::{list, parse_on_off, progress_printer, save};
use clap::Args;
use std::path::PathBuf;
use tiermem::config::{parse_cpu_list, parse_size};
use tiermem::{Config, DirtyTracking, FarStoreConfig, FaultPath, InstallMethod, PageSize, PolicyKind};
use tiermem_workloads::kernel_swap::SwapKind;
use tiermem_workloads::modes::{self, BenchSpec, Launcher, ModeSpec, Placement};
use tiermem_workloads::stencil::StencilParams;
use tiermem_workloads::team_stencil::TeamMode;

#[derive(Args)]
pub struct StencilArgs {
    /// Virtual size (both grids).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    virt: u64,
    /// Near-memory budget (and the cgroup limit of kernel-swap).
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    near: u64,
    /// Application threads; a list runs each count (e.g. `1,2`). The
    /// default leaves a CPU of a 2-CPU machine to the mover.
    #[arg(long, default_value = "1")]
    threads: String,
    /// Iterations (paper 1: 25).
    #[arg(long, default_value_t = 25)]
    iters: usize,
    /// Page size: 4K, 2M (hugetlbfs) or THP (transparent huge pages).
    #[arg(long, default_value = "4K")]
    page_size: String,
    /// Modes, comma-separated: none, sync, prefetch (sync faults + mover
    /// threads), kernel-swap; team modes (partially separated page
    /// tables): regular (workers are threads: one page table), pspt
    /// (workers are processes: a page table each), team-none (pspt with
    /// everything near), each optionally +prefetch (read-ahead) and/or
    /// +sharer (sharer-aware replacement), e.g. regular,pspt,pspt+prefetch.
    #[arg(long, default_value = "none,sync,prefetch,kernel-swap")]
    modes: String,
    /// Pages filled per missing fault in the team modes with +prefetch.
    #[arg(long, default_value_t = 16)]
    readahead: usize,
    /// Mover threads for the prefetch mode.
    #[arg(long, default_value_t = 1)]
    movers: usize,
    /// Where movers run, comma-separated: own (CPUs no application thread
    /// uses; skipped when there is none) and/or shared (the application's
    /// CPUs).
    #[arg(long, default_value = "own")]
    mover_placement: String,
    /// How movers install pages, comma-separated: copy, move.
    #[arg(long, default_value = "copy")]
    install: String,
    /// Fault paths for sync (comma-separated: in-context, handler-thread).
    #[arg(long, default_value = "in-context")]
    fault_path: String,
    /// Dirty tracking for sync (comma-separated: wp-fault, wp-async).
    #[arg(long, default_value = "wp-fault")]
    dirty: String,
    /// Fault-around for sync and prefetch, comma-separated: on, off (team
    /// modes have it on; `+noaround` turns it off, e.g. `pspt+noaround`;
    /// `+dirty` turns their dirty tracking on).
    #[arg(long, default_value = "on")]
    fault_around: String,
    /// Far store: `memory`, or a directory / new file name for a file store.
    #[arg(long, default_value = "memory")]
    far: String,
    /// Open the far file with O_DIRECT.
    #[arg(long)]
    far_direct: bool,
    /// Pages evicted per batch.
    #[arg(long, default_value_t = 64)]
    evict_batch: usize,
    /// Replacement policies, comma-separated: fifo, clock, scan.
    #[arg(long, default_value = "fifo")]
    policy: String,
    /// Swap for kernel-swap: `zram` or `file[:DIR]`.
    #[arg(long, default_value = "zram")]
    swap: String,
    /// CPUs for the application threads (default: thread i on CPU i).
    #[arg(long)]
    cpus: Option<String>,
    /// Rounds over all modes.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw an SVG chart of runtime per mode.
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn run(a: StencilArgs) -> Result<(), String> {
    let page_size = PageSize::parse(&a.page_size).ok_or("--page-size must be 4K, 2M or THP")?;
    let mut base = Config::new(a.virt, a.near);
    base.page_size = page_size;
    base.evict_batch_pages = a.evict_batch;
    let policies = list(&a.policy, "policy", PolicyKind::from_name)?;
    let installs = list(&a.install, "install method", InstallMethod::from_name)?;
    if installs.contains(&InstallMethod::Move) {
        eprintln!(
            "warning: install=move is experimental: slower here (one IPI per page), and one run in about ten hung (see docs/movers.md)"
        );
    }
    let placements = list(&a.mover_placement, "mover placement", |x| match x {
        "own" => Some(Placement::Own),
        "shared" => Some(Placement::Shared),
        _ => None,
    })?;
    let thread_counts = list(&a.threads, "thread count", |x| {
        x.parse::<usize>().ok().filter(|&n| n > 0)
    })?;
    base.far = if a.far == "memory" {
        FarStoreConfig::Memory
    } else {
        FarStoreConfig::File {
            path: a.far.clone().into(),
            direct: a.far_direct,
        }
    };
    let mut probe = base.clone();
    probe.near_bytes = a.near.min(a.virt);
    probe.validate().map_err(|e| e.to_string())?;
    // Everything a run needs beyond the numbers (userfaultfd, the far
    // directory or file, the huge page pool) is tried on a tiny region
    // before anything large is allocated (issue 18.6: `--far /no/such/dir`
    // was OOM-killed in a small cgroup before it said so).
    probe.virt_bytes = 16 * page_size.bytes() as u64;
    probe.near_bytes = 4 * page_size.bytes() as u64;
    tiermem::Region::new(probe).map_err(|e| format!("cannot run the stencil: {e}"))?;
    if thread_counts.is_empty() || a.iters == 0 {
        return Err("--threads and --iters must be at least 1".into());
    }
    if a.movers == 0 {
        return Err("--movers must be at least 1 (prefetch mode)".into());
    }
    let n = StencilParams::edge_for(a.virt);
    if n < 3 {
        return Err("--virt is too small for a grid".into());
    }
    if a.virt > 2 << 30 {
        eprintln!("warning: footprints above 2 GiB are distorted by the host on these machines");
    }
    let allowed = tiermem_sys::thread::affinity().map_err(|e| e.to_string())?;
    let cpus = match &a.cpus {
        Some(c) => parse_cpu_list(c)?,
        None => Vec::new(), // thread i on CPU i, per thread count
    };
    let fault_paths = list(&a.fault_path, "fault path", FaultPath::from_name)?;
    let dirties = list(&a.dirty, "dirty tracking", DirtyTracking::from_name)?;
    let arounds = list(&a.fault_around, "fault-around setting", parse_on_off)?;
    let swap = match a.swap.as_str() {
        "zram" => SwapKind::Zram,
        s if s == "file" || s.starts_with("file:") => SwapKind::File(
            s.strip_prefix("file:")
                .map_or_else(std::env::temp_dir, PathBuf::from),
        ),
        s => return Err(format!("--swap must be zram or file[:DIR], not {s:?}")),
    };
    let mut modes_v = Vec::new();
    // A variant's name carries the settings that vary.
    let name = |base: &str, parts: &[(bool, &str)]| {
        let mut n = base.to_owned();
        for (varies, v) in parts {
            if *varies {
                n += ":";
                n += v;
            }
        }
        n
    };
    for m in list(&a.modes, "mode", |x| Some(x.to_owned()))? {
        match m.as_str() {
            "none" => modes_v.push(ModeSpec::None),
            "sync" | "prefetch" => {
                // sync has no mover settings: one empty placement, copy.
                let (places, insts): (Vec<Option<Placement>>, &[InstallMethod]) = if m == "prefetch" {
                    (placements.iter().copied().map(Some).collect(), &installs)
                } else {
                    (vec![None], &[InstallMethod::Copy])
                };
                for fp in &fault_paths {
                    for d in &dirties {
                        for pol in &policies {
                            for place in &places {
                                for (inst, &fa) in insts
                                    .iter()
                                    .flat_map(|i| arounds.iter().map(move |fa| (i, fa)))
                                {
                                    modes_v.push(ModeSpec::Tiered {
                                        name: name(
                                            &m,
                                            &[
                                                (fault_paths.len() > 1, fp.name()),
                                                (dirties.len() > 1, d.name()),
                                                (policies.len() > 1, pol.name()),
                                                (places.len() > 1, place.map_or("", Placement::name)),
                                                (insts.len() > 1, inst.name()),
                                                (arounds.len() > 1, if fa { "fa-on" } else { "fa-off" }),
                                            ],
                                        ),
                                        fault_path: *fp,
                                        dirty: *d,
                                        policy: *pol,
                                        movers: place.map(|p| (a.movers, p)),
                                        install: *inst,
                                        fault_around: fa,
                                    });
                                }
                            }
                        }
                    }
                }
            }
            "kernel-swap" => modes_v.push(ModeSpec::KernelSwap { swap: swap.clone() }),
            other => match TeamMode::parse(other, a.readahead) {
                Some(t) => modes_v.push(ModeSpec::Team(t)),
                None => {
                    return Err(format!(
                        "unknown mode {other:?} (none, sync, prefetch, kernel-swap; team modes: regular, pspt, team-none, each with +prefetch, +sharer, +noaround and/or +dirty)"
                    ))
                }
            },
        }
    }
    let spec = BenchSpec {
        virt: a.virt,
        near: a.near,
        params: StencilParams {
            n,
            threads: thread_counts[0],
            iters: a.iters,
            cpus,
        },
        thread_counts: thread_counts.clone(),
        modes: modes_v,
        repeat: a.repeat.max(1),
        base,
        launcher: Launcher {
            exe: std::env::current_exe().map_err(|e| e.to_string())?,
        },
    };
    eprintln!(
        "bench stencil: grid {n} x {n} x 2 doubles = {} MiB, near {} MiB, threads {:?} (CPUs {}), {} iterations, page {}, CPUs allowed {:?}",
        spec.params.footprint() >> 20,
        a.near >> 20,
        thread_counts,
        if spec.params.cpus.is_empty() { "thread i on CPU i".to_owned() } else { format!("{:?}", spec.params.cpus) },
        a.iters,
        page_size,
        allowed
    );
    let mut p = progress_printer();
    let r = modes::run_all(&spec, &mut p);
    print!("{}", modes::table(&r));
    save(&r, &a.json, &a.plot, modes::plot)?;
    if !r.checksums_match {
        return Err("checksums differ between modes: a mode computed a wrong result".into());
    }
    if r.results.is_empty() {
        return Err("no mode could run".into());
    }
    Ok(())
}

pub fn child(params: &str) -> Result<(), String> {
    let p: StencilParams = serde_json::from_str(params).map_err(|e| format!("bad --params: {e}"))?;
    let o = modes::child_main(&p)?;
    println!("{}", serde_json::to_string(&o).map_err(|e| e.to_string())?);
    Ok(())
}
