//! Every `TIERMEM_*` variable and every `--option` that the sources, the
//! header, the docs and the scripts name exists (issue 30 item 8: running
//! out of heap reservation said "raise TIERMEM_FAR / --far-size", and
//! `tiermem run` has no `--far-size`; it is `--heap-size`).
//!
//! - A variable exists if some code reads it: `var("..")`-style reads in
//!   Rust, `getenv("..")` in C, `$NAME` in a shell script, or the
//!   `tiermem env` listing; C macros (`#define TIERMEM_...`) count too.
//! - An option exists if some `tiermem` command (`tiermem X --help`,
//!   `tiermem bench X --help`) has it, or another tool's that the text
//!   runs (cargo, gcc, mpirun, ...: [`OTHER_TOOLS`]). Options written after
//!   `tiermem X` on one line must be that command's own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Options of the tools besides `tiermem` that the sources and docs
/// mention (cargo and its test harness, compilers, MPI launchers, the
/// system's tools), and program arguments of the test programs.
const OTHER_TOOLS: &[&str] = &[
    // cargo, rustup, the test harness
    "--release",
    "--workspace",
    "--all-targets",
    "--all",
    "--locked",
    "--features",
    "--test",
    "--tests",
    "--lib",
    "--bin",
    "--bins",
    "--examples",
    "--example",
    "--no-run",
    "--manifest-path",
    "--target",
    "--target-dir",
    "--profile",
    "--check",
    "--exact",
    "--nocapture",
    "--test-threads",
    "--ignored",
    "--include-ignored",
    "--no-default-features",
    "--all-features",
    "--package",
    "--component",
    "--toolchain",
    "--quiet",
    "--verbose",
    "--color",
    "--skip",
    "--show-output",
    "--no-fail-fast",
    "--cfg",
    "--document-private-items",
    "--offline",
    "--frozen",
    "--version",
    "--help",
    "--list",
    "--format",
    // scripts/install.sh, cargo install, pkg-config, cmake, patchelf
    "--prefix",
    "--no-build",
    "--uninstall",
    "--fortran",
    "--mpi",
    "--path",
    "--cflags",
    "--libs",
    "--static",
    "--modversion",
    "--build",
    "--set-soname",
    "--reload",
    "--name-match",
    // compilers, linkers, sanitizers
    "--std",
    "--coverage",
    "--as-needed",
    "--no-as-needed",
    "--whole-archive",
    "--no-whole-archive",
    "--wrap",
    "--build-id",
    "--gc-sections",
    "--print-file-name",
    // valgrind
    "--trace-children",
    // MPI launchers and batch systems
    "--oversubscribe",
    "--allow-run-as-root",
    "--bind-to",
    "--map-by",
    "--mca",
    "--hostfile",
    "--host",
    "--np",
    "--ntasks",
    "--nodes",
    "--ntasks-per-node",
    "--cpus-per-task",
    "--mpi",
    "--tag-output",
    "--output-filename",
    "--report-bindings",
    // system tools: apt-get, mount, util-linux, git, curl, sort, time, perf
    // the real-program corpus's driver (tests/corpus/run.sh) and the
    // options of its programs the docs quote (zstd, fio)
    "--only",
    "--paths",
    "--no-install",
    "--long",
    "--thread",
    "--no-install-recommends",
    "--yes",
    "--assume-yes",
    "--fix-missing",
    "--bind",
    "--make-private",
    "--fork",
    "--pid",
    "--mount-proc",
    "--user",
    "--map-root-user",
    "--cpu-list",
    "--membind",
    "--cpunodebind",
    "--interleave",
    "--preferred",
    "--localalloc",
    "--hardware",
    "--show",
    "--depth",
    "--branch",
    "--recursive",
    "--single-branch",
    "--oneline",
    "--stat",
    "--fail",
    "--silent",
    "--location",
    "--output",
    "--retry",
    "--parallel",
    "--buffer-size",
    "--numeric-sort",
    "--reverse",
    "--key",
    "--field-separator",
    "--unique",
    "--kill-after",
    "--signal",
    "--preserve-status",
    "--foreground",
    "--event",
    "--events",
    "--call-graph",
    "--no-pager",
    "--pretty",
    "--scope",
    "--property",
    "--unit",
    "--wait",
    "--collect",
    "--quiet-exit",
    "--kill",
    "--machine",
    "--noheadings",
    "--bytes",
    "--human-readable",
    "--block-size",
    "--inodes",
    "--output-format",
    "--no-clobber",
    "--directory",
    "--parents",
    "--force",
    "--recursive",
    "--dereference",
    "--level",
    "--strip-components",
    "--file",
    "--extract",
    "--gzip",
    "--xz",
    "--zstd",
    "--json",
    "--threads",
    "--size",
    "--config",
    // Python, valgrind, gdb, fio, zstd, sqlite and other programs under test
    "--batch",
    "--args",
    "--eval-command",
    "--tool",
    "--leak-check",
    "--error-exitcode",
    "--name",
    "--rw",
    "--bs",
    "--numjobs",
    "--runtime",
    "--time_based",
    "--direct",
    "--ioengine",
    "--iodepth",
    "--filename",
    "--group_reporting",
    "--stdout",
    "--decompress",
    "--compress",
    "--installed",
    "--ipc",
    "--uts",
    "--print",
    // ArgoDSM's benchmark (benches/argodsm/svm_argo.cpp), a program of its own
    "--graph",
    "--mode",
    "--memory",
    "--records-n",
    // a test program's own argument (tiermem-workloads' kernel-swap doc example)
    "--kernel-swap-child",
];

/// Subcommands `--help` does not list.
const HIDDEN: &[&str] = &["bench stencil-child"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn tiermem(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tiermem"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "tiermem {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands listed in a `--help` text.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// The long options a `--help` text defines: the first of each option
/// line (a description may quote other commands' options).
fn options_of(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter(|l| l.trim_start().starts_with('-'))
        .filter_map(|l| long_options(l).into_iter().next())
        .collect()
}

/// `tiermem X` and `tiermem bench X` (keys "run", "bench stencil", ...)
/// with their options.
fn cli_options() -> BTreeMap<String, BTreeSet<String>> {
    let mut m = BTreeMap::new();
    for c in subcommands(&tiermem(&["--help"])) {
        let help = tiermem(&[&c, "--help"]);
        let subs = subcommands(&help);
        for s in &subs {
            let h = tiermem(&[&c, s, "--help"]);
            m.insert(format!("{c} {s}"), options_of(&h));
        }
        m.insert(c, options_of(&help));
    }
    for h in HIDDEN {
        let args: Vec<&str> = h.split(' ').chain(["--help"]).collect();
        m.insert((*h).to_owned(), options_of(&tiermem(&args)));
    }
    m
}

/// The `--long-option` names in a piece of text.
fn long_options(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 2 < b.len() {
        let starts = b[i] == b'-'
            && b[i + 1] == b'-'
            && b[i + 2].is_ascii_lowercase()
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'-' || b[i - 1] == b'_'));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i + 2;
        while j < b.len()
            && (b[j].is_ascii_lowercase() || b[j].is_ascii_digit() || b[j] == b'-' || b[j] == b'_')
        {
            j += 1;
        }
        out.push(text[i..j].trim_end_matches('-').to_owned());
        i = j;
    }
    out
}

/// The `TIERMEM_*` names in a piece of text, with the byte offset of each.
fn variables(text: &str) -> Vec<(usize, String)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = text[from..].find("TIERMEM_") {
        let i = from + k;
        let mut j = i + "TIERMEM_".len();
        while j < b.len() && (b[j].is_ascii_uppercase() || b[j].is_ascii_digit() || b[j] == b'_') {
            j += 1;
        }
        if i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
            out.push((i, text[i..j].to_owned()));
        }
        from = j;
    }
    out
}

/// The files to scan: sources, header, docs, scripts, test programs.
fn files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" || name == "results" {
                continue;
            }
            if p.is_dir() {
                walk(&p, out);
            } else if ["rs", "h", "c", "cpp", "f90", "md", "sh", "py", "toml"]
                .iter()
                .any(|x| name.ends_with(&format!(".{x}")))
            {
                out.push(p);
            }
        }
    }
    let r = root();
    let mut out = vec![r.join("README.md")];
    for d in [
        "crates", "include", "docs", "scripts", "tests", "examples", "benches",
    ] {
        walk(&r.join(d), &mut out);
    }
    out.retain(|p| p.is_file());
    out
}

/// Variables some code reads.
fn variables_read(texts: &[(PathBuf, String)]) -> BTreeSet<String> {
    // Readers in Rust (std and this workspace's wrappers) and C.
    // A `const X: &str = "TIERMEM_..."` names a variable for such reads.
    const READS: &[&str] = &[
        "var(",
        "var_os(",
        "getenv(",
        "flag(",
        "env_usize(",
        "is_child(",
        "&str = ",
    ];
    let mut read = BTreeSet::new();
    for line in tiermem(&["env"]).lines() {
        read.extend(variables(line).into_iter().map(|(_, v)| v));
    }
    for (path, text) in texts {
        let shell = path.extension().is_some_and(|x| x == "sh");
        for (i, v) in variables(text) {
            let before = &text[i.saturating_sub(24)..i];
            let quoted = before.ends_with('"');
            let rust_or_c = quoted && READS.iter().any(|r| before.trim_end_matches('"').ends_with(r));
            let shell_read = shell && (before.ends_with('$') || before.ends_with("${"));
            let macro_name = before.ends_with("#define ") || before.ends_with("#ifndef ");
            if rust_or_c || shell_read || macro_name {
                read.insert(v);
            }
        }
    }
    read
}

/// What exists: variables read, options per `tiermem` command, other
/// tools' options.
struct Known {
    read: BTreeSet<String>,
    cli: BTreeMap<String, BTreeSet<String>>,
    other: BTreeSet<&'static str>,
}

impl Known {
    /// The stale names on one line (`at`: where, for the message).
    fn stale(&self, at: &str, line: &str) -> Vec<String> {
        let mut wrong = Vec::new();
        for (_, v) in variables(line) {
            // `TIERMEM_*` and prefixes such as `TIERMEM_SVM_*`.
            let known = if v.ends_with('_') {
                v == "TIERMEM_" || self.read.iter().any(|r| r.starts_with(&v))
            } else {
                self.read.contains(&v)
            };
            if !known {
                wrong.push(format!("{at}: {v} is read nowhere"));
            }
        }
        for o in long_options(line) {
            if !self.cli.values().any(|opts| opts.contains(&o)) && !self.other.contains(o.as_str()) {
                wrong.push(format!("{at}: {o} is no option of tiermem (nor of another tool)"));
            }
        }
        // Options right after `tiermem X` (the longest command that
        // matches: `tiermem bench stencil`) are X's own, up to the end of
        // the command (the program's own options follow ` -- `).
        let mut from = 0;
        while let Some(k) = line[from..].find("tiermem ") {
            let start = from + k + "tiermem ".len();
            from = start;
            let rest = &line[start..];
            let Some((cmd, opts)) = self
                .cli
                .iter()
                .filter(|(c, _)| rest.starts_with(&format!("{c} ")) || rest == c.as_str())
                .max_by_key(|(c, _)| c.len())
            else {
                continue;
            };
            let rest = &rest[cmd.len()..];
            let end = [" -- ", "`", "\"", ";", "|", "&&", "#", ")"]
                .iter()
                .filter_map(|s| rest.find(s))
                .min()
                .unwrap_or(rest.len());
            for o in long_options(&rest[..end]) {
                if !opts.contains(&o) && o != "--help" {
                    wrong.push(format!("{at}: `tiermem {cmd}` has no {o}"));
                }
            }
        }
        wrong
    }
}

#[test]
fn every_variable_and_option_named_exists() {
    let texts: Vec<(PathBuf, String)> = files()
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(&p).ok().map(|t| (p, t)))
        .collect();
    assert!(
        texts.len() > 100,
        "found only {} files under {:?}",
        texts.len(),
        root()
    );
    let known = Known {
        read: variables_read(&texts),
        cli: cli_options(),
        other: OTHER_TOOLS.iter().copied().collect(),
    };
    // The command's own settings are there (the scan found its readers).
    for v in [
        "TIERMEM_NEAR",
        "TIERMEM_REPORT",
        "TIERMEM_POLICY",
        "TIERMEM_PRELOAD",
    ] {
        assert!(known.read.contains(v), "{v} not seen read: {:?}", known.read);
    }
    assert!(known.cli["run"].contains("--heap-size") && known.cli["bench stencil"].contains("--virt"));
    // Stale names are caught, in any message, and per command.
    assert_eq!(
        known
            .stale("x", "untiered (raise TIERMEM_FAR / --far-size)")
            .len(),
        1,
        "the hint of issue 30"
    );
    assert_eq!(known.stale("x", "TIERMEM_FAR_SIZE=1G").len(), 1);
    assert_eq!(
        known
            .stale("x", "`tiermem run --virt 1G -- ./a --threads 2`")
            .len(),
        1
    );
    assert!(known
        .stale(
            "x",
            "`tiermem bench stencil --virt 1G`, `tiermem run --near 1G -- ./a --virt`"
        )
        .is_empty());
    let this_file = Path::new(file!()).file_name().unwrap();
    let mut wrong = Vec::new();
    for (path, text) in &texts {
        if path.file_name() == Some(this_file) {
            continue;
        }
        let rel = path.strip_prefix(root()).unwrap_or(path).display().to_string();
        // The corpus runs other people's programs with their own options:
        // only its TIERMEM_* names are tiermem's.
        let corpus = rel.starts_with("tests/corpus/");
        for (n, line) in text.lines().enumerate() {
            let found = known.stale(&format!("{rel}:{}", n + 1), line);
            wrong.extend(
                found
                    .into_iter()
                    .filter(|w| !corpus || !w.contains("is no option of")),
            );
        }
    }
    assert!(
        wrong.is_empty(),
        "{} stale names:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn the_scanner_sees_names() {
    assert_eq!(
        long_options("a `--far-size` b --x-y, c--no, ---"),
        ["--far-size", "--x-y"]
    );
    assert_eq!(
        variables("raise TIERMEM_FAR / TIERMEM_SVM_* and XTIERMEM_NO")
            .into_iter()
            .map(|(_, v)| v)
            .collect::<Vec<_>>(),
        ["TIERMEM_FAR", "TIERMEM_SVM_"]
    );
}
