//! The NPB experiment's tables and charts, from the rows `run` recorded (or an earlier run's JSON).

use super::*;

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    Some(tiermem_workloads::report::quantile(v, 0.5))
}

/// Median over rounds of `key` for the runs matching `pick`; `None` if any
/// of them failed to verify.
fn med(rows: &[Row], pick: impl Fn(&Row) -> bool, key: impl Fn(&RunResult) -> Option<f64>) -> Option<f64> {
    let runs: Vec<&Row> = rows.iter().filter(|r| pick(r)).collect();
    let mut v: Vec<f64> = runs.iter().filter_map(|r| key(&r.result)).collect();
    if v.len() < runs.len() {
        return None;
    }
    median(&mut v)
}

fn geomean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
}

fn pct(ratio: Option<f64>) -> String {
    ratio.map_or("-".into(), |r| format!("{:+.1}%", (r - 1.0) * 100.0))
}

/// A benchmark as the tables group runs: kernel, class, build, threads.
type BenchKey = (String, char, Variant, usize);

impl Row {
    fn bench(&self) -> BenchKey {
        (self.kernel.clone(), self.class, self.variant, self.threads)
    }

    /// Whether this is a run of `bench` in `experiment` and `config`.
    fn of(&self, experiment: &str, bench: &BenchKey, config: &str) -> bool {
        self.experiment == experiment
            && self.kernel == bench.0
            && self.class == bench.1
            && self.variant == bench.2
            && self.threads == bench.3
            && self.config == config
    }
}

fn benches_of(r: &Report, experiment: &str) -> Vec<BenchKey> {
    tiermem_workloads::report::first_seen(
        r.rows
            .iter()
            .filter(|x| x.experiment == experiment)
            .map(Row::bench),
    )
}

fn label(k: &str, c: char, v: Variant) -> String {
    format!(
        "{}.{c}{}",
        k.to_uppercase(),
        if v == Variant::Static { " (static)" } else { "" }
    )
}

type Key = fn(&RunResult) -> Option<f64>;

fn pages_table(r: &Report, pages: &[BenchKey], backings: &[String], title: &str, key: Key) {
    let mut header: Vec<String> = vec!["benchmark".into(), "thr".into()];
    header.extend(backings.iter().map(|b| format!("{b} s")));
    header.extend(
        backings
            .iter()
            .filter(|b| *b != "4k")
            .map(|b| format!("{b} vs 4k")),
    );
    header.push("paper 3 (2m)".into());
    let hdr: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
    let mut t = Table::new(&hdr);
    let mut speedups: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for bench in pages {
        let (k, c, v, thr) = bench;
        let time = |b: &str| med(&r.rows, |x| x.of("pages", bench, b), key);
        let base = time("4k");
        let mut cells = vec![label(k, *c, *v), thr.to_string()];
        cells.extend(backings.iter().map(|b| fmt_s(time(b))));
        for b in backings.iter().filter(|b| *b != "4k") {
            let s = base.zip(time(b)).map(|(x, y)| x / y);
            if let Some(s) = s {
                speedups.entry(b.as_str()).or_default().push(s);
            }
            cells.push(pct(s));
        }
        cells.push(paper_speedup(k).into());
        t.row(cells);
    }
    println!("\n{title}");
    print!("{}", t.render());
    for (b, v) in &speedups {
        let label = if *b == "plain" {
            "plain vs 4k (tiermem run's cost, inverted)"
        } else {
            b
        };
        println!("geometric mean {label}: {}", pct(geomean(v)));
    }
}

pub(super) fn print_tables(r: &Report, backings: &[String], modes: &[String]) {
    let pages = benches_of(r, "pages");
    if !pages.is_empty() {
        pages_table(
            r,
            &pages,
            backings,
            "Heap page size (no tiering): the benchmark's own time in seconds (its timed section), median of rounds; speedup over the 4k heap",
            RunResult::seconds,
        );
        pages_table(
            r,
            &pages,
            backings,
            "The same runs in CPU seconds (user + system of the whole process, set-up included): steadier than wall time on a shared machine",
            RunResult::cpu,
        );
    }
    let tiering = benches_of(r, "tiering");
    if !tiering.is_empty() {
        let fractions = tiermem_workloads::report::first_seen(r.rows.iter().filter_map(|x| x.near_percent));
        let mut header: Vec<String> = vec!["benchmark".into(), "share".into(), "limit".into(), "near".into()];
        header.extend(modes.iter().map(|m| format!("{m} s")));
        let tiermem_modes: Vec<&String> = modes
            .iter()
            .filter(|m| !["plain", "swap"].contains(&m.as_str()))
            .collect();
        let has_swap = modes.iter().any(|m| m == "swap");
        let has_retry = r.rows.iter().any(|x| x.config == "swap-retry");
        if has_swap {
            header.extend(tiermem_modes.iter().map(|m| format!("swap/{m}")));
        }
        if has_retry {
            header.push("swap completes".into());
        }
        let hdr: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
        let mut t = Table::new(&hdr);
        let mut ratios: BTreeMap<(u64, String), Vec<f64>> = BTreeMap::new();
        for bench in &tiering {
            let (k, c, v, _) = bench;
            for &p in &fractions {
                let pick = |x: &Row, m: &str| x.of("tiering", bench, m) && x.near_percent == Some(p);
                let wall = |m: &str| med(&r.rows, |x| pick(x, m), RunResult::wall);
                // Every run of the mode killed at the time limit: its time
                // is at least the limit.
                let oom = |m: &str| {
                    r.rows
                        .iter()
                        .filter(|x| pick(x, m))
                        .any(|x| x.result.swap.as_ref().is_some_and(|s| s.oom_kill))
                };
                if modes.iter().all(|m| !r.rows.iter().any(|x| pick(x, m))) {
                    continue;
                }
                let at_least = |m: &str| {
                    let runs: Vec<&Row> = r.rows.iter().filter(|x| pick(x, m)).collect();
                    (!runs.is_empty() && runs.iter().all(|x| x.result.timed_out))
                        .then(|| runs.iter().map(|x| x.result.wall_seconds).fold(0.0, f64::max))
                };
                let first = r
                    .rows
                    .iter()
                    .filter(|x| x.of("tiering", bench, &x.config) && x.near_percent == Some(p));
                let near = first.clone().find_map(|x| x.near_bytes.filter(|&n| n > 0));
                let limit = first
                    .clone()
                    .filter(|x| x.config != "swap-retry")
                    .find_map(|x| x.limit_bytes);
                let mut cells = vec![
                    label(k, *c, *v),
                    format!("{p}%"),
                    limit.map_or("-".into(), mib),
                    near.map_or("-".into(), mib),
                ];
                cells.extend(modes.iter().map(|m| match (wall(m), at_least(m)) {
                    (Some(w), _) => format!("{w:.2}"),
                    (None, Some(t)) => format!(">{t:.0}"),
                    _ if oom(m) => "OOM".into(),
                    _ => "-".into(),
                }));
                if has_swap {
                    for m in &tiermem_modes {
                        let (ratio, bound) = match (wall("swap"), at_least("swap"), wall(m)) {
                            (Some(s), _, Some(x)) => (Some(s / x), false),
                            (None, Some(t), Some(x)) => (Some(t / x), true),
                            _ => (None, false),
                        };
                        if let Some(x) = ratio {
                            ratios.entry((p, m.to_string())).or_default().push(x);
                        }
                        cells.push(
                            ratio.map_or("-".into(), |x| format!("{}{x:.2}x", if bound { ">" } else { "" })),
                        );
                    }
                }
                if has_retry {
                    // The smallest retried share at which kernel swap
                    // completed (and verified), with its time.
                    let done = r
                        .rows
                        .iter()
                        .filter(|x| pick(x, "swap-retry") && x.result.verified)
                        .filter_map(|x| Some((x.retry_percent?, x.result.wall_seconds)))
                        .min_by(|x, y| x.0.total_cmp(&y.0));
                    let tried = r.rows.iter().any(|x| pick(x, "swap-retry"));
                    cells.push(match done {
                        Some((share, wall)) => format!("{share}%: {wall:.2}"),
                        None if tried => "not <100%".into(),
                        None => "".into(),
                    });
                }
                t.row(cells);
            }
        }
        println!(
            "\nTiering: wall seconds (initialisation included), median of rounds; share: p, limit: the kernel's cgroup limit L, \
             near: tiermem's near budget (MiB; rule below); >T: killed at the time limit T; OOM: killed by the cgroup's OOM killer; \
             swap/X = how many times faster X is than kernel swap (>: at least, kernel swap was killed at the time limit)"
        );
        print!("{}", t.render());
        let ooms = tiering
            .iter()
            .flat_map(|bench| {
                fractions.iter().filter(move |&&p| {
                    let runs: Vec<&Row> = r
                        .rows
                        .iter()
                        .filter(|x| x.of("tiering", bench, "swap") && x.near_percent == Some(p))
                        .collect();
                    !runs.is_empty()
                        && runs
                            .iter()
                            .all(|x| x.result.swap.as_ref().is_some_and(|s| s.oom_kill))
                })
            })
            .count();
        for ((p, m), v) in &ratios {
            let worst = v.iter().cloned().fold(f64::INFINITY, f64::min);
            println!(
                "near {p}%: {m} is {:.2}x faster than kernel swap (geometric mean over the {} benchmarks both completed; \
                 a swap run killed at the time limit counts at the limit), {worst:.2}x at worst",
                geomean(v).unwrap_or(0.0),
                v.len()
            );
        }
        if r.rows.iter().any(|x| x.limit_bytes.is_some()) {
            println!("{TIERING_RULE}");
        }
        if ooms > 0 {
            println!(
                "OOM ({ooms} cells): the kernel's memory-cgroup OOM killer ended the kernel-swap run although swap had room: \
                 charging a page being swapped in (do_swap_page -> mem_cgroup_swapin_charge_folio), reclaim in the cgroup \
                 freed nothing in its retries (at the kill every anonymous page of the cgroup is on the active list, none \
                 inactive); kernel memory is ~0.1 MiB of the charge. Seen on Linux 6.18 with cgroup v1, with zram and with a \
                 swap file, at memory.swappiness 60, 100 and 200, when nothing but anonymous memory was charged to the \
                 cgroup (runs before the cold page cache of docs/transparent.md). Those cells are not in the geometric means. \
                 swap completes: after an OOM kill, kernel swap was run again at larger shares of F (--swap-ladder steps); \
                 the first share at which it completed and its wall seconds (tiermem not run there)."
            );
        }
    }
    println!("\n{}", r.cpus);
}

pub(super) fn draw(r: &Report, path: &Path) -> Result<Vec<PathBuf>, String> {
    let stem = path.with_extension("");
    let mut written = Vec::new();
    let mut bars = Vec::new();
    // CPU time where the runs have it: steadier than the benchmark's own
    // (wall) time when other work shares the machine.
    let by_cpu = r.rows.iter().any(|x| x.result.cpu_seconds.is_some());
    let key: Key = if by_cpu {
        RunResult::cpu
    } else {
        RunResult::seconds
    };
    for bench in benches_of(r, "pages") {
        let (k, c, v, thr) = &bench;
        let (c, v, thr) = (*c, *v, *thr);
        let time = |b: &str| med(&r.rows, |x| x.of("pages", &bench, b), key);
        for b in tiermem_workloads::report::first_seen(r.rows.iter().map(|x| x.config.as_str())) {
            if b == "4k" || r.rows.iter().all(|x| x.experiment != "pages" || x.config != b) {
                continue;
            }
            if let Some(s) = time("4k").zip(time(b)).map(|(x, y)| x / y) {
                bars.push(Bar {
                    group: format!("{} {thr}t", label(k, c, v)),
                    series: b.to_string(),
                    value: s,
                    upper: None,
                });
            }
        }
    }
    if !bars.is_empty() {
        let p = PathBuf::from(format!("{}-pages.svg", stem.display()));
        grouped_bars(
            &p,
            if by_cpu {
                "NPB: speedup of the heap's page size over 4 KiB (CPU time)"
            } else {
                "NPB: speedup of the heap's page size over 4 KiB"
            },
            "speedup over 4k",
            &bars,
            false,
        )?;
        written.push(p);
    }
    let mut bars = Vec::new();
    for row in r
        .rows
        .iter()
        .filter(|x| x.experiment == "tiering" && x.config != "plain")
    {
        let plain = med(
            &r.rows,
            |x| x.of("tiering", &row.bench(), "plain") && x.near_percent == row.near_percent,
            RunResult::wall,
        );
        if let Some(s) = plain.zip(row.result.wall()).map(|(p, w)| w / p) {
            bars.push(Bar {
                group: format!(
                    "{} {}%",
                    label(&row.kernel, row.class, row.variant),
                    row.near_percent.unwrap_or(0)
                ),
                series: row.config.clone(),
                value: s,
                upper: None,
            });
        }
    }
    if !bars.is_empty() {
        let bars = tiermem_workloads::plot::median_bars(
            &bars
                .into_iter()
                .map(|b| (b.group, b.series, b.value))
                .collect::<Vec<_>>(),
        );
        let p = PathBuf::from(format!("{}-tiering.svg", stem.display()));
        grouped_bars(
            &p,
            "NPB under a near budget: wall time over the unlimited run",
            "slowdown (log)",
            &bars,
            true,
        )?;
        written.push(p);
    }
    Ok(written)
}
