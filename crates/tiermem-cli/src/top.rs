//! `tiermem top [PID...]`: the tiered processes of this node (every
//! process with a tiered region: under `tiermem run`, or a user of the
//! library) and what they do now, from the pages they publish
//! (`tiermem::live`): near use against the budget, faults, fills,
//! evictions and far-store traffic per second, refaults (fills from the
//! far store: pages evicted earlier and touched again) and how busy the
//! movers are. Refreshes every `--interval` seconds; `--once`/`--count N`
//! and `--json` for scripts.

use clap::Args;
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;
use tiermem::live::{self, Page};

#[derive(Args)]
#[command(after_long_help = "Columns:
  NEAR/BUDGET  near memory in use / the process's near budget (and the share)
  FAULT/s      demand faults served per second (fault-around and prefetch fill more pages per fault)
  FILL/s       pages filled per second (zero pages and pages read from the far store)
  EVICT/s      pages evicted per second
  IN/s, OUT/s  bytes read from and written to the far store per second
  REFLT/s      fills from the far store per second: pages evicted earlier and touched again
  REFLT%       those refaults as a share of all fills
  MOVER%       how busy the mover threads were (- without movers)
A process's first table shows - for its rates (they need two readings). Pages
live in /dev/shm/tiermem-<uid>/ (TIERMEM_LIVE_DIR); docs/live.md.")]
pub struct TopArgs {
    /// Only these processes (default: all of this user's on the node).
    pids: Vec<u32>,
    /// Print one table (after one interval, to measure rates) and exit.
    #[arg(long, conflicts_with = "count")]
    once: bool,
    /// Print N tables and exit.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Seconds between tables.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    interval: f64,
    /// JSON instead of a table: one object per line.
    #[arg(long)]
    json: bool,
}

/// A page seen by `tiermem top`, with rates against the previous reading.
#[derive(serde::Serialize)]
struct Row {
    #[serde(flatten)]
    page: Page,
    /// The process is a forked child (its tiered memory is a plain copy).
    forked: bool,
    /// Nobody updated the page for over 5 s although the process lives
    /// (stopped, or it exec'd another program).
    stale: bool,
    /// The rates span an interval (false at a process's first reading:
    /// they read 0 then).
    measured: bool,
    faults: u64,
    fills: u64,
    faults_per_s: f64,
    fills_per_s: f64,
    evictions_per_s: f64,
    refaults_per_s: f64,
    /// Of the fills in the interval, the share from the far store.
    refault_share: Option<f64>,
    bytes_in_per_s: f64,
    bytes_out_per_s: f64,
    /// Wall time the movers spent moving pages over the interval times
    /// the movers (null: no movers).
    mover_utilisation: Option<f64>,
}

/// How long a page that should be updated every 250 ms may lie still.
const STALE_MS: u64 = 5000;

fn rate(now: u64, before: u64, secs: f64) -> f64 {
    // A counter that went back (reset_stats) starts again from zero.
    now.checked_sub(before).map_or(now, |d| d) as f64 / secs
}

fn row(page: Page, before: Option<&Page>, now_ms: u64) -> Row {
    let stale =
        page.flags & live::FLAG_UPDATED != 0 && now_ms.saturating_sub(page.updated_unix_ms) > STALE_MS;
    let prev =
        before.filter(|b| b.start_ticks == page.start_ticks && b.updated_unix_ms < page.updated_unix_ms);
    let (mut fa, mut fi, mut ev, mut rf, mut bi, mut bo) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    let (mut share, mut mover) = (None, None);
    if let Some(b) = prev {
        let secs = (page.updated_unix_ms - b.updated_unix_ms) as f64 / 1e3;
        fa = rate(page.faults(), b.faults(), secs);
        fi = rate(page.fills(), b.fills(), secs);
        ev = rate(page.evictions, b.evictions, secs);
        rf = rate(page.far_fills, b.far_fills, secs);
        bi = rate(page.bytes_in, b.bytes_in, secs);
        bo = rate(page.bytes_out, b.bytes_out, secs);
        share = (fi > 0.0).then(|| (rf / fi).min(1.0));
        if page.movers > 0 {
            let busy = rate(page.mover_busy_ns, b.mover_busy_ns, secs) * 1e-9;
            mover = Some((busy / page.movers as f64).min(1.0));
        }
    }
    Row {
        forked: page.flags & live::FLAG_FORKED != 0,
        stale,
        measured: prev.is_some(),
        faults: page.faults(),
        fills: page.fills(),
        faults_per_s: fa,
        fills_per_s: fi,
        evictions_per_s: ev,
        refaults_per_s: rf,
        refault_share: share,
        bytes_in_per_s: bi,
        bytes_out_per_s: bo,
        mover_utilisation: mover,
        page,
    }
}

fn size(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0}{}", UNITS[u])
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}

fn count(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.1}M", x / 1e6)
    } else if x >= 1e4 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// How a rate is written.
type Fmt = fn(f64) -> String;

fn unknown(_: f64) -> String {
    "-".into()
}

fn table(rows: &[Row], missing: &[u32], bad: &[String], dir: &Path) -> String {
    let mut out = format!(
        "{:>7} {:>4} {:<16} {:>20} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>7} {:>6}\n",
        "PID",
        "RANK",
        "PROGRAM",
        "NEAR/BUDGET",
        "FAULT/s",
        "FILL/s",
        "EVICT/s",
        "IN/s",
        "OUT/s",
        "REFLT/s",
        "REFLT%",
        "MOVER%"
    );
    for r in rows {
        let p = &r.page;
        let near = if p.budget_bytes > 0 {
            format!(
                "{}/{} {:>3.0}%",
                size(p.near_bytes as f64),
                size(p.budget_bytes as f64),
                100.0 * p.near_bytes as f64 / p.budget_bytes as f64
            )
        } else if r.forked {
            "forked copy".to_string()
        } else {
            size(p.near_bytes as f64)
        };
        let pct = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:.0}", 100.0 * v));
        // Shown as `-` until a second reading gives rates.
        let (count, size): (Fmt, Fmt) = if r.measured {
            (count, size)
        } else {
            (unknown, unknown)
        };
        let mut name: String = p.program.chars().take(16).collect();
        if r.stale {
            name = format!("{}(stale)", name.chars().take(9).collect::<String>());
        }
        out += &format!(
            "{:>7} {:>4} {:<16} {:>20} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>7} {:>6}\n",
            p.pid,
            if p.rank >= 0 {
                p.rank.to_string()
            } else {
                "-".into()
            },
            name,
            near,
            count(r.faults_per_s),
            count(r.fills_per_s),
            count(r.evictions_per_s),
            size(r.bytes_in_per_s),
            size(r.bytes_out_per_s),
            count(r.refaults_per_s),
            pct(r.refault_share),
            pct(r.mover_utilisation),
        );
    }
    if rows.is_empty() && missing.is_empty() {
        out += &format!("(no tiered process publishes in {})\n", dir.display());
    }
    for pid in missing {
        out +=
            &format!("pid {pid}: no live page (not a tiered process of this user's, or TIERMEM_LIVE=off)\n");
    }
    for b in bad {
        out += &format!("unreadable page {b}\n");
    }
    out
}

/// Whether a process with this pid exists (any user's).
fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub fn run(a: TopArgs) -> Result<(), String> {
    if !(a.interval > 0.0 && a.interval <= 3600.0) {
        return Err(format!(
            "--interval {}: give seconds between 0 and 3600",
            a.interval
        ));
    }
    if a.count == Some(0) {
        return Err("--count 0: give at least 1".into());
    }
    if let Some(pid) = a.pids.iter().find(|&&pid| !alive(pid)) {
        return Err(format!("pid {pid}: no such process"));
    }
    let tables = if a.once { Some(1) } else { a.count };
    let dir = live::dir();
    let interval = Duration::from_secs_f64(a.interval);
    let clear = tables.is_none() && !a.json && std::io::stdout().is_terminal();
    let mut before: HashMap<u32, Page> = HashMap::new();
    let mut ignored = Vec::new();
    for p in live::scan(&dir, &mut ignored) {
        before.insert(p.pid, p);
    }
    let mut shown = 0u64;
    loop {
        std::thread::sleep(interval);
        let mut bad = Vec::new();
        let pages: Vec<Page> = live::scan(&dir, &mut bad)
            .into_iter()
            .filter(|p| a.pids.is_empty() || a.pids.contains(&p.pid))
            .collect();
        let now = now_ms();
        let missing: Vec<u32> = a
            .pids
            .iter()
            .copied()
            .filter(|pid| !pages.iter().any(|p| p.pid == *pid))
            .collect();
        let mut next = HashMap::new();
        let rows: Vec<Row> = pages
            .into_iter()
            .map(|p| {
                let r = row(p.clone(), before.get(&p.pid), now);
                next.insert(p.pid, p);
                r
            })
            .collect();
        // Keep a page's reading until it changes, so that rates span at
        // least one update; forget processes that are gone.
        if a.pids.is_empty() {
            before.retain(|pid, _| next.contains_key(pid));
        }
        for (pid, p) in next {
            let keep = before
                .get(&pid)
                .is_some_and(|b| b.seq == p.seq && b.start_ticks == p.start_ticks);
            if !keep {
                before.insert(pid, p);
            }
        }
        let text = if a.json {
            serde_json::to_string(&serde_json::json!({
                "time_unix_ms": now,
                "dir": dir,
                "processes": rows,
                "missing": missing,
                "unreadable": bad,
            }))
            .map_err(|e| e.to_string())?
                + "\n"
        } else {
            table(&rows, &missing, &bad, &dir)
        };
        let mut out = std::io::stdout().lock();
        if clear {
            let _ = out.write_all(b"\x1b[H\x1b[2J");
        }
        out.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
        let _ = out.flush();
        shown += 1;
        if tables.is_some_and(|n| shown >= n) {
            return Ok(());
        }
        // Watching chosen processes that have all ended: nothing more to show.
        if !a.pids.is_empty() && !a.pids.iter().any(|&pid| alive(pid)) {
            eprintln!("tiermem top: the processes named have ended");
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_span_the_pages_own_times() {
        let b = Page {
            pid: 5,
            start_ticks: 9,
            updated_unix_ms: 1000,
            far_fills: 100,
            zero_fills: 100,
            evictions: 50,
            movers: 2,
            mover_busy_ns: 0,
            flags: live::FLAG_UPDATED,
            ..Page::default()
        };
        let p = Page {
            updated_unix_ms: 1500,
            far_fills: 400,
            evictions: 550,
            mover_busy_ns: 500_000_000,
            ..b.clone()
        };
        let r = row(p.clone(), Some(&b), 1600);
        assert_eq!(r.evictions_per_s, 1000.0);
        assert_eq!(r.refaults_per_s, 600.0);
        assert_eq!(r.fills_per_s, 600.0);
        assert_eq!(r.refault_share, Some(1.0));
        assert_eq!(r.mover_utilisation, Some(0.5));
        assert!(!r.stale);
        assert!(row(p.clone(), Some(&b), 1500 + STALE_MS + 1).stale);
        // Another process under the same pid: no rates.
        let other = Page { start_ticks: 10, ..b };
        assert_eq!(row(p, Some(&other), 1600).faults_per_s, 0.0);
        assert_eq!(size(1536.0), "1.5K");
        assert_eq!(count(12345.0), "12.3k");
    }
}
