//! `tiermem bench overshadow`: naive, copy and overshadow reads of far memory.

use crate::common::{list, progress_printer, save};
use clap::Args;
use std::path::PathBuf;
use tiermem::config::{parse_cpu_list, parse_size};

#[derive(Args)]
pub struct OvershadowArgs {
    /// Sizes read (comma-separated, K/M/G suffixes).
    #[arg(long, default_value = "1M,1G")]
    sizes: String,
    /// Methods (comma-separated): naive, copy, overshadow-whole, overshadow-page.
    #[arg(long, default_value = "naive,copy,overshadow-whole,overshadow-page")]
    methods: String,
    /// Far memory (comma-separated): memory, file, link (emulated).
    #[arg(long, default_value = "memory,file,link")]
    fars: String,
    /// Rounds, methods interleaved (the table shows medians).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Rounds for sizes below 64 MiB (milliseconds each, the noisiest).
    #[arg(long, default_value_t = 15)]
    rounds_small: usize,
    /// First chunk of per-page switch (chunks double up to --chunk-max).
    #[arg(long, default_value = "256K", value_parser = parse_size)]
    chunk_min: u64,
    /// Largest chunk.
    #[arg(long, default_value = "2M", value_parser = parse_size)]
    chunk_max: u64,
    /// Bandwidth of the emulated link, bytes per second (K/M/G suffixes).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    link_bandwidth: u64,
    /// Latency of the emulated link per transfer, microseconds.
    #[arg(long, default_value_t = 10.0)]
    link_latency_us: f64,
    /// Directory on a local disk for the `file` far memory.
    #[arg(long, default_value = "/var/tmp")]
    file_dir: PathBuf,
    /// CPU of the reading thread.
    #[arg(long, default_value_t = 0)]
    reader_cpu: usize,
    /// CPUs of the mover threads (comma-separated; default: the last CPU).
    #[arg(long)]
    mover_cpus: Option<String>,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw SVG charts: <stem>-<size>-<far>.svg next to this path.
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn run(a: OvershadowArgs) -> Result<(), String> {
    use tiermem_workloads::overshadow as os;
    let sizes = list(&a.sizes, "size", |x| parse_size(x).ok())?;
    if let Some(s) = sizes.iter().find(|&&s| s == 0 || s % 4096 != 0) {
        return Err(format!("size {s}: must be a non-zero multiple of 4K"));
    }
    let pick =
        |s: &str, what: &str, known: &[&str]| list(s, what, |x| known.contains(&x).then(|| x.to_owned()));
    let methods = pick(&a.methods, "method", os::METHODS)?;
    let fars = pick(&a.fars, "far memory", os::FARS)?;
    if methods.is_empty() || fars.is_empty() || sizes.is_empty() {
        return Err("nothing to run".into());
    }
    if a.chunk_min == 0
        || !a.chunk_min.is_multiple_of(4096)
        || a.chunk_max < a.chunk_min
        || !a.chunk_max.is_multiple_of(4096)
    {
        return Err("--chunk-min and --chunk-max: multiples of 4K with min <= max".into());
    }
    if a.link_bandwidth == 0 || !(a.link_latency_us >= 0.0 && a.link_latency_us.is_finite()) {
        return Err("the emulated link needs a bandwidth above 0 and a latency of 0 us or more".into());
    }
    if fars.iter().any(|f| f == "file") && !a.file_dir.is_dir() {
        return Err(format!("--file-dir {}: not a directory", a.file_dir.display()));
    }
    let cpus = tiermem_sys::thread::online_cpus();
    if a.reader_cpu >= cpus {
        return Err(format!(
            "--reader-cpu {}: this machine has {cpus} CPUs",
            a.reader_cpu
        ));
    }
    if let Some(m) = &a.mover_cpus {
        let cpus = parse_cpu_list(m).map_err(|e| e.to_string())?;
        tiermem::overshadow::configure_movers(tiermem::overshadow::MoverConfig {
            movers: cpus.len(),
            cpus,
        })
        .map_err(|e| e.to_string())?;
    }
    let p = os::Params {
        sizes,
        methods,
        fars,
        rounds: a.rounds.max(1),
        link_bandwidth_bytes_per_s: a.link_bandwidth as f64,
        link_latency_us: a.link_latency_us,
        file_dir: a.file_dir.clone(),
        reader_cpu: Some(a.reader_cpu),
        chunk_min_bytes: a.chunk_min as usize,
        chunk_max_bytes: a.chunk_max as usize,
        rounds_small: a.rounds_small.max(1),
    };
    eprintln!(
        "bench overshadow: sizes {}, far {}, {} rounds; reader pinned to CPU {}, movers to CPUs {:?}; \
         link EMULATED at {:.2} GB/s + {} us per transfer",
        p.sizes
            .iter()
            .map(|&s| os::size_name(s))
            .collect::<Vec<_>>()
            .join(","),
        p.fars.join(","),
        p.rounds,
        a.reader_cpu,
        tiermem::overshadow::mover_config().cpus,
        p.link_bandwidth_bytes_per_s / 1e9,
        p.link_latency_us
    );
    let mut pr = progress_printer();
    let r = os::run(&p, &mut pr)?;
    print!("{}", os::table(&r));
    save(&r, &a.json, &a.plot, os::plot)?;
    if r.results.iter().any(|x| !x.valid) {
        return Err("a run read wrong bytes".into());
    }
    Ok(())
}
