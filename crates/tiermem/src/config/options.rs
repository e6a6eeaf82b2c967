//! The one table of options: every `TIERMEM_*` variable once, with its
//! `tiermem run` flag (if any), the form of its value (whose parser is
//! the one every reader uses), its default and a line of documentation.
//!
//! The library reads region settings through it ([`super::Config::apply_vars`]),
//! the preload its own settings, and `tiermem run` maps each flag to its
//! variable and checks its value with the same parser; `tiermem env` prints
//! [`markdown`], and the table of docs/configuration.md is [`markdown`]
//! between two markers (a test fails when they differ: `tiermem generate
//! configuration docs/configuration.md` rewrites it).

use super::modes::{DirtyTracking, FaultPath, InstallMethod, KernelAccess};
use super::parse::{parse_count, parse_cpu_list, parse_on_off, parse_page_size, parse_share, parse_size};
pub use super::table::*;
use super::Config;
use super::HugeKind;
use crate::policy::PolicyKind;

/// The form of an option's value; [`Kind::check`] is its parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A size ([`parse_size`]) of at least `min` bytes.
    Size {
        /// The smallest size taken.
        min: u64,
    },
    /// A near budget: a size, a share of physical memory (`50%`) or of
    /// the program's footprint (`50%fp`, transparent mode only).
    Near,
    /// A node's near budget: a size or a share of physical memory.
    NearNode,
    /// On or off ([`parse_on_off`]).
    OnOff,
    /// A whole number from `min` to `max`.
    Count {
        /// The smallest.
        min: usize,
        /// The largest.
        max: usize,
    },
    /// A mover count (0 to 64) or `auto` ([`parse_movers`]).
    Movers,
    /// A CPU list (`0,2-3`).
    Cpus,
    /// A page size ([`parse_page_size`]).
    PageSize,
    /// A replacement policy ([`PolicyKind::from_name`]).
    Policy,
    /// A fault path ([`FaultPath::from_name`]).
    FaultPath,
    /// A dirty-tracking mode ([`DirtyTracking::from_name`]).
    Dirty,
    /// Kernel-access handling ([`KernelAccess::from_name`]).
    KernelAccess,
    /// An install method ([`InstallMethod::from_name`]).
    Install,
    /// `error` or `untiered`.
    Fallback,
    /// `tiered` or a huge page kind (`2m`, `1g`, `thp`).
    GlobalHeap,
    /// `SIZE:PAGES` list.
    HugePages,
    /// A fault-injection spec (tests only).
    FaultInject,
    /// A path (not empty).
    Path,
    /// Free text (set by tiermem itself).
    Text,
}

/// `a, b or c`.
fn one_of(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// A value of a named mode: `from_name`'s answer, or an error listing the
/// names of `all`.
fn parse_named<T: Copy>(
    v: &str,
    from_name: impl Fn(&str) -> Option<T>,
    all: &[T],
    name: impl Fn(T) -> &'static str,
) -> Result<T, String> {
    from_name(v.trim()).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|&t| name(t)).collect();
        format!("expected {}", one_of(&names))
    })
}

/// The one parser of `TIERMEM_POLICY` and `--policy`: a thin call into
/// [`PolicyKind::from_name`], whose names the message lists.
pub fn parse_policy(v: &str) -> Result<PolicyKind, String> {
    parse_named(v, PolicyKind::from_name, PolicyKind::ALL, PolicyKind::name)
}

/// `TIERMEM_MOVERS`, `--movers`: a count, or None for `auto`.
pub fn parse_movers(v: &str) -> Result<Option<usize>, String> {
    match v.trim() {
        "auto" => Ok(None),
        n => parse_count(n, 0, 64)
            .map(Some)
            .map_err(|_| "expected a count from 0 to 64, or auto".into()),
    }
}

/// `TIERMEM_FAULT_PATH`.
pub fn parse_fault_path(v: &str) -> Result<FaultPath, String> {
    parse_named(v, FaultPath::from_name, FaultPath::ALL, FaultPath::name)
}

/// `TIERMEM_DIRTY`.
pub fn parse_dirty(v: &str) -> Result<DirtyTracking, String> {
    parse_named(
        v,
        DirtyTracking::from_name,
        DirtyTracking::ALL,
        DirtyTracking::name,
    )
}

/// `TIERMEM_KERNEL_ACCESS`.
pub fn parse_kernel_access(v: &str) -> Result<KernelAccess, String> {
    parse_named(v, KernelAccess::from_name, KernelAccess::ALL, KernelAccess::name)
}

/// `TIERMEM_INSTALL`.
pub fn parse_install(v: &str) -> Result<InstallMethod, String> {
    parse_named(
        v,
        InstallMethod::from_name,
        InstallMethod::ALL,
        InstallMethod::name,
    )
}

/// `TIERMEM_PAGE_SIZE`, `--page-size`: [`parse_page_size`], with the
/// message of a value it does not take.
pub fn parse_page(v: &str) -> Result<HugeKind, String> {
    parse_page_size(v).ok_or_else(|| "expected 4k, thp, 2m or 1g".into())
}

/// `TIERMEM_FALLBACK`, `--fallback`: whether to run untiered.
pub fn parse_fallback(v: &str) -> Result<bool, String> {
    match v.trim() {
        "error" => Ok(false),
        "untiered" => Ok(true),
        _ => Err("expected error or untiered".into()),
    }
}

/// `TIERMEM_GLOBAL_HEAP`: None for the tiered region, else the huge page
/// kind of an untiered heap.
pub fn parse_global_heap(v: &str) -> Result<Option<HugeKind>, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "tiered" => Ok(None),
        k => match HugeKind::from_name(k) {
            Some(HugeKind::Base4K) | None => Err("expected tiered, 2m, 1g or thp".into()),
            kind => Ok(kind),
        },
    }
}

impl Kind {
    /// Checks `v` with this kind's parser.
    pub fn check(self, v: &str) -> Result<(), String> {
        let v = v.trim();
        match self {
            Kind::Size { .. } => self.size(v).map(|_| ()),
            Kind::Near => match v.strip_suffix("%fp") {
                Some(p) => parse_share(&format!("{p}%"), 1 << 40).map(|_| ()),
                None => parse_share(v, 1 << 40).map(|_| ()),
            },
            Kind::NearNode => parse_share(v, 1 << 40).map(|_| ()),
            Kind::OnOff => parse_on_off(v).map(|_| ()),
            Kind::Count { .. } => self.count(v).map(|_| ()),
            Kind::Movers => parse_movers(v).map(|_| ()),
            Kind::Cpus => parse_cpu_list(v).map(|_| ()),
            Kind::PageSize => parse_page(v).map(|_| ()),
            Kind::Policy => parse_policy(v).map(|_| ()),
            Kind::FaultPath => parse_fault_path(v).map(|_| ()),
            Kind::Dirty => parse_dirty(v).map(|_| ()),
            Kind::KernelAccess => parse_kernel_access(v).map(|_| ()),
            Kind::Install => parse_install(v).map(|_| ()),
            Kind::Fallback => parse_fallback(v).map(|_| ()),
            Kind::GlobalHeap => parse_global_heap(v).map(|_| ()),
            Kind::HugePages => crate::pool_request::parse_requests(v).map(|_| ()),
            Kind::FaultInject => crate::store::inject::FaultInjectSpec::parse(v).map(|_| ()),
            Kind::Path if v.is_empty() => Err("empty path".into()),
            Kind::Path | Kind::Text => Ok(()),
        }
    }

    /// A size, at least the kind's minimum ([`Kind::Size`]).
    pub fn size(self, v: &str) -> Result<u64, String> {
        let min = match self {
            Kind::Size { min } => min,
            _ => 0,
        };
        match parse_size(v)? {
            b if b < min => Err(format!("below {}", super::format_size(min))),
            b => Ok(b),
        }
    }

    /// A whole number in the kind's range ([`Kind::Count`]).
    pub fn count(self, v: &str) -> Result<usize, String> {
        match self {
            Kind::Count { min, max } => parse_count(v, min, max),
            _ => parse_count(v, 0, usize::MAX),
        }
    }
}

/// An option's default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultValue {
    /// This value, everywhere; the option's parser takes it.
    Value(&'static str),
    /// `preload` for the whole program (`tiermem run`, the preload), and
    /// `region` for the process-wide region built from the environment
    /// (`tm_malloc_global`); both parse.
    Split {
        /// Under `tiermem run` and the preload.
        preload: &'static str,
        /// For `tm_malloc_global`'s region.
        region: &'static str,
    },
    /// Computed, or unset: described in words.
    Described(&'static str),
}

/// Sets a region setting from a value (with the option's kind, for its
/// bounds).
pub(super) type Apply = fn(&mut Config, Kind, &str) -> Result<(), String>;

/// One option.
pub struct Opt {
    /// The environment variable.
    pub var: &'static str,
    /// The `tiermem run` option that sets it, if any.
    pub flag: Option<&'static str>,
    /// The form of its value, and so its parser.
    pub kind: Kind,
    /// Unit or value form, in words.
    pub unit: &'static str,
    /// The default.
    pub default: DefaultValue,
    /// What it does.
    pub doc: &'static str,
    /// For a region setting: sets it in a [`Config`] (the kind is the
    /// option's, for its bounds).
    pub(super) apply: Option<Apply>,
}

impl Opt {
    /// Whether the option is a region setting ([`Config::apply_vars`]).
    pub fn is_region(&self) -> bool {
        self.apply.is_some()
    }

    /// Sets the option's value `v` in `c` (region settings).
    pub(super) fn apply(&self, c: &mut Config, v: &str) -> Result<(), String> {
        match self.apply {
            Some(f) => f(c, self.kind, v.trim()),
            None => Err(format!("{} is not a region setting", self.var)),
        }
    }

    /// Checks a value with the option's parser.
    pub fn check(&self, v: &str) -> Result<(), String> {
        self.kind.check(v)
    }

    /// The value `lookup` gives the variable, trimmed; an empty value is
    /// unset.
    pub fn value_in(&self, lookup: &dyn Fn(&str) -> Option<String>) -> Option<String> {
        lookup(self.var)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    /// The value of the variable in the process environment ([`Opt::value_in`]).
    pub fn value(&self) -> Option<String> {
        self.value_in(&|n| tiermem_sys::env::var(n))
    }

    /// The default under `tiermem run` and the preload, as a value its
    /// parser takes (None: computed or unset).
    pub fn default_value(&self) -> Option<&'static str> {
        match self.default {
            DefaultValue::Value(v) | DefaultValue::Split { preload: v, .. } => Some(v),
            DefaultValue::Described(_) => None,
        }
    }

    /// The default for the process-wide region built from the environment.
    pub fn region_default(&self) -> Option<&'static str> {
        match self.default {
            DefaultValue::Value(v) | DefaultValue::Split { region: v, .. } => Some(v),
            DefaultValue::Described(_) => None,
        }
    }

    /// The default of an on/off option (false for any other).
    pub fn default_on(&self) -> bool {
        self.default_value().is_some_and(|v| parse_on_off(v) == Ok(true))
    }

    /// The default as `tiermem env` shows it.
    pub fn default_text(&self) -> String {
        match self.default {
            DefaultValue::Value(v) | DefaultValue::Described(v) => v.to_owned(),
            DefaultValue::Split { preload, region } => {
                format!("{preload} under `tiermem run` and the preload; {region} for tm_malloc_global")
            }
        }
    }

    /// What a warning says is kept, under `tiermem run` and the preload.
    pub fn keeping(&self) -> String {
        match self.default {
            DefaultValue::Split { preload: "100%", .. } if self.kind == Kind::Near => {
                "100% (no tiering)".into()
            }
            DefaultValue::Split { preload: v, .. } | DefaultValue::Value(v) | DefaultValue::Described(v) => {
                v.into()
            }
        }
    }

    /// What a warning says is kept, for a region from the environment.
    pub fn region_keeping(&self) -> String {
        match self.default {
            DefaultValue::Split { region, .. } => region.into(),
            _ => self.keeping(),
        }
    }

    /// The one warning for a value that is not understood: it names the
    /// variable, the value, why, and the default kept.
    pub fn ignoring(&self, value: &str, why: &str, keeping: &str) -> String {
        format!(
            "tiermem: ignoring {}={value:?}: {why}; keeping {keeping}",
            self.var
        )
    }
}

/// The option of variable `var`.
pub fn find(var: &str) -> Option<&'static Opt> {
    OPTIONS.iter().copied().find(|o| o.var == var)
}

/// The option of `tiermem run`'s `flag` (`--near`).
pub fn by_flag(flag: &str) -> Option<&'static Opt> {
    OPTIONS.iter().copied().find(|o| o.flag == Some(flag))
}

/// The table of every option, as Markdown (`tiermem env`).
pub fn markdown() -> String {
    let mut s =
        String::from("| variable | `tiermem run` | unit | default | meaning |\n|---|---|---|---|---|\n");
    for o in OPTIONS {
        let flag = o.flag.map_or(String::new(), |f| format!("`{f}`"));
        s += &format!(
            "| `{}` | {flag} | {} | {} | {} |\n",
            o.var,
            o.unit,
            o.default_text(),
            o.doc
        );
    }
    s
}

/// The line before the generated table in docs/configuration.md.
pub const BEGIN_MARKER: &str =
    "<!-- generated from crates/tiermem/src/config/options.rs by `tiermem generate configuration`: do not edit -->";
/// The line after it.
pub const END_MARKER: &str = "<!-- end of the generated table -->";

/// `doc` with the text between [`BEGIN_MARKER`] and [`END_MARKER`]
/// replaced by [`markdown`] (the hand-written rest kept).
pub fn splice_markdown(doc: &str) -> Result<String, String> {
    let begin = doc
        .find(BEGIN_MARKER)
        .ok_or_else(|| format!("no line {BEGIN_MARKER:?}"))?;
    let after_begin = begin + BEGIN_MARKER.len();
    let end = doc[after_begin..]
        .find(END_MARKER)
        .map(|e| after_begin + e)
        .ok_or_else(|| format!("no line {END_MARKER:?} after the first marker"))?;
    Ok(format!(
        "{}\n\n{}\n{}",
        &doc[..after_begin],
        markdown(),
        &doc[end..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_variable_and_flag_is_in_the_table_once() {
        let mut vars = HashSet::new();
        let mut flags = HashSet::new();
        for o in OPTIONS {
            assert!(o.var.starts_with("TIERMEM_"), "{}", o.var);
            assert!(vars.insert(o.var), "{} twice", o.var);
            if let Some(f) = o.flag {
                assert!(f.starts_with("--"), "{}: {f}", o.var);
                assert!(flags.insert(f), "{f} twice");
            }
            assert!(!o.unit.is_empty() && !o.doc.is_empty(), "{}", o.var);
            assert!(
                !o.doc.contains('\n') && !o.doc.contains(" | "),
                "{}: one table cell",
                o.var
            );
        }
    }

    #[test]
    fn every_default_parses_with_its_own_parser() {
        for o in OPTIONS {
            for v in [o.default_value(), o.region_default()].into_iter().flatten() {
                o.check(v)
                    .unwrap_or_else(|e| panic!("{}'s default {v:?} does not parse: {e}", o.var));
            }
            if let DefaultValue::Split { preload, region } = o.default {
                assert_ne!(preload, region, "{}: a split default differs", o.var);
                let shown = o.default_text();
                assert!(shown.contains(preload) && shown.contains(region), "{shown}");
            }
        }
    }

    /// `Config::new`'s defaults are the table's: applying each region
    /// option's default (the region's) changes nothing.
    #[test]
    fn config_defaults_are_the_tables() {
        let base = Config::new(4 << 30, 1 << 30);
        for o in OPTIONS.iter().filter(|o| o.is_region()) {
            let Some(v) = o.region_default() else { continue };
            let mut c = base.clone();
            o.apply(&mut c, v).unwrap();
            assert_eq!(c, base, "{}={v} is not Config::new's default", o.var);
        }
    }

    #[test]
    fn every_flag_maps_to_its_variable() {
        for o in OPTIONS {
            if let Some(f) = o.flag {
                assert_eq!(by_flag(f).map(|b| b.var), Some(o.var));
                assert_eq!(find(o.var).map(|b| b.flag), Some(Some(f)));
            }
        }
        let flags: Vec<_> = OPTIONS.iter().filter_map(|o| o.flag).collect();
        for f in [
            "--near",
            "--near-node",
            "--far",
            "--heap-size",
            "--page-size",
            "--movers",
            "--mover-cpus",
            "--policy",
            "--threshold",
            "--static",
            "--report",
            "--quiet",
            "--follow-exec",
            "--fallback",
        ] {
            assert!(flags.contains(&f), "{f}");
        }
        assert_eq!(by_flag("--reserve").map(|o| o.var), None);
    }

    #[test]
    fn parsers_are_shared_and_bounded() {
        for v in ["on", "ON", "1", "yes", "True"] {
            assert_eq!(parse_on_off(v), Ok(true), "{v}");
        }
        for v in ["off", "Off", "0", "no", "false"] {
            assert_eq!(parse_on_off(v), Ok(false), "{v}");
        }
        assert!(parse_on_off("maybe").is_err());
        assert!(parse_on_off("").is_err());
        assert_eq!(parse_page_size("4k"), Some(HugeKind::Base4K));
        assert_eq!(parse_page_size("4096"), Some(HugeKind::Base4K));
        assert_eq!(parse_page_size("2M"), Some(HugeKind::Huge2M));
        assert_eq!(parse_page_size("thp"), Some(HugeKind::Thp));
        assert_eq!(parse_page_size("2M-THP"), Some(HugeKind::Thp));
        assert_eq!(parse_page_size("1g"), Some(HugeKind::Huge1G));
        assert_eq!(parse_page_size("3K"), None);
        assert_eq!(
            super::super::PageSize::parse("1G"),
            None,
            "regions have no 1 GiB pages"
        );
        assert!(MOVERS.check("64").is_ok() && MOVERS.check("65").is_err());
        assert_eq!(parse_movers(" auto "), Ok(None));
        assert_eq!(parse_movers("3"), Ok(Some(3)));
        assert!(parse_movers("many").unwrap_err().contains("or auto"));
        let mut c = Config::new(1 << 30, 1 << 20);
        c.apply_vars(|v| (v == "TIERMEM_MOVERS").then(|| "auto".to_string()));
        assert_eq!((c.movers, c.movers_auto), (1, true));
        c.apply_vars(|v| (v == "TIERMEM_MOVERS").then(|| "2".to_string()));
        assert_eq!((c.movers, c.movers_auto), (2, false));
        assert!(EVICT_BATCH.check("0").is_err() && EVICT_BATCH.check("512").is_ok());
        assert!(FAR.check("1M").is_ok() && FAR.check("512K").is_err());
        assert!(NEAR.check("50%fp").is_ok() && NEAR.check("50%").is_ok() && NEAR.check("8G").is_ok());
        assert!(NEAR.check("garbage").is_err() && NEAR_NODE.check("50%fp").is_err());
        assert!(FALLBACK.check("untiered").is_ok() && FALLBACK.check("maybe").is_err());
        for p in PolicyKind::ALL {
            assert_eq!(parse_policy(p.name()), Ok(*p));
        }
        let e = parse_policy("lru").unwrap_err();
        assert!(PolicyKind::ALL.iter().all(|p| e.contains(p.name())), "{e}");
    }

    #[test]
    fn warnings_keep_the_default_in_effect() {
        assert_eq!(NEAR.keeping(), "100% (no tiering)");
        assert_eq!(NEAR.region_keeping(), "1G");
        assert_eq!(QUIET.keeping(), "off");
        assert!(!QUIET.default_on() && STATIC.default_on() && PREFETCH.default_on());
        assert_eq!(
            MOVERS.ignoring("x", "not a number", "0"),
            "tiermem: ignoring TIERMEM_MOVERS=\"x\": not a number; keeping 0"
        );
        // Empty is unset.
        assert_eq!(MOVERS.value_in(&|_| Some("  ".into())), None);
        assert_eq!(MOVERS.value_in(&|_| Some(" 2 ".into())).as_deref(), Some("2"));
    }

    /// docs/configuration.md's table is the one this table makes
    /// (`tiermem generate configuration docs/configuration.md` rewrites it).
    #[test]
    fn docs_configuration_md_is_generated_from_the_table() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
        let doc = std::fs::read_to_string(&path).unwrap();
        let want = splice_markdown(&doc).unwrap();
        assert!(
            doc == want,
            "docs/configuration.md differs from the option table: run \
             `cargo run -p tiermem-cli -- generate configuration docs/configuration.md`"
        );
        // The hand-written parts stay.
        assert!(doc.starts_with("# Configuration reference") && doc.contains("## Fault injection"));
        for o in OPTIONS {
            assert!(doc.contains(&format!("| `{}` |", o.var)), "{}", o.var);
        }
    }

    #[test]
    fn splice_replaces_only_between_the_markers() {
        let doc = format!("intro\n{BEGIN_MARKER}\nSTALE-ROWS\n{END_MARKER}\noutro\n");
        let new = splice_markdown(&doc).unwrap();
        assert!(
            new.starts_with(&format!("intro\n{BEGIN_MARKER}\n\n| variable |")),
            "{new}"
        );
        assert!(new.ends_with(&format!("|\n\n{END_MARKER}\noutro\n")), "{new}");
        assert!(!new.contains("STALE-ROWS"));
        assert_eq!(splice_markdown(&new).unwrap(), new);
        assert!(splice_markdown("no markers").is_err());
    }
}
