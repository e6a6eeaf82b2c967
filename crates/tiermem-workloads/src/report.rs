//! What every benchmark result carries: the machine, the exact command,
//! and helpers for tables, percentiles and JSON files.

use serde::Serialize;
use std::io::Write;
use std::path::Path;
use tiermem::SystemInfo;

/// The machine a result was measured on.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Machine {
    /// Host name.
    pub hostname: String,
    /// `uname -r`.
    pub kernel: String,
    /// CPU model.
    pub cpu_model: String,
    /// Online CPUs.
    pub cpus: usize,
    /// Memory in bytes.
    pub mem_total_bytes: u64,
    /// THP mode.
    pub thp: String,
    /// 2 MiB pool (total, free).
    pub hugepages_2m: Option<(u64, u64)>,
    /// Seconds since the epoch when the run started.
    pub unix_time: u64,
}

impl Machine {
    /// Describes this machine.
    pub fn collect() -> Machine {
        let i = SystemInfo::probe();
        Machine {
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .unwrap_or_default()
                .trim()
                .to_owned(),
            kernel: i.kernel_release,
            cpu_model: i.cpu_model,
            cpus: i.cpus,
            mem_total_bytes: i.mem_total_bytes,
            thp: i.thp_mode,
            hugepages_2m: i.pool_2m.map(|p| (p.total, p.free)),
            unix_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        }
    }
}

/// The command line of this process, for results.
pub fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// Writes `value` as pretty JSON to `path` (creating parent directories).
pub fn write_json(path: &Path, value: &impl Serialize) -> std::io::Result<()> {
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d)?;
    }
    let mut f = std::fs::File::create(path)?;
    serde_json::to_writer_pretty(&mut f, value).map_err(std::io::Error::other)?;
    f.write_all(b"\n")
}

/// The distinct values of `items`, in the order they first appear.
pub fn first_seen<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut v = Vec::new();
    for x in items {
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v
}

/// The median of `runs` by `key` (the upper one of an even count).
/// Panics on no runs.
pub fn median_by<'a, T>(runs: &[&'a T], key: impl Fn(&T) -> f64) -> &'a T {
    let mut v = runs.to_vec();
    v.sort_by(|a, b| key(a).total_cmp(&key(b)));
    v[v.len() / 2]
}

/// The `q` quantile (0..=1) of `v`, sorting it.
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// A plain-text table with right-aligned numeric columns.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Renders the table.
    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut w = vec![0; cols];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (k, c) in r.iter().enumerate().take(cols) {
                w[k] = w[k].max(c.chars().count());
            }
        }
        let line = |r: &Vec<String>| {
            r.iter()
                .enumerate()
                .map(|(k, c)| {
                    if k == 0 {
                        format!("{c:<width$}", width = w[k])
                    } else {
                        format!("{c:>width$}", width = w[k])
                    }
                })
                .collect::<Vec<_>>()
                .join("  ")
        };
        let mut s = line(&self.header);
        s.push('\n');
        s.push_str(&"-".repeat(w.iter().sum::<usize>() + 2 * (cols - 1)));
        s.push('\n');
        for r in &self.rows {
            s.push_str(&line(r));
            s.push('\n');
        }
        s
    }
}

/// Bytes as MiB with one decimal.
pub fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1 << 20) as f64)
}

/// Streaming memcpy bandwidth in bytes per second, copying 4 KiB pages
/// between two buffers larger than the caches (best of three), each a
/// quarter of `work_bytes` between 32 and 128 MiB: a small run in a small
/// memory cgroup is not killed for its yardstick.
pub fn memcpy_bandwidth(work_bytes: u64) -> f64 {
    let len = ((work_bytes / 4) as usize).clamp(32 << 20, 128 << 20);
    let src = vec![1u8; len];
    let mut dst = vec![2u8; len];
    let mut best = 0.0f64;
    for _ in 0..3 {
        let t = std::time::Instant::now();
        for (d, s) in dst.chunks_mut(4096).zip(src.chunks(4096)) {
            d.copy_from_slice(s);
        }
        std::hint::black_box(&dst);
        best = best.max(len as f64 / t.elapsed().as_secs_f64());
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_tables() {
        let mut v = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(quantile(&mut v, 0.5), 3.0);
        assert_eq!(quantile(&mut v, 0.0), 1.0);
        assert_eq!(quantile(&mut v, 1.0), 5.0);
        assert!(quantile(&mut [], 0.5).is_nan());
        let mut t = Table::new(&["mode", "seconds"]);
        t.row(vec!["none".into(), "1.00".into()]);
        t.row(vec!["kernel-swap".into(), "10.00".into()]);
        let s = t.render();
        let last = s.lines().last().unwrap();
        assert!(last.starts_with("kernel-swap") && last.ends_with("10.00"), "{s}");
        assert_eq!(
            s.lines().nth(1).unwrap().len(),
            last.len(),
            "rule as wide as the rows"
        );
        assert_eq!(mib(3 << 20), "3.0");
        let m = Machine::collect();
        assert!(m.cpus >= 1);
    }
}
