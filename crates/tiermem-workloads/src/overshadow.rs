//! `tiermem bench overshadow`: paper 2's experiment. A program reads far
//! memory 8 bytes at a time from the start; we record time against bytes
//! read for
//!
//! - `naive`: reading the far memory directly;
//! - `copy`: plain DMA, copy-then-access (the movers copy everything into
//!   a near buffer, then the program reads it);
//! - `overshadow-whole`: overshadow, all pages switched after the copy;
//! - `overshadow-page`: overshadow, each chunk switched when copied;
//!
//! with the far memory as
//!
//! - `memory`: a memfd allocation (as fast as near memory on this machine);
//! - `file`: a file on the local disk whose pages are dropped from the page
//!   cache before each run (really slower);
//! - `link`: memory behind an EMULATED slow link: the movers' transfers are
//!   paced to the link's bandwidth and latency, and the reader pays the
//!   same emulated cost for every page it reads while that page is far.
//!
//! Every run checks the sum of what it read. The reader is pinned to one
//! CPU and the movers to another; both are reported.
//!
//! The model (paper 2, section 3): `M(t) = 0` until `T_setup`, then
//! `B_slow` while copying for `T_DMA`, flat for `T_swap`, then `B_fast`.
//! Plain DMA starts reading at `T_setup + T_DMA`; overshadow's gain is
//! `G = T_DMA * B_slow` bytes, a win when `T_DMA * B_slow > T_swap * B_fast`.

use crate::report::{first_seen, median_by, Machine, Table};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tiermem::far::FarMemory;
use tiermem::overshadow::{copy_to_near, start_copy_to_near, LinkEmulation, Options, Overshadow, Switch};

/// The methods, in table order.
pub const METHODS: &[&str] = &["naive", "copy", "overshadow-whole", "overshadow-page"];
/// The kinds of far memory.
pub const FARS: &[&str] = &["memory", "file", "link"];

/// Points recorded per access curve (besides the first access): enough for
/// the plots, small enough for the JSON of hundreds of runs.
const CURVE_POINTS: usize = 64;

/// What to run.
#[derive(Clone, Debug, Serialize)]
pub struct Params {
    /// Region sizes, bytes (multiples of 4 KiB).
    pub sizes: Vec<u64>,
    /// Methods (from [`METHODS`]).
    pub methods: Vec<String>,
    /// Far kinds (from [`FARS`]).
    pub fars: Vec<String>,
    /// Rounds (methods interleaved within a round; tables show medians).
    pub rounds: usize,
    /// The emulated link.
    pub link_bandwidth_bytes_per_s: f64,
    /// The emulated link's latency per transfer.
    pub link_latency_us: f64,
    /// Where the `file` far memory lives (a local disk).
    pub file_dir: PathBuf,
    /// CPU of the reading thread.
    pub reader_cpu: Option<usize>,
    /// First (smallest) chunk of per-page switch, bytes.
    pub chunk_min_bytes: usize,
    /// Largest chunk, bytes.
    pub chunk_max_bytes: usize,
    /// Rounds for sizes below 64 MiB (they take milliseconds and are the
    /// noisiest); `rounds` for the others.
    pub rounds_small: usize,
}

/// One run.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    /// `naive`, `copy`, `overshadow-whole`, `overshadow-page`.
    pub method: String,
    /// Bytes read.
    pub size_bytes: u64,
    /// `memory`, `file`, `link` (link: emulated).
    pub far: String,
    /// Round.
    pub round: usize,
    /// From the request until the first 8 bytes were read, us.
    pub first_access_us: f64,
    /// From the request until every byte was read, us.
    pub total_us: f64,
    /// Until `create` / the copy call returned, us (0 for naive).
    pub setup_us: f64,
    /// The movers' copy, from create until every page was copied, us
    /// (`T_DMA` plus setup; per-page switch includes its switches).
    pub copy_us: f64,
    /// Time in `mremap` switches, summed, us (`T_swap` for whole).
    pub switch_us: f64,
    /// Number of switches (TLB flushes).
    pub switches: u64,
    /// Pages still in the page cache when the run started (file only).
    pub cached_pages_before: usize,
    /// The sum of the words read matched.
    pub valid: bool,
    /// `(bytes read, us)` samples of the access curve.
    pub curve: Vec<(u64, f64)>,
}

/// The model fitted per size and far kind (medians of the rounds).
#[derive(Clone, Debug, Serialize)]
pub struct Model {
    /// Bytes.
    pub size_bytes: u64,
    /// Far kind.
    pub far: String,
    /// Overshadow's first access (create plus first read), us.
    pub t_setup_us: f64,
    /// Copy time of plain DMA, us.
    pub t_dma_us: f64,
    /// The whole-region switch, us.
    pub t_swap_us: f64,
    /// Reading far memory (naive), bytes/s.
    pub b_slow: f64,
    /// Reading near memory (copy's read phase), bytes/s.
    pub b_fast: f64,
    /// `T_DMA * B_slow`, bytes.
    pub gain_bytes: f64,
    /// `T_DMA * B_slow > T_swap * B_fast`.
    pub overshadow_wins: bool,
    /// First access of overshadow-page over that of copy.
    pub first_access_ratio: f64,
    /// Total time of overshadow-page over that of copy.
    pub total_ratio_page: f64,
    /// Total time of overshadow-whole over that of copy.
    pub total_ratio_whole: f64,
}

/// The result file.
#[derive(Clone, Debug, Serialize)]
pub struct OvershadowResult {
    /// Always "overshadow".
    pub benchmark: &'static str,
    /// Command line.
    pub command: String,
    /// Machine.
    pub machine: Machine,
    /// Parameters.
    pub params: Params,
    /// CPU the reader ran on.
    pub reader_cpu: Option<usize>,
    /// CPUs the movers are pinned to.
    pub mover_cpus: Vec<usize>,
    /// Describes the emulation.
    pub link_note: String,
    /// Runs.
    pub results: Vec<Record>,
    /// Fitted model.
    pub model: Vec<Model>,
}

fn pattern(i: usize) -> u64 {
    (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x0123_4567
}

fn expected_sum(words: usize) -> u64 {
    (0..words).fold(0u64, |s, i| s.wrapping_add(pattern(i)))
}

/// Waits `d` by spinning (emulated link cost paid by the reader).
fn spin_for(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Microseconds since `t0`, to 0.1 us (shorter JSON).
fn us_since(t0: Instant) -> f64 {
    (t0.elapsed().as_secs_f64() * 1e7).round() / 10.0
}

/// Reads `words` from the start; `far_page(p)` says whether page `p` is
/// still far (then the emulated link cost is paid first, if any).
/// Returns (sum, first access us, curve), times from `t0`.
fn read_all(
    words: &[AtomicU64],
    t0: Instant,
    far_page: &dyn Fn(usize) -> bool,
    link: Option<LinkEmulation>,
) -> (u64, f64, Vec<(u64, f64)>) {
    let per_page = 512;
    let pages = words.len() / per_page;
    let page_cost = link.map(|l| l.transfer_time(4096));
    let every = (pages / CURVE_POINTS).max(1);
    let mut curve = Vec::with_capacity(CURVE_POINTS + 2);
    let mut sum = 0u64;
    let mut first = 0.0;
    for p in 0..pages {
        if let Some(c) = page_cost {
            if far_page(p) {
                spin_for(c);
            }
        }
        let w = &words[p * per_page..(p + 1) * per_page];
        sum = sum.wrapping_add(w[0].load(Relaxed));
        if p == 0 {
            first = us_since(t0);
            curve.push((8, first));
        }
        for x in &w[1..] {
            sum = sum.wrapping_add(x.load(Relaxed));
        }
        if (p + 1) % every == 0 || p + 1 == pages {
            curve.push((((p + 1) * 4096) as u64, us_since(t0)));
        }
    }
    (sum, first, curve)
}

/// Touches and frees `size` bytes of near memory, so that the run's near copy gets memory the host has backed.
/// This VM hands memory freed by the guest back to the host within about a
/// second, and touching it again then costs ~14 us per 4 KiB page: without
/// this, the run after a slow one (naive over the file or the link) would
/// pay seconds that have nothing to do with its method.
fn warm_near(size: usize) {
    use tiermem_sys::mm::{MapOptions, Mapping};
    if let Ok((m, _)) = Mapping::anonymous(size, &MapOptions::default()) {
        let _ = m.populate_write(0, m.len());
    }
}

/// Far memory of one kind and size, filled with the pattern.
struct Far {
    mem: FarMemory,
    path: Option<PathBuf>,
}

impl Far {
    fn new(kind: &str, size: u64, dir: &Path) -> Result<Far, String> {
        let words = size as usize / 8;
        if kind == "file" {
            let path = dir.join(format!("tiermem-overshadow-{}-{size}.bin", std::process::id()));
            {
                use std::io::Write;
                let mut f = std::io::BufWriter::with_capacity(
                    4 << 20,
                    std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?,
                );
                for i in 0..words {
                    f.write_all(&pattern(i).to_ne_bytes())
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                }
                f.flush().map_err(|e| e.to_string())?;
            }
            let mem = FarMemory::map_file(&path, 0, size as usize, false).map_err(|e| e.to_string())?;
            Ok(Far {
                mem,
                path: Some(path),
            })
        } else {
            let mem = FarMemory::alloc(size as usize).map_err(|e| e.to_string())?;
            for (i, w) in mem.as_atomic_u64().iter().enumerate() {
                w.store(pattern(i), Relaxed);
            }
            Ok(Far { mem, path: None })
        }
    }

    /// Drops the file's pages from the page cache; returns pages still
    /// cached.
    fn make_cold(&self) -> Result<usize, String> {
        if self.path.is_none() {
            return Ok(0);
        }
        // Pages mapped here would stay in the cache: unmap them first.
        self.mem.unmap_pages().map_err(|e| e.to_string())?;
        tiermem_sys::file::drop_cache(self.mem.fd()).map_err(|e| format!("dropping the file cache: {e}"))?;
        tiermem_sys::file::cached_pages(self.mem.fd(), 0, self.mem.len()).map_err(|e| format!("mincore: {e}"))
    }
}

impl Drop for Far {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn one_run(
    method: &str,
    far: &Far,
    far_kind: &str,
    link: LinkEmulation,
    p: &Params,
    round: usize,
    sum_want: u64,
) -> Result<Record, String> {
    let size = far.mem.len();
    warm_near(size);
    let cached_pages_before = far.make_cold()?;
    let emulated = (far_kind == "link").then_some(link);
    let opts = |switch| Options {
        switch,
        link: emulated,
        chunk_min_bytes: p.chunk_min_bytes,
        chunk_max_bytes: p.chunk_max_bytes,
        ..Default::default()
    };
    let t0 = Instant::now();
    let (sum, first, curve, setup, stats) = match method {
        "naive" => {
            let (s, f, c) = read_all(far.mem.as_atomic_u64(), t0, &|_| true, emulated);
            (s, f, c, 0.0, None)
        }
        "copy" => {
            // The program polls for the copy's completion, as the reader of
            // the overshadow methods is busy meanwhile: on this VM a
            // sleeping waiter made the copy up to 5x slower (the idle vCPU).
            let c = start_copy_to_near(far.mem.addr(), size, &opts(Switch::PerPage))
                .map_err(|e| e.to_string())?;
            while !c.test() {
                std::hint::spin_loop();
            }
            c.wait().map_err(|e| e.to_string())?;
            let setup = t0.elapsed().as_secs_f64() * 1e6;
            let (s, f, curve) = read_all(c.as_atomic_u64(), t0, &|_| false, None);
            (s, f, curve, setup, Some(c.stats()))
        }
        _ => {
            let switch = if method == "overshadow-whole" {
                Switch::Whole
            } else {
                Switch::PerPage
            };
            let os = Overshadow::create(far.mem.addr(), size, &opts(switch)).map_err(|e| e.to_string())?;
            let setup = t0.elapsed().as_secs_f64() * 1e6;
            let (s, f, curve) = read_all(os.as_atomic_u64(), t0, &|p| !os.is_near(p * 4096), emulated);
            // The stats are complete once the copy is.
            os.wait().map_err(|e| e.to_string())?;
            (s, f, curve, setup, Some(os.stats()))
        }
    };
    let total = curve.last().map_or(0.0, |p| p.1);
    let st = stats.unwrap_or_default();
    Ok(Record {
        method: method.to_owned(),
        size_bytes: size as u64,
        far: far_kind.to_owned(),
        round,
        first_access_us: first,
        total_us: total,
        setup_us: setup,
        copy_us: st.copy_seconds * 1e6,
        switch_us: st.switch_seconds * 1e6,
        switches: st.switches,
        cached_pages_before,
        valid: sum == sum_want,
        curve,
    })
}

/// Runs everything in `p`.
pub fn run(p: &Params, mut progress: impl FnMut(&str)) -> Result<OvershadowResult, String> {
    if let Some(c) = p.reader_cpu {
        tiermem_sys::thread::set_affinity(&[c]).map_err(|e| format!("pinning the reader to CPU {c}: {e}"))?;
    }
    let link = LinkEmulation {
        bandwidth_bytes_per_s: p.link_bandwidth_bytes_per_s,
        latency_us: p.link_latency_us,
    };
    let mut results = Vec::new();
    for &size in &p.sizes {
        let sum_want = expected_sum(size as usize / 8);
        for far_kind in &p.fars {
            // Link and memory share the memfd kind; one allocation per kind
            // keeps a run's far memory warm and its setup out of the timing.
            let far = Far::new(
                if far_kind == "file" { "file" } else { "memory" },
                size,
                &p.file_dir,
            )?;
            // Warm-up: one unrecorded copy (fresh near memory, movers started).
            drop(
                copy_to_near(far.mem.addr(), size as usize, &Options::default())
                    .map_err(|e| e.to_string())?,
            );
            let rounds = if size < 64 << 20 { p.rounds_small } else { p.rounds };
            for round in 0..rounds {
                // Each round starts at the next method: no method always
                // follows the same one (a slow naive run leaves the machine
                // in a different state than a fast one).
                let k = p.methods.len();
                for m in (0..k).map(|j| &p.methods[(round + j) % k]) {
                    let r = one_run(m, &far, far_kind, link, p, round, sum_want)?;
                    progress(&format!(
                        "{} {far_kind:<6} {m:<16} round {}/{}: first {:.1} us, all {:.1} us{}",
                        size_name(size),
                        round + 1,
                        rounds,
                        r.first_access_us,
                        r.total_us,
                        if r.valid { "" } else { "  WRONG SUM" }
                    ));
                    results.push(r);
                }
            }
        }
    }
    let model = fit(&results);
    Ok(OvershadowResult {
        benchmark: "overshadow",
        command: crate::report::command_line(),
        machine: Machine::collect(),
        params: p.clone(),
        reader_cpu: tiermem_sys::thread::current_cpu(),
        mover_cpus: tiermem::overshadow::mover_config().cpus,
        link_note: format!(
            "link is EMULATED: each mover transfer waits {} us + bytes / {:.2} GB/s; the reader \
             spins the same cost for each 4 KiB page it reads while the page is far",
            p.link_latency_us,
            p.link_bandwidth_bytes_per_s / 1e9
        ),
        results,
        model,
    })
}

/// `1MiB`, `1GiB`, `64MiB`.
pub fn size_name(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{}GiB", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}MiB", b >> 20)
    } else {
        format!("{}KiB", b >> 10)
    }
}

fn median_of<'a>(rs: &'a [Record], size: u64, far: &str, method: &str) -> Option<&'a Record> {
    let same: Vec<&Record> = rs
        .iter()
        .filter(|r| r.size_bytes == size && r.far == far && r.method == method)
        .collect();
    (!same.is_empty()).then(|| median_by(&same, |r| r.total_us))
}

fn median_value(
    rs: &[Record],
    size: u64,
    far: &str,
    method: &str,
    key: impl Fn(&Record) -> f64,
) -> Option<f64> {
    let mut v: Vec<f64> = rs
        .iter()
        .filter(|r| r.size_bytes == size && r.far == far && r.method == method)
        .map(key)
        .collect();
    (!v.is_empty()).then(|| crate::report::quantile(&mut v, 0.5))
}

/// Fits the model per size and far kind from the medians of the rounds.
pub fn fit(rs: &[Record]) -> Vec<Model> {
    let mut out = Vec::new();
    for (size, far) in first_seen(rs.iter().map(|r| (r.size_bytes, r.far.clone()))) {
        let get = |m: &str, k: fn(&Record) -> f64| median_value(rs, size, &far, m, k);
        let (Some(copy_first), Some(copy_total), Some(copy_us)) = (
            get("copy", |r| r.first_access_us),
            get("copy", |r| r.total_us),
            get("copy", |r| r.copy_us),
        ) else {
            continue;
        };
        let s = size as f64;
        let t_dma = copy_us;
        let b_fast = s / ((copy_total - copy_first).max(1e-3) * 1e-6);
        let b_slow = get("naive", |r| r.total_us).map_or(f64::NAN, |t| s / (t * 1e-6));
        let t_swap = get("overshadow-whole", |r| r.switch_us).unwrap_or(f64::NAN);
        let t_setup = get("overshadow-page", |r| r.first_access_us)
            .or_else(|| get("overshadow-whole", |r| r.first_access_us))
            .unwrap_or(f64::NAN);
        let gain = t_dma * 1e-6 * b_slow;
        out.push(Model {
            size_bytes: size,
            far: far.clone(),
            t_setup_us: t_setup,
            t_dma_us: t_dma,
            t_swap_us: t_swap,
            b_slow,
            b_fast,
            gain_bytes: gain,
            overshadow_wins: gain > t_swap * 1e-6 * b_fast,
            first_access_ratio: t_setup / copy_first,
            total_ratio_page: get("overshadow-page", |r| r.total_us).map_or(f64::NAN, |t| t / copy_total),
            total_ratio_whole: get("overshadow-whole", |r| r.total_us).map_or(f64::NAN, |t| t / copy_total),
        });
    }
    out
}

/// The runs (medians of the rounds) and the model, as tables.
pub fn table(r: &OvershadowResult) -> String {
    let mut t = Table::new(&[
        "size",
        "far",
        "method",
        "first access us",
        "all read us",
        "min first",
        "min all",
        "first/copy",
        "all/copy",
        "setup us",
        "copy us",
        "switch us",
        "switches",
        "valid",
    ]);
    for (size, far, method) in first_seen(r.results.iter().map(|x| (x.size_bytes, &x.far, &x.method))) {
        let Some(m) = median_of(&r.results, size, far, method) else {
            continue;
        };
        let first = median_value(&r.results, size, far, method, |x| x.first_access_us).unwrap_or(f64::NAN);
        let min = |k: fn(&Record) -> f64| {
            r.results
                .iter()
                .filter(|x| x.size_bytes == size && &x.far == far && &x.method == method)
                .map(k)
                .fold(f64::INFINITY, f64::min)
        };
        let copy_first = median_value(&r.results, size, far, "copy", |x| x.first_access_us);
        let copy_total = median_value(&r.results, size, far, "copy", |x| x.total_us);
        let ratio = |v: f64, c: Option<f64>| c.map_or("-".into(), |c| format!("{:.3}", v / c));
        t.row(vec![
            size_name(size),
            if far == "link" {
                "link (emulated)".into()
            } else {
                far.clone()
            },
            method.clone(),
            format!("{first:.1}"),
            format!("{:.1}", m.total_us),
            format!("{:.1}", min(|x| x.first_access_us)),
            format!("{:.1}", min(|x| x.total_us)),
            ratio(first, copy_first),
            ratio(m.total_us, copy_total),
            format!("{:.1}", m.setup_us),
            format!("{:.1}", m.copy_us),
            format!("{:.1}", m.switch_us),
            m.switches.to_string(),
            if r.results
                .iter()
                .filter(|x| x.size_bytes == size && &x.far == far && &x.method == method)
                .all(|x| x.valid)
            {
                "yes".into()
            } else {
                "NO".into()
            },
        ]);
    }
    let mut s = t.render();
    let mut m = Table::new(&[
        "size",
        "far",
        "T_setup us",
        "T_DMA us",
        "T_swap us",
        "B_slow GB/s",
        "B_fast GB/s",
        "G MiB",
        "T_DMA*B_slow > T_swap*B_fast",
    ]);
    for x in &r.model {
        m.row(vec![
            size_name(x.size_bytes),
            if x.far == "link" {
                "link (emulated)".into()
            } else {
                x.far.clone()
            },
            format!("{:.1}", x.t_setup_us),
            format!("{:.1}", x.t_dma_us),
            format!("{:.1}", x.t_swap_us),
            format!("{:.2}", x.b_slow / 1e9),
            format!("{:.2}", x.b_fast / 1e9),
            format!("{:.2}", x.gain_bytes / (1 << 20) as f64),
            if x.overshadow_wins { "yes" } else { "no" }.into(),
        ]);
    }
    s.push('\n');
    s.push_str(&m.render());
    s.push_str(&format!(
        "\nreader on CPU {}, movers on CPUs {:?}; {}\n",
        r.reader_cpu.map_or("?".into(), |c| c.to_string()),
        r.mover_cpus,
        r.link_note
    ));
    s
}

/// One SVG per size and far kind: bytes read against time per method (the
/// median run), like the paper's figures 9 and 10. Files are named after
/// `path`: `<stem>-<size>-<far>.svg`.
pub fn plot(r: &OvershadowResult, path: &Path) -> Result<Vec<PathBuf>, String> {
    let stem = path.with_extension("");
    let mut written = Vec::new();
    for (size, far) in first_seen(r.results.iter().map(|x| (x.size_bytes, x.far.clone()))) {
        let lines: Vec<crate::plot::Line> = first_seen(r.results.iter().map(|x| x.method.clone()))
            .into_iter()
            .filter_map(|m| {
                median_of(&r.results, size, &far, &m).map(|rec| crate::plot::Line {
                    name: m.clone(),
                    points: std::iter::once((0.0, 0.0))
                        .chain(
                            rec.curve
                                .iter()
                                .map(|&(b, us)| (us / 1e3, b as f64 / (1 << 20) as f64)),
                        )
                        .collect(),
                })
            })
            .collect();
        let out = PathBuf::from(format!("{}-{}-{far}.svg", stem.display(), size_name(size)));
        crate::plot::lines(
            &out,
            &format!(
                "overshadow: reading {} of far memory ({})",
                size_name(size),
                if far == "link" { "EMULATED link" } else { &far }
            ),
            "time since the request (ms)",
            "bytes read (MiB)",
            &lines,
        )?;
        written.push(out);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_run_fits_the_model_and_reads_right() {
        let p = Params {
            sizes: vec![1 << 20],
            methods: METHODS.iter().map(|s| s.to_string()).collect(),
            fars: FARS.iter().map(|s| s.to_string()).collect(),
            rounds: 1,
            link_bandwidth_bytes_per_s: 2e9,
            link_latency_us: 5.0,
            file_dir: std::env::temp_dir(),
            reader_cpu: None,
            chunk_min_bytes: 256 << 10,
            chunk_max_bytes: 2 << 20,
            rounds_small: 1,
        };
        let r = run(&p, |_| {}).unwrap();
        assert_eq!(r.results.len(), 12);
        assert!(
            r.results.iter().all(|x| x.valid),
            "every run read the right bytes"
        );
        for x in &r.results {
            assert!(
                x.first_access_us > 0.0 && x.first_access_us <= x.total_us,
                "{x:?}"
            );
            assert_eq!(x.curve.last().unwrap().0, 1 << 20);
            if x.far == "file" {
                assert_eq!(x.cached_pages_before, 0, "file pages dropped from the cache");
            }
        }
        assert_eq!(r.model.len(), 3);
        let t = table(&r);
        assert!(t.contains("link (emulated)") && t.contains("T_swap"), "{t}");
        let svg = std::env::temp_dir().join(format!("tiermem-os-plot-{}.svg", std::process::id()));
        let files = plot(&r, &svg).unwrap();
        assert_eq!(files.len(), 3);
        for f in files {
            assert!(std::fs::read_to_string(&f).unwrap().contains("overshadow-page"));
            std::fs::remove_file(f).unwrap();
        }
    }
}
