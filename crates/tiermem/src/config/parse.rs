//! The parsers of option values (sizes, budgets, CPU lists, on/off):
//! one per form of value, shared by the library, the preload and the
//! command (`super::options`).

use super::HugeKind;

/// A near budget as `tiermem run --near` and `TIERMEM_NEAR` take it: a
/// size (`8G`), a share of physical memory (`50%`), or a share of the
/// program's footprint (`50%fp`) as a previous run measured it in its
/// JSON report (`report`).
///
/// ```
/// let mem = 8 << 30;
/// let b = tiermem::config::parse_near("25%", mem, None).unwrap();
/// assert_eq!(b.bytes, 2 << 30);
/// assert_eq!(b.share.as_deref(), Some("25% of 8G physical memory"));
/// assert!(tiermem::config::parse_near("50%fp", mem, None).is_err());
/// ```
pub fn parse_near(v: &str, mem_total: u64, report: Option<&std::path::Path>) -> Result<NearSpec, String> {
    let v = v.trim();
    if let Some(p) = v.strip_suffix("%fp") {
        let share = parse_share(&format!("{p}%"), 1 << 40)? as f64 / (1u64 << 40) as f64;
        let path = report.ok_or(
            "a share of the footprint (%fp) is of the footprint a previous run measured: give that run's \
             --report FILE (TIERMEM_REPORT)",
        )?;
        let footprint = footprint_in_report(path)?;
        return Ok(NearSpec {
            bytes: (footprint as f64 * share) as u64,
            share: Some(format!(
                "{p}% of the {} footprint in {}",
                format_size(footprint),
                path.display()
            )),
            footprint: Some(footprint),
        });
    }
    let bytes = parse_share(v, mem_total)?;
    Ok(NearSpec {
        bytes,
        share: v
            .ends_with('%')
            .then(|| format!("{v} of {} physical memory", format_size(mem_total))),
        footprint: None,
    })
}

/// A near budget in bytes, and what it was a share of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NearSpec {
    /// The budget.
    pub bytes: u64,
    /// What it was a share of (`50% of the 240M footprint in r.json`),
    /// when given as a share.
    pub share: Option<String>,
    /// The program's footprint it was a share of (`%fp`).
    pub footprint: Option<u64>,
}

/// The program's footprint that the `tiermem run --report` file at `path`
/// recorded: `cost.program_footprint_bytes`, which a run knows when its
/// budget was never reached (its peak resident memory) or when its own
/// budget was a share of a footprint measured before.
pub fn footprint_in_report(path: &std::path::Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "{}: {e}: measure the footprint first with a run without tiering: tiermem run --report {} -- PROGRAM",
            path.display(),
            path.display()
        )
    })?;
    let j: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not a tiermem report: {e}", path.display()))?;
    match j["cost"]["program_footprint_bytes"].as_u64() {
        Some(b) if b > 0 => Ok(b),
        _ => Err(format!(
            "{} is the report of a run that reached its budget, so it does not know the program's \
             footprint: measure it with a run without tiering: tiermem run --report {} -- PROGRAM",
            path.display(),
            path.display()
        )),
    }
}

/// A size (`8G`), or a percentage of `total` (`50%`).
pub fn parse_share(v: &str, total: u64) -> Result<u64, String> {
    if let Some(p) = v.trim().strip_suffix('%') {
        let p: f64 = p
            .trim()
            .parse()
            .map_err(|_| format!("{v:?} is not a percentage"))?;
        if !(p > 0.0 && p <= 100.0) {
            return Err(format!("{v:?}: a percentage must be above 0 and at most 100"));
        }
        return Ok((total as f64 * p / 100.0) as u64);
    }
    parse_size(v)
}

/// Parses `4096`, `4K`, `512M`, `1G`, `2T`, `1.5G`, `64KiB` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let stripped = lower.trim_end_matches("ib").trim_end_matches('b');
    let (num, mult) = match stripped.chars().last() {
        Some('k') => (&stripped[..stripped.len() - 1], 1u64 << 10),
        Some('m') => (&stripped[..stripped.len() - 1], 1 << 20),
        Some('g') => (&stripped[..stripped.len() - 1], 1 << 30),
        Some('t') => (&stripped[..stripped.len() - 1], 1 << 40),
        _ => (stripped, 1),
    };
    let num = num.trim();
    if num.is_empty() {
        return Err(format!("{s:?} is not a size"));
    }
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult).ok_or_else(|| format!("{s:?} overflows"));
    }
    match num.parse::<f64>() {
        Ok(f) if f >= 0.0 && f.is_finite() && f * (mult as f64) < u64::MAX as f64 => {
            Ok((f * mult as f64) as u64)
        }
        _ => Err(format!("{s:?} is not a size (use e.g. 4096, 64K, 512M, 1G)")),
    }
}

/// Formats a byte count with a binary unit (`512M`, `1G`, `4K`, `1.5G`).
pub fn format_size(b: u64) -> String {
    for (unit, m) in [("T", 1u64 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)] {
        if b >= m {
            return if b.is_multiple_of(m) {
                format!("{}{unit}", b / m)
            } else {
                format!("{:.2}{unit}", b as f64 / m as f64)
            };
        }
    }
    format!("{b}")
}

/// Parses a CPU list such as `0,2-3`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            let (a, b): (usize, usize) = (
                a.trim().parse().map_err(|_| format!("bad CPU {a:?}"))?,
                b.trim().parse().map_err(|_| format!("bad CPU {b:?}"))?,
            );
            if a > b {
                return Err(format!("bad CPU range {part:?}"));
            }
            v.extend(a..=b);
        } else {
            v.push(part.trim().parse().map_err(|_| format!("bad CPU {part:?}"))?);
        }
    }
    Ok(v)
}

/// The one parser of on/off values, for every variable and option:
/// `on`, `1`, `yes`, `true` and `off`, `0`, `no`, `false`, in any case.
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "yes" | "true" | "on" => Ok(true),
        "0" | "no" | "false" | "off" => Ok(false),
        _ => Err("expected on or off".into()),
    }
}

/// The one parser of page sizes (`TIERMEM_PAGE_SIZE`, `tiermem run
/// --page-size`): `4K`, `2M` (hugetlbfs), `THP` (or `2M-THP`), `1G`, in
/// any case, or a size in bytes. Regions take all but 1G
/// ([`super::PageSize::parse`]); the preload's heap takes 1G too, without
/// tiering.
pub fn parse_page_size(s: &str) -> Option<HugeKind> {
    match s.trim().to_ascii_uppercase().as_str() {
        "THP" | "2M-THP" | "2MTHP" => Some(HugeKind::Thp),
        other => match parse_size(other).ok()? {
            4096 => Some(HugeKind::Base4K),
            b if b == 2 << 20 => Some(HugeKind::Huge2M),
            b if b == 1 << 30 => Some(HugeKind::Huge1G),
            _ => None,
        },
    }
}

/// A whole number from `min` to `max`.
pub fn parse_count(s: &str, min: usize, max: usize) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        Ok(_) if max == usize::MAX => Err(format!("must be at least {min}")),
        Ok(_) => Err(format!("must be {min} to {max}")),
        Err(_) => Err("not a number".into()),
    }
}
