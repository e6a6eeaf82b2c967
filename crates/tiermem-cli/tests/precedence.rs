//! One precedence rule for every setting: the command line over the
//! environment over the defaults (issue 35 item 3: under `tiermem run`,
//! `TIERMEM_NEAR`, `TIERMEM_POLICY` and `TIERMEM_MOVERS` were silently
//! ignored because the command's own defaults won; under `LD_PRELOAD`
//! alone `TIERMEM_NEAR=garbage` dropped tiermem altogether; `tiermem env`
//! and docs/configuration.md left transparent mode's variables out and
//! gave `TIERMEM_FAR` another default).
//!
//! The preload library must be next to the `tiermem` binary (`cargo build
//! -p tiermem-preload`); without it the run tests say `skipped: <why>`.

use std::path::Path;
use std::process::Command;

mod common;

use common::{preload, BIN};

/// A command with no `TIERMEM_*` variable of the caller's.
fn clean(mut c: Command) -> Command {
    for (k, _) in std::env::vars() {
        if k.starts_with("TIERMEM_") {
            c.env_remove(k);
        }
    }
    c
}

/// Runs `true` (dash ends with `_exit`: no report) under `cmd`'s setup with `env`, writing the report;
/// returns (exit code, stderr, report).
fn report_of(mut cmd: Command, env: &[(&str, &str)], tag: &str) -> (Option<i32>, String, serde_json::Value) {
    let path = std::env::temp_dir().join(format!("tiermem-precedence-{tag}-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let out = cmd
        .env("TIERMEM_REPORT", &path)
        .env("TIERMEM_QUIET", "1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{tag}: no report ({e}): {err}"));
    let _ = std::fs::remove_file(&path);
    (out.status.code(), err, serde_json::from_str(&text).unwrap())
}

fn run(args: &[&str]) -> Command {
    let mut c = clean(Command::new(BIN));
    c.arg("run").args(args).args(["--", "true"]);
    c
}

#[test]
fn tiermem_run_honours_the_environment_unless_an_option_is_given() {
    if preload().is_none() {
        return;
    }
    // The environment over the defaults.
    let (code, err, r) = report_of(
        run(&[]),
        &[("TIERMEM_NEAR", "8M"), ("TIERMEM_POLICY", "scan")],
        "env",
    );
    assert_eq!(code, Some(0), "{err}");
    let s = r["settings"].as_str().unwrap();
    assert!(
        r["tiered"] == true && s.contains("near 8M") && s.contains("policy scan"),
        "{s}"
    );
    assert!(err.is_empty(), "no warning: {err}");
    // The command line over the environment, said once.
    let (code, err, r) = report_of(
        run(&["--near", "16M", "--policy", "clock"]),
        &[("TIERMEM_NEAR", "8M"), ("TIERMEM_POLICY", "scan")],
        "cli",
    );
    assert_eq!(code, Some(0), "{err}");
    let s = r["settings"].as_str().unwrap();
    assert!(s.contains("near 16M") && s.contains("policy clock"), "{s}");
    assert!(
        err.contains("tiermem: --near 16M overrides TIERMEM_NEAR=8M"),
        "{err}"
    );
    assert!(
        err.contains("tiermem: --policy clock overrides TIERMEM_POLICY=scan"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 2, "{err}");
}

#[test]
fn a_bad_variable_under_tiermem_run_warns_once_and_keeps_the_default() {
    if preload().is_none() {
        return;
    }
    let (code, err, r) = report_of(
        run(&["--near", "8M"]),
        &[("TIERMEM_POLICY", "lru"), ("TIERMEM_PAGE_SIZE", "3k")],
        "badenv",
    );
    assert_eq!(code, Some(0), "{err}");
    let s = r["settings"].as_str().unwrap();
    assert!(
        s.contains("near 8M") && s.contains("policy fifo") && s.contains("4k pages"),
        "{s}"
    );
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("ignoring TIERMEM_POLICY=\"lru\""))
            .count(),
        1,
        "{err}"
    );
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("ignoring TIERMEM_PAGE_SIZE=\"3k\""))
            .count(),
        1,
        "{err}"
    );
    // The same value as an option is an error before anything runs.
    let out = run(&["--policy", "lru"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
}

/// `LD_PRELOAD` alone: a variable that is not understood costs only
/// itself (docs/errors.md), the rest of the configuration holds.
#[test]
fn under_ld_preload_a_bad_variable_keeps_its_default_and_tiering() {
    let Some(lib) = preload() else { return };
    let sh = || {
        let mut c = clean(Command::new("true"));
        c.env("LD_PRELOAD", &lib);
        c
    };
    // A bad budget: the default (no tiering), and the page size kept.
    let (code, err, r) = report_of(
        sh(),
        &[("TIERMEM_NEAR", "garbage"), ("TIERMEM_PAGE_SIZE", "thp")],
        "ld-near",
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("ignoring TIERMEM_NEAR=\"garbage\""), "{err}");
    assert!(!err.contains("running without tiermem"), "{err}");
    assert_eq!(r["page"], "thp", "{r}");
    // A bad threshold: the budget still tiers.
    let (code, err, r) = report_of(
        sh(),
        &[("TIERMEM_NEAR", "8M"), ("TIERMEM_THRESHOLD", "lots")],
        "ld-threshold",
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("ignoring TIERMEM_THRESHOLD=\"lots\""), "{err}");
    assert!(r["tiered"] == true && r["threshold_bytes"] == 1 << 20, "{r}");
}

/// The command, the preload and the library read each value with the one
/// parser of the option table: `tiermem run` refuses what the preload
/// would refuse (a heap below 1 MiB was a warning in the program, after
/// the command had taken it), and on/off values are the same words in any
/// case everywhere (`TIERMEM_QUIET=ON` was a warning under the preload).
#[test]
fn the_command_and_the_preload_take_the_same_values() {
    if preload().is_none() {
        return;
    }
    let out = run(&["--heap-size", "100K"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--heap-size 100K") && err.contains("below 1M"),
        "{err}"
    );
    let (code, err, r) = report_of(
        run(&["--near", "8M", "--page-size", "4096"]),
        &[("TIERMEM_STATIC", "OFF"), ("TIERMEM_MOVERS", " ")],
        "same-values",
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(err.is_empty(), "no warning: {err}");
    assert!(r["tiered"] == true && r["page"] == "4k", "{r}");
}

/// `tiermem env` lists every variable the code reads, with one default
/// for `TIERMEM_FAR`, and docs/configuration.md holds the same rows.
#[test]
fn tiermem_env_lists_every_variable_and_the_docs_match() {
    let out = Command::new(BIN).arg("env").output().unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Read by the library, the preload, the C API, the command.
    let mut read = std::collections::BTreeSet::new();
    for dir in [
        "tiermem",
        "tiermem-preload",
        "tiermem-capi",
        "tiermem-cli",
        "tiermem-sys",
    ] {
        scan(&root.join("crates").join(dir).join("src"), &mut read);
    }
    // Names of constants and of the command's own child processes.
    let internal = [
        "TIERMEM_VERSION",
        "TIERMEM_VERSION_MAJOR",
        "TIERMEM_VERSION_MINOR",
        "TIERMEM_VERSION_PATCH",
    ];
    let missing: Vec<_> = read
        .iter()
        .filter(|v| !internal.contains(&v.as_str()))
        .filter(|v| !table.contains(&format!("| `{v}` |")))
        .collect();
    assert!(missing.is_empty(), "not in `tiermem env`: {missing:?}");
    for v in [
        "TIERMEM_THRESHOLD",
        "TIERMEM_STATIC",
        "TIERMEM_REPORT",
        "TIERMEM_QUIET",
        "TIERMEM_FOLLOW_EXEC",
        "TIERMEM_PRELOAD",
        "TIERMEM_FALLBACK",
    ] {
        assert!(table.contains(&format!("| `{v}` |")), "{v}");
    }
    let far: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("| `TIERMEM_FAR` |"))
        .collect();
    assert_eq!(far.len(), 1);
    assert!(far[0].contains("twice the physical memory"), "{}", far[0]);
    let doc = std::fs::read_to_string(root.join("docs/configuration.md")).unwrap();
    for line in table.lines() {
        assert!(
            doc.contains(line),
            "docs/configuration.md lacks `tiermem env`'s row:\n{line}"
        );
    }
}

/// Every option of `tiermem run` but `--reserve` is a row of the option
/// table (`tiermem::config::options`) with that flag, and every flag of the
/// table is an option of `tiermem run`, whose help names its variable (and
/// states the table's default, where it states one).
#[test]
fn tiermem_run_flags_are_the_option_tables() {
    use tiermem::config::options::{by_flag, OPTIONS};
    let out = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    // The options' paragraphs: from the line that names an option to the next.
    let mut paragraphs: Vec<(String, String)> = Vec::new();
    for line in help.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("--") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            paragraphs.push((format!("--{name}"), String::new()));
        }
        if let Some((_, text)) = paragraphs.last_mut() {
            *text += " ";
            *text += t;
        }
    }
    let flags: Vec<&str> = paragraphs.iter().map(|(f, _)| f.as_str()).collect();
    for (flag, text) in &paragraphs {
        if ["--reserve", "--help"].contains(&flag.as_str()) {
            continue;
        }
        let o = by_flag(flag).unwrap_or_else(|| panic!("tiermem run {flag} is not in the option table"));
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            text.contains(o.var),
            "tiermem run {flag}'s help does not name {}: {text}",
            o.var
        );
        if let Some(d) = text.split("[default: ").nth(1).and_then(|d| d.split(';').next()) {
            let want = o.default_value().unwrap_or(d);
            assert!(
                d.eq_ignore_ascii_case(want) || o.default_value().is_none(),
                "tiermem run {flag}: help says default {d}, the table {want}"
            );
        }
    }
    for o in OPTIONS {
        if let Some(f) = o.flag {
            assert!(
                flags.contains(&f),
                "the table's {f} ({}) is not an option of tiermem run",
                o.var
            );
        }
    }
}

/// The `"TIERMEM_..."` string literals of the `.rs` files under `dir`,
/// tests left out.
fn scan(dir: &Path, out: &mut std::collections::BTreeSet<String>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            scan(&p, out);
            continue;
        }
        let name = p.file_name().unwrap().to_string_lossy();
        if !name.ends_with(".rs") || name == "tests.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for part in code.split("\"TIERMEM_").skip(1) {
            let n: String = part
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if part[n.len()..].starts_with('"') {
                out.insert(format!("TIERMEM_{n}"));
            }
        }
    }
}
