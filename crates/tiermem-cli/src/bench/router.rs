//! `tiermem bench router`: the fault router's lookup cost by table size.

use crate::common::{list, save_chart};
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct RouterArgs {
    /// Registered ranges, comma separated.
    #[arg(long, default_value = "1,100,10000")]
    ranges: String,
    /// Samples of 256 lookups per size.
    #[arg(long, default_value_t = 20000)]
    samples: usize,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw an SVG chart.
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn run(a: RouterArgs) -> Result<(), String> {
    let sizes = list(&a.ranges, "range count", |s| {
        s.parse::<usize>().ok().filter(|&n| n > 0)
    })?;
    let r = tiermem_workloads::router::run(&sizes, a.samples.max(10));
    save_chart(&r, &a.json, &a.plot, tiermem_workloads::router::plot)
}
