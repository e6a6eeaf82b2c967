//! `tiermem bench metadata`: what a region's metadata costs in resident
//! memory: at creation, after touching a little of it, and how long creation
//! and destruction take, by virtual size.

use crate::common::{list, save};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;
use tiermem::{Config, FarStoreConfig, Region};

#[derive(Args)]
pub struct MetadataArgs {
    /// Virtual sizes, comma separated.
    #[arg(long, default_value = "1G,1T,64T")]
    sizes: String,
    /// Near budget of each region.
    #[arg(long, default_value = "64M")]
    near: String,
    /// Bytes touched (written, then read back) after creation.
    #[arg(long, default_value = "16M")]
    touch: String,
    /// Directory for the far file of regions over 16 TiB (a memory store
    /// that large does not fit in the address space next to its region).
    #[arg(long, default_value = "/dev/shm")]
    far: PathBuf,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize)]
struct Row {
    virt_bytes: u64,
    far_store: String,
    rss_at_creation_bytes: u64,
    rss_after_touch_bytes: u64,
    touched_bytes: u64,
    create_ms: f64,
    destroy_ms: f64,
}

#[derive(Serialize)]
struct Report {
    near_bytes: u64,
    rows: Vec<Row>,
}

fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
}

pub fn run(a: MetadataArgs) -> Result<(), String> {
    let sizes = list(&a.sizes, "size", |s| {
        tiermem::config::parse_size(s).ok().filter(|&n| n > 0)
    })?;
    let near = tiermem::config::parse_size(&a.near).map_err(|e| format!("--near: {e}"))?;
    let touch = tiermem::config::parse_size(&a.touch).map_err(|e| format!("--touch: {e}"))?;
    if !a.far.is_dir() {
        return Err(format!("--far {}: not a directory", a.far.display()));
    }
    let mut rows = Vec::new();
    println!(
        "{:>10} {:>8} {:>14} {:>16} {:>10} {:>11}",
        "virtual", "far", "RSS at create", "RSS after touch", "create ms", "destroy ms"
    );
    for &virt in &sizes {
        let mut c = Config::new(virt, near.min(virt));
        let big = virt > 16 << 40;
        if big {
            c.far = FarStoreConfig::File {
                path: a.far.clone(),
                direct: false,
            };
        }
        let before = rss();
        let t = Instant::now();
        let mut r = Region::new(c).map_err(|e| format!("a region of {virt} bytes: {e}"))?;
        let create_ms = t.elapsed().as_secs_f64() * 1e3;
        let at_creation = rss().saturating_sub(before);
        // Touch `touch` bytes in 16 clusters spread over the range.
        let words: &mut [u64] = r.as_mut_slice();
        let pages = (touch.min(virt) / 4096).max(1);
        let clusters = 16.min(pages);
        let per = pages / clusters;
        let stride = virt / clusters;
        let idx = |c: u64, k: u64| ((c * stride + k * 4096) / 8) as usize;
        for c in 0..clusters {
            for k in 0..per {
                words[idx(c, k)] = c ^ k;
            }
        }
        let mut bad = 0;
        for c in 0..clusters {
            for k in 0..per {
                bad += usize::from(words[idx(c, k)] != c ^ k);
            }
        }
        if bad > 0 {
            return Err(format!("{bad} touched words read back wrong"));
        }
        let after = rss().saturating_sub(before);
        let t = Instant::now();
        drop(r);
        let destroy_ms = t.elapsed().as_secs_f64() * 1e3;
        let row = Row {
            virt_bytes: virt,
            far_store: if big { "file" } else { "memory" }.into(),
            rss_at_creation_bytes: at_creation,
            rss_after_touch_bytes: after,
            touched_bytes: clusters * per * 4096,
            create_ms,
            destroy_ms,
        };
        println!(
            "{:>10} {:>8} {:>10} KiB {:>12} KiB {:>10.2} {:>11.2}",
            tiermem::config::format_size(virt),
            row.far_store,
            row.rss_at_creation_bytes >> 10,
            row.rss_after_touch_bytes >> 10,
            row.create_ms,
            row.destroy_ms
        );
        rows.push(row);
    }
    save(
        &Report {
            near_bytes: near,
            rows,
        },
        &a.json,
        &None,
        |_, _| Ok(Vec::new()),
    )
}
