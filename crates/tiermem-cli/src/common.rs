//! Helpers every subcommand shares: comma-separated lists, progress lines,
//! and writing the JSON and charts a benchmark was asked for.

use std::path::{Path, PathBuf};
use tiermem_workloads::report::write_json;

pub fn progress_printer() -> impl FnMut(&str) {
    let start = std::time::Instant::now();
    let spinner = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let pb = indicatif::ProgressBar::new_spinner();
        pb.enable_steady_tick(std::time::Duration::from_millis(200));
        Some(pb)
    } else {
        None
    };
    move |msg: &str| {
        let line = format!("[{:7.1}s] {msg}", start.elapsed().as_secs_f64());
        match &spinner {
            Some(pb) => pb.println(line),
            None => eprintln!("{line}"),
        }
    }
}

/// Writes the JSON and the plots a benchmark was asked for, naming each
/// file written.
pub fn save<R: serde::Serialize>(
    r: &R,
    json: &Option<PathBuf>,
    plot: &Option<PathBuf>,
    draw: impl FnOnce(&R, &Path) -> Result<Vec<PathBuf>, String>,
) -> Result<(), String> {
    if let Some(j) = json {
        write_json(j, r).map_err(|e| format!("{}: {e}", j.display()))?;
        eprintln!("wrote {}", j.display());
    }
    if let Some(pl) = plot {
        for p in draw(r, pl)? {
            eprintln!("wrote {}", p.display());
        }
    }
    Ok(())
}

/// [`save`] for a benchmark whose chart is the one file `--plot` names.
pub fn save_chart<R: serde::Serialize>(
    r: &R,
    json: &Option<PathBuf>,
    plot: &Option<PathBuf>,
    draw: impl FnOnce(&R, &Path) -> Result<(), String>,
) -> Result<(), String> {
    save(r, json, plot, |r, pl| draw(r, pl).map(|()| vec![pl.to_owned()]))
}

/// Refuses the sizes of a region (`--virt`, `--near`) that tiermem would
/// refuse, before a benchmark starts.
pub fn check_sizes(virt: u64, near: u64) -> Result<(), String> {
    tiermem::Config::new(virt, near)
        .validate()
        .map_err(|e| e.to_string())
}

pub fn list<T>(s: &str, what: &str, f: impl Fn(&str) -> Option<T>) -> Result<Vec<T>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| f(x).ok_or_else(|| format!("unknown {what} {x:?}")))
        .collect()
}

/// `on` / `off` (a fault-around setting in a list).
pub fn parse_on_off(s: &str) -> Option<bool> {
    match s {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}
