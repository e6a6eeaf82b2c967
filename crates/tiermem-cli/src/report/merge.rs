//! `tiermem report merge out-*.json`: one row per rank (near budget, near
//! high-water, peak footprint, faults, far fills, evictions, bytes moved,
//! times) and their total, as a table on stdout, and on request as JSON
//! (`--json`) and an SVG chart of budgets against use (`--plot`).

use clap::Args;
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use tiermem::config::format_size;

#[derive(Args)]
pub struct MergeArgs {
    /// The reports, one per rank (`out-*.json`).
    #[arg(required = true, num_args = 1..)]
    reports: Vec<PathBuf>,
    /// Write the merged table as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw budgets against near use per rank, as SVG, here.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// One rank's row (or the total's: sums, and the longest wall time).
#[derive(Serialize, Default, Clone, Debug, PartialEq)]
pub struct Row {
    /// The rank (None: the total, or a report written outside a launcher).
    pub rank: Option<u64>,
    /// The report it came from (the total: none).
    pub file: Option<String>,
    /// Process id.
    pub pid: Option<u64>,
    /// Seconds from load to exit (the total: the longest).
    pub wall_seconds: f64,
    /// The near budget (None: untiered).
    pub budget_bytes: Option<u64>,
    /// The near memory the heap and static arrays held at most.
    pub near_high_water_bytes: u64,
    /// Whether the near high-water stayed within the budget.
    pub within_budget: bool,
    /// Peak resident memory (VmHWM).
    pub peak_footprint_bytes: u64,
    /// Faults served.
    pub faults: u64,
    /// Faults filled from the far store.
    pub far_fills: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Bytes brought in from the far store.
    pub bytes_in: u64,
    /// Bytes written out to it.
    pub bytes_out: u64,
    /// Time application threads spent in faults.
    pub fault_seconds: f64,
    /// CPU time of the mover threads.
    pub mover_cpu_seconds: f64,
    /// CPU time of the fault-handler threads.
    pub handler_cpu_seconds: f64,
}

/// The merged reports.
#[derive(Serialize, Debug)]
pub struct Merged {
    /// Ranks of the job as the reports say (None: not all say the same).
    pub job_size: Option<u64>,
    /// One row per report, by rank.
    pub ranks: Vec<Row>,
    /// The sums.
    pub total: Row,
}

pub fn run(a: MergeArgs) -> Result<(), String> {
    let m = merge(&a.reports)?;
    print!("{}", table(&m));
    crate::common::save(&m, &a.json, &a.plot, |m, p| {
        plot(m, p)?;
        Ok(vec![p.to_owned()])
    })
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

/// One report's row.
fn row(path: &Path) -> Result<Row, String> {
    let j = super::read_json(path)?;
    let c = &j["cost"];
    if !c.is_object() {
        return Err(format!(
            "{}: not a tiermem run report (no \"cost\"; write one with tiermem run --report)",
            path.display()
        ));
    }
    let far_fills = u(&j["heap"]["region"]["faults_far_fill"])
        + j["statics"]
            .as_array()
            .map_or(0, |s| s.iter().map(|st| u(&st["stats"]["faults_far_fill"])).sum());
    let budget = c["budget_bytes"].as_u64();
    let high = u(&c["near_high_water_bytes"]);
    Ok(Row {
        rank: j["rank"]["rank"].as_u64(),
        file: Some(path.display().to_string()),
        pid: j["pid"].as_u64(),
        wall_seconds: f(&j["wall_seconds"]),
        budget_bytes: budget,
        near_high_water_bytes: high,
        within_budget: budget.is_none_or(|b| high <= b),
        peak_footprint_bytes: u(&c["peak_footprint_bytes"]),
        faults: u(&c["faults"]),
        far_fills,
        evictions: u(&c["evictions"]),
        bytes_in: u(&c["bytes_in"]),
        bytes_out: u(&c["bytes_out"]),
        fault_seconds: f(&c["fault_seconds"]),
        mover_cpu_seconds: f(&c["mover_cpu_seconds"]),
        handler_cpu_seconds: f(&c["handler_cpu_seconds"]),
    })
}

/// The reports at `paths`, one row each by rank, and their total.
pub fn merge(paths: &[PathBuf]) -> Result<Merged, String> {
    let mut rows = paths.iter().map(|p| row(p)).collect::<Result<Vec<_>, _>>()?;
    rows.sort_by_key(|r| r.rank);
    for w in rows.windows(2) {
        if w[0].rank.is_some() && w[0].rank == w[1].rank {
            eprintln!(
                "tiermem: warning: {} and {} are both rank {}: two runs' reports?",
                w[0].file.as_deref().unwrap_or("?"),
                w[1].file.as_deref().unwrap_or("?"),
                w[0].rank.unwrap_or(0)
            );
        }
    }
    let sizes: Vec<Option<u64>> = paths
        .iter()
        .map(|p| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .and_then(|j| j["rank"]["size"].as_u64())
        })
        .collect();
    let job_size = sizes[0].filter(|_| sizes.iter().all(|s| *s == sizes[0]));
    if let Some(n) = job_size.filter(|&n| n as usize != rows.len()) {
        eprintln!(
            "tiermem: warning: the job had {n} ranks and {} reports are merged",
            rows.len()
        );
    }
    let budgets: Vec<u64> = rows.iter().filter_map(|r| r.budget_bytes).collect();
    let sum = |g: &dyn Fn(&Row) -> u64| rows.iter().map(g).sum::<u64>();
    let sumf = |g: &dyn Fn(&Row) -> f64| rows.iter().map(g).sum::<f64>();
    let total = Row {
        rank: None,
        file: None,
        pid: None,
        wall_seconds: rows.iter().map(|r| r.wall_seconds).fold(0.0, f64::max),
        budget_bytes: (!budgets.is_empty()).then(|| budgets.iter().sum()),
        near_high_water_bytes: sum(&|r| r.near_high_water_bytes),
        within_budget: rows.iter().all(|r| r.within_budget),
        peak_footprint_bytes: sum(&|r| r.peak_footprint_bytes),
        faults: sum(&|r| r.faults),
        far_fills: sum(&|r| r.far_fills),
        evictions: sum(&|r| r.evictions),
        bytes_in: sum(&|r| r.bytes_in),
        bytes_out: sum(&|r| r.bytes_out),
        fault_seconds: sumf(&|r| r.fault_seconds),
        mover_cpu_seconds: sumf(&|r| r.mover_cpu_seconds),
        handler_cpu_seconds: sumf(&|r| r.handler_cpu_seconds),
    };
    Ok(Merged {
        job_size,
        ranks: rows,
        total,
    })
}

/// The table printed on stdout.
pub fn table(m: &Merged) -> String {
    let head = [
        "rank",
        "budget",
        "near peak",
        "footprint",
        "faults",
        "far fills",
        "evictions",
        "in",
        "out",
        "fault s",
        "wall s",
    ];
    let cells = |r: &Row, name: String| -> Vec<String> {
        vec![
            name,
            r.budget_bytes.map_or("untiered".into(), format_size),
            format_size(r.near_high_water_bytes) + if r.within_budget { "" } else { " (over)" },
            format_size(r.peak_footprint_bytes),
            r.faults.to_string(),
            r.far_fills.to_string(),
            r.evictions.to_string(),
            format_size(r.bytes_in),
            format_size(r.bytes_out),
            format!("{:.3}", r.fault_seconds),
            format!("{:.2}", r.wall_seconds),
        ]
    };
    let mut lines: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    for (i, r) in m.ranks.iter().enumerate() {
        let name = r.rank.map_or(format!("?{i}"), |n| n.to_string());
        lines.push(cells(r, name));
    }
    lines.push(cells(&m.total, "total".into()));
    let widths: Vec<usize> = (0..head.len())
        .map(|c| lines.iter().map(|l| l[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for l in &lines {
        let row: Vec<String> = l
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (s, w))| {
                if i == 0 {
                    format!("{s:<w$}")
                } else {
                    format!("{s:>w$}")
                }
            })
            .collect();
        out += row.join("  ").trim_end();
        out.push('\n');
    }
    out
}

/// Per rank: the near budget, the near high-water and the peak footprint,
/// in MiB on a log scale (a budget may be a thousand times the use).
fn plot(m: &Merged, path: &Path) -> Result<(), String> {
    use tiermem_workloads::plot::{grouped_bars, Bar};
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let mut bars = Vec::new();
    for (i, r) in m.ranks.iter().enumerate() {
        let group = r.rank.map_or(format!("report {i}"), |n| format!("rank {n}"));
        let mut bar = |series: &str, v: u64| {
            bars.push(Bar {
                group: group.clone(),
                series: series.into(),
                value: mib(v),
                upper: None,
            })
        };
        if let Some(b) = r.budget_bytes {
            bar("near budget", b);
        }
        bar("near high-water", r.near_high_water_bytes);
        bar("peak footprint (VmHWM)", r.peak_footprint_bytes);
    }
    grouped_bars(path, "tiermem run: near memory per rank", "MiB", &bars, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(dir: &Path, rank: u64, budget: u64, high: u64, evictions: u64) -> PathBuf {
        let p = dir.join(format!("r-{rank}.json"));
        let j = serde_json::json!({
            "pid": 100 + rank,
            "rank": {"launcher": "Open MPI", "rank": rank, "size": 2, "local_rank": rank, "local_size": 2},
            "wall_seconds": 1.5 + rank as f64,
            "heap": {"region": {"faults_far_fill": 7}},
            "statics": [{"stats": {"faults_far_fill": 3}}, {"stats": null}],
            "cost": {"budget_bytes": budget, "near_high_water_bytes": high, "peak_footprint_bytes": high * 2,
                     "faults": 100, "evictions": evictions, "bytes_in": 4096, "bytes_out": 8192,
                     "fault_seconds": 0.25, "mover_cpu_seconds": 0.0, "handler_cpu_seconds": 0.5}
        });
        std::fs::write(&p, j.to_string()).unwrap();
        p
    }

    #[test]
    fn merges_ranks_in_order_with_their_total() {
        let dir = std::env::temp_dir().join(format!("tiermem-merge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = [
            report(&dir, 1, 8 << 20, 9 << 20, 5),
            report(&dir, 0, 8 << 20, 4 << 20, 0),
        ];
        let m = merge(&files).unwrap();
        assert_eq!(m.job_size, Some(2));
        assert_eq!(
            m.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(),
            [Some(0), Some(1)]
        );
        assert_eq!(m.ranks[0].far_fills, 10);
        assert!(m.ranks[0].within_budget && !m.ranks[1].within_budget);
        let t = &m.total;
        assert_eq!(t.budget_bytes, Some(16 << 20));
        assert_eq!(t.near_high_water_bytes, 13 << 20);
        assert_eq!(
            (t.faults, t.far_fills, t.evictions, t.bytes_out),
            (200, 20, 5, 16384)
        );
        assert_eq!(t.wall_seconds, 2.5);
        assert!(!t.within_budget);
        let text = table(&m);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[1].starts_with("0 ") && lines[2].starts_with("1 ") && lines[3].starts_with("total"));
        assert!(
            lines[2].contains("9M (over)") && lines[3].contains("16M"),
            "{text}"
        );
        let svg = dir.join("m.svg");
        plot(&m, &svg).unwrap();
        assert!(std::fs::read_to_string(&svg).unwrap().contains("rank 1"));
        // Not a report: one clear error naming the file.
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{\"x\": 1}").unwrap();
        let e = merge(&[files[0].clone(), bad.clone()]).unwrap_err();
        assert!(
            e.contains("bad.json") && e.contains("not a tiermem run report"),
            "{e}"
        );
        assert!(merge(&[dir.join("none.json")]).unwrap_err().contains("none.json"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
