//! `tiermem hugepages`: show, reserve and release the 2 MiB and 1 GiB pools.

use clap::Subcommand;
use tiermem::config::format_size;

#[derive(Subcommand)]
pub enum HugeAction {
    /// Show both pools and the THP setting.
    Show {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Make SIZE:PAGES pages available (free and unpromised) in addition to
    /// those in use, e.g. `reserve 2M:512 1G:2`.
    Reserve {
        /// SIZE:PAGES, SIZE 2M or 1G.
        #[arg(required = true)]
        requests: Vec<String>,
    },
    /// Give free pages back to the kernel: `release 2M:256`, or `release 1G`
    /// for all free ones of a size. Pages in use stay.
    Release {
        /// SIZE or SIZE:PAGES.
        #[arg(required = true)]
        sizes: Vec<String>,
    },
}

pub fn run(action: Option<HugeAction>) -> Result<(), String> {
    let action = action.unwrap_or(HugeAction::Show { json: false });
    use tiermem::hugepages::{self, PoolRequest, SIZES};
    let changes = match action {
        HugeAction::Show { json } => {
            let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
                .unwrap_or_else(|_| "unavailable".into());
            if json {
                let pools: Vec<_> = SIZES
                    .iter()
                    .map(|&s| {
                        let p = hugepages::pool(s);
                        serde_json::json!({"size": s.to_string(), "total": p.total, "free": p.free,
                            "reserved": p.reserved, "surplus": p.surplus, "available": p.available()})
                    })
                    .collect();
                let v = serde_json::json!({"pools": pools, "thp_enabled": thp.trim()});
                println!("{}", serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?);
            } else {
                println!(
                    "{:<5} {:>8} {:>8} {:>9} {:>8} {:>10} {:>12}",
                    "size", "total", "free", "reserved", "surplus", "available", "avail bytes"
                );
                for s in SIZES {
                    let p = hugepages::pool(s);
                    println!(
                        "{:<5} {:>8} {:>8} {:>9} {:>8} {:>10} {:>12}",
                        s.to_string(),
                        p.total,
                        p.free,
                        p.reserved,
                        p.surplus,
                        p.available(),
                        format_size(p.available() * s.bytes() as u64)
                    );
                }
                println!("transparent huge pages: {}", thp.trim());
                println!("change with `tiermem hugepages reserve 2M:N 1G:N` / `release 2M[:N]` (as root)");
            }
            return Ok(());
        }
        HugeAction::Reserve { requests } => requests
            .iter()
            .map(|r| {
                let req: PoolRequest = r.parse()?;
                hugepages::reserve(&req).map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, String>>()?,
        HugeAction::Release { sizes } => sizes
            .iter()
            .map(|r| {
                let (size, pages) = match r.parse::<PoolRequest>() {
                    Ok(req) => (req.size, Some(req.pages)),
                    Err(_) => (format!("{r}:0").parse::<PoolRequest>()?.size, None),
                };
                hugepages::release(size, pages).map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, String>>()?,
    };
    let mut short = false;
    for c in &changes {
        println!("{c}");
        short |= !c.complete();
    }
    if short {
        return Err("the kernel did not give every page asked for (see above)".into());
    }
    Ok(())
}
