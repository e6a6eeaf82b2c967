//! MPI jobs: one run as a record, and the comparison of tiermem's records
//! with ArgoDSM's (tables and charts), and the BFS graph export.

use super::*;

/// One run inside an MPI job (collective: every rank calls it with the
/// same arguments); rank 0 gets the run (statistics of all ranks, checksum
/// of all ranks), the others `None`. `valid` reflects the workload's own
/// checks; the comparison ([`compare`]) checks the checksum against the
/// one-rank run.
pub fn run_one_mpi(
    w: Workload,
    mode: BenchMode,
    prm: &SvmBenchParams,
    rep: usize,
) -> Result<Option<SvmRun>, String> {
    let ranks = tiermem::svm::mpi_ranks().map_err(|e| e.to_string())?;
    let mut cfg = SvmConfig::new(heap_bytes(w, prm, ranks), 0);
    cfg.flavour = mode.flavour();
    cfg.transport = tiermem::svm::SvmTransport::Mpi;
    let svm = Svm::new(cfg).map_err(|e| format!("{} {}: {e}", w.name(), mode.name()))?;
    svm.run(|p| match w {
        Workload::Bucket => bucket(p, prm, mode),
        Workload::Malstone => malstone(p, prm, mode),
        Workload::Bfs => bfs(p, prm, mode),
        Workload::Locks => locks(p, prm, mode),
    })
    .map_err(|e| format!("{} {} x{ranks}: {e}", w.name(), mode.name()))?;
    if svm.mpi_rank() != Some(0) {
        return Ok(None);
    }
    let sc = svm.scratch();
    let phases: Vec<(String, f64)> = phase_names(w)
        .iter()
        .enumerate()
        .map(|(k, n)| (n.to_string(), sc[S_PHASE + k].load(Relaxed) as f64 / 1e9))
        .collect();
    Ok(Some(SvmRun {
        workload: w,
        mode,
        procs: ranks,
        nodes: svm.nodes(),
        rep,
        seconds: phases.iter().map(|x| x.1).sum(),
        phases,
        checksum: sc[S_SUM].load(Relaxed),
        valid: sc[S_ERR].load(Relaxed) == 0,
        stats: svm.total_stats(),
    }))
}

pub(super) fn phase_names(w: Workload) -> &'static [&'static str] {
    match w {
        Workload::Bucket => &["generate", "bucket", "sort", "merge"],
        Workload::Malstone => &["generate", "count", "reduce"],
        Workload::Bfs => &["bfs"],
        Workload::Locks => &["update", "reduce"],
    }
}

/// One line of the MPI comparison (`--records` files, JSON lines): what
/// tiermem's and ArgoDSM's benchmarks both write.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Record {
    /// "tiermem" or "argodsm" (or a variant such as "argodsm-ft").
    pub system: String,
    /// Workload name.
    pub workload: String,
    /// Mode (tiermem's mode names; ArgoDSM: "argo").
    pub mode: String,
    /// MPI ranks.
    pub ranks: usize,
    /// Nodes.
    pub nodes: usize,
    /// Repetition.
    pub rep: usize,
    /// Time of the measured part, seconds.
    pub seconds: f64,
    /// Phases of the measured part.
    pub phases: Vec<(String, f64)>,
    /// Checksum of the result.
    pub checksum: u64,
    /// The workload's own checks passed.
    pub valid: bool,
    /// Protocol counters, all ranks, whole run (names as each system has
    /// them; `fetch_pages`, `bytes_in`, `bytes_out`, `lock_ms`,
    /// `barrier_ms` where both have them).
    pub breakdown: std::collections::BTreeMap<String, f64>,
}

impl Record {
    /// The record of a tiermem run.
    pub fn of(r: &SvmRun) -> Record {
        let s = &r.stats;
        let mut b = std::collections::BTreeMap::new();
        for (k, v) in [
            ("fetch_pages", s.fetches),
            ("net_fetch_pages", s.net_fetch_pages),
            ("diffs", s.diffs),
            ("diff_bytes", s.diff_bytes),
            ("notices", s.notices_sent),
            ("invalidations", s.invalidations),
            ("bytes_in", s.net_bytes_in),
            ("bytes_out", s.net_bytes_out),
            ("net_ops", s.net_ops),
            ("net_flushes", s.net_flushes),
            ("locks", s.locks),
        ] {
            b.insert(k.to_string(), v as f64);
        }
        b.insert("lock_ms".into(), s.lock_ns as f64 / 1e6);
        b.insert("barrier_ms".into(), s.barrier_ns as f64 / 1e6);
        Record {
            system: "tiermem".into(),
            workload: r.workload.name().into(),
            mode: r.mode.name().into(),
            ranks: r.procs,
            nodes: r.nodes,
            rep: r.rep,
            seconds: r.seconds,
            phases: r.phases.clone(),
            checksum: r.checksum,
            valid: r.valid,
            breakdown: b,
        }
    }
}

/// The comparison of records from several MPI jobs.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// "svm-mpi".
    pub benchmark: &'static str,
    /// The machine.
    pub machine: Machine,
    /// The command.
    pub command: String,
    /// Every record, with `valid` also requiring the one-rank checksum.
    pub records: Vec<Record>,
    /// Rows: median seconds per (workload, ranks, nodes) and system/mode.
    pub rows: Vec<CompareRow>,
}

/// Median times of one configuration.
#[derive(Clone, Debug, Serialize)]
pub struct CompareRow {
    /// Workload.
    pub workload: String,
    /// Ranks.
    pub ranks: usize,
    /// Nodes.
    pub nodes: usize,
    /// (system/mode, median seconds, runs, all valid).
    pub times: Vec<(String, f64, usize, bool)>,
    /// Fastest tiermem mode over fastest ArgoDSM variant (below 1: tiermem faster).
    pub tiermem_over_argo: Option<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    crate::report::quantile(&mut v, 0.5)
}

/// Compares records: verifies every checksum against the one-rank run of
/// its workload (any system), and takes medians.
pub fn compare(mut records: Vec<Record>) -> Result<Comparison, String> {
    let mut reference: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for r in records.iter().filter(|r| r.ranks == 1 && r.system == "tiermem") {
        reference.entry(r.workload.clone()).or_insert(r.checksum);
    }
    for r in records.iter().filter(|r| r.ranks == 1) {
        reference.entry(r.workload.clone()).or_insert(r.checksum);
    }
    for r in &mut records {
        let want = reference.get(&r.workload);
        r.valid &= want == Some(&r.checksum);
    }
    let mut keys: Vec<(String, usize, usize)> = records
        .iter()
        .map(|r| (r.workload.clone(), r.ranks, r.nodes))
        .collect();
    keys.sort_by(|a, b| {
        let order = |w: &str| {
            ["bucket", "malstone", "bfs", "locks"]
                .iter()
                .position(|x| *x == w)
                .unwrap_or(9)
        };
        (order(&a.0), a.2, a.1).cmp(&(order(&b.0), b.2, b.1))
    });
    keys.dedup();
    let mut rows = Vec::new();
    for (w, ranks, nodes) in keys {
        let of: Vec<&Record> = records
            .iter()
            .filter(|r| r.workload == w && r.ranks == ranks && r.nodes == nodes)
            .collect();
        let mut series: Vec<String> = of.iter().map(|r| format!("{}/{}", r.system, r.mode)).collect();
        series.dedup();
        let mut seen = Vec::new();
        let mut times = Vec::new();
        for sname in series {
            if seen.contains(&sname) {
                continue;
            }
            seen.push(sname.clone());
            let runs: Vec<&&Record> = of
                .iter()
                .filter(|r| format!("{}/{}", r.system, r.mode) == sname)
                .collect();
            times.push((
                sname,
                median(runs.iter().map(|r| r.seconds).collect()),
                runs.len(),
                runs.iter().all(|r| r.valid),
            ));
        }
        let best = |pre: &str| {
            times
                .iter()
                .filter(|t| t.0.starts_with(pre))
                .map(|t| t.1)
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))))
        };
        let ratio = match (best("tiermem/"), best("argodsm")) {
            (Some(t), Some(a)) => Some(t / a),
            _ => None,
        };
        rows.push(CompareRow {
            workload: w,
            ranks,
            nodes,
            times,
            tiermem_over_argo: ratio,
        });
    }
    Ok(Comparison {
        benchmark: "svm-mpi",
        machine: Machine::collect(),
        command: command_line(),
        records,
        rows,
    })
}

/// The comparison as tables: medians per configuration, then the
/// breakdown per system (medians of the counters).
pub fn render_comparison(c: &Comparison) -> String {
    let mut series: Vec<String> = Vec::new();
    for r in &c.rows {
        for t in &r.times {
            if !series.contains(&t.0) {
                series.push(t.0.clone());
            }
        }
    }
    let mut head: Vec<&str> = vec!["workload", "nodes", "ranks"];
    head.extend(series.iter().map(String::as_str));
    head.push("best tiermem / best argodsm");
    head.push("valid");
    let mut t = Table::new(&head);
    for r in &c.rows {
        let mut row = vec![r.workload.clone(), r.nodes.to_string(), r.ranks.to_string()];
        for sname in &series {
            row.push(
                r.times
                    .iter()
                    .find(|x| &x.0 == sname)
                    .map_or("-".into(), |x| format!("{:.3}", x.1)),
            );
        }
        row.push(r.tiermem_over_argo.map_or("-".into(), |x| format!("{x:.2}")));
        row.push(if r.times.iter().all(|x| x.3) {
            "yes".into()
        } else {
            "NO".into()
        });
        t.row(row);
    }
    let mut out = t.render();
    // The MPI transport against LocalShm (the forked team), same modes.
    let mut l = Table::new(&[
        "workload",
        "ranks",
        "mode",
        "MPI s",
        "LocalShm s",
        "MPI / LocalShm",
    ]);
    let mut pairs = 0;
    for r in c.rows.iter().filter(|r| r.nodes == 1) {
        for (sname, secs, _, _) in &r.times {
            let Some(mode) = sname.strip_prefix("tiermem/") else {
                continue;
            };
            if let Some(local) = r.times.iter().find(|x| x.0 == format!("tiermem-local/{mode}")) {
                l.row(vec![
                    r.workload.clone(),
                    r.ranks.to_string(),
                    mode.to_string(),
                    format!("{secs:.3}"),
                    format!("{:.3}", local.1),
                    format!("{:.2}", secs / local.1),
                ]);
                pairs += 1;
            }
        }
    }
    if pairs > 0 {
        out.push('\n');
        out.push_str(&l.render());
    }
    let keys = [
        "fetch_pages",
        "net_fetch_pages",
        "diffs",
        "bytes_in",
        "bytes_out",
        "net_flushes",
        "lock_ms",
        "barrier_ms",
    ];
    let mut head: Vec<&str> = vec!["workload", "nodes", "ranks", "system/mode", "time s"];
    head.extend(keys);
    let mut b = Table::new(&head);
    for r in &c.rows {
        for (sname, secs, _, _) in &r.times {
            let recs: Vec<&Record> = c
                .records
                .iter()
                .filter(|x| {
                    x.workload == r.workload
                        && x.ranks == r.ranks
                        && x.nodes == r.nodes
                        && &format!("{}/{}", x.system, x.mode) == sname
                })
                .collect();
            let mut row = vec![
                r.workload.clone(),
                r.nodes.to_string(),
                r.ranks.to_string(),
                sname.clone(),
                format!("{secs:.3}"),
            ];
            for k in keys {
                let v: Vec<f64> = recs.iter().filter_map(|x| x.breakdown.get(k).copied()).collect();
                row.push(if v.is_empty() {
                    "-".into()
                } else if k.ends_with("_ms") {
                    format!("{:.1}", median(v))
                } else if k.starts_with("bytes") {
                    format!("{:.1}M", median(v) / 1e6)
                } else {
                    format!("{:.0}", median(v))
                });
            }
            b.row(row);
        }
    }
    out.push('\n');
    out.push_str(&b.render());
    out
}

/// Bars of the median time per (workload, nodes, ranks), one per
/// system/mode.
pub fn plot_comparison(c: &Comparison, path: &std::path::Path) -> Result<(), String> {
    let samples: Vec<(String, String, f64)> = c
        .records
        .iter()
        .map(|r| {
            (
                format!("{} {}n x{}", r.workload, r.nodes, r.ranks),
                format!("{}/{}", r.system, r.mode),
                r.seconds,
            )
        })
        .collect();
    crate::plot::grouped_bars(
        path,
        "SVM over MPI: tiermem and ArgoDSM (lower is better)",
        "seconds",
        &crate::plot::median_bars(&samples),
        true,
    )
}

/// Writes the Graph500 graph of the BFS workload (scale `scale`) for
/// ArgoDSM's benchmark: little-endian u64 vertex count, u64 adjacency
/// length, then the offsets (u32, vertices + 1) and the adjacency (u32).
pub fn export_graph(scale: u32, path: &std::path::Path) -> Result<(), String> {
    let nv = 1usize << scale;
    let ne = 16 * nv;
    let mut edges = vec![[0u32; 2]; ne];
    crate::graph500::generate_edges(scale, GRAPH_SEED, &mut edges, 1);
    let mut offsets = vec![0u64; nv + 1];
    let mut adjacency = vec![0u32; 2 * ne];
    let used = crate::graph500::build_csr(&edges, &mut offsets, &mut adjacency);
    let mut out = Vec::with_capacity(16 + 4 * (nv + 1 + used));
    out.extend_from_slice(&(nv as u64).to_le_bytes());
    out.extend_from_slice(&(used as u64).to_le_bytes());
    for &o in &offsets {
        out.extend_from_slice(&(o as u32).to_le_bytes());
    }
    for &a in &adjacency[..used] {
        out.extend_from_slice(&a.to_le_bytes());
    }
    std::fs::write(path, out).map_err(|e| format!("{}: {e}", path.display()))
}
