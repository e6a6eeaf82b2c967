//! The exit summary says what tiering cost and saved (issue 35 item 5:
//! "time in faults 0.023 s" while the mover burned 0.57 s of CPU, no peak
//! footprint, nothing said "budget never reached", runs where nothing was
//! tiered printed nothing, and nothing told that the default memory far
//! store keeps evicted data in RAM). Checked on the summary text and the
//! same fields of the `--report` JSON (`cost`).
//!
//! The program is this test binary (`child_writes_32_mib`). The preload
//! library must be next to the `tiermem` binary (`cargo build -p
//! tiermem-preload`); without it the tests say `skipped: <why>`.

use std::path::Path;
use std::process::Command;

mod common;

use common::{have_preload, BIN};
const CHILD: &str = "child_writes_32_mib";

/// 32 MiB written and read back, in the program `tiermem run` runs, and
/// never freed.
#[test]
fn child_writes_32_mib() {
    if std::env::var("TIERMEM_CHILD").as_deref() != Ok(CHILD) {
        return;
    }
    let mut v = vec![0u8; 32 << 20];
    for i in (0..v.len()).step_by(4096) {
        v[i] = 1;
    }
    let sum: u64 = v.iter().step_by(4096).map(|&b| b as u64).sum();
    assert_eq!(sum, 32 << 8);
    // Held to the end, as many programs do: the far store still has its
    // part at exit.
    std::mem::forget(v);
}

/// The child above, which then forks twice (each child checks its copy
/// of the 32 MiB and leaves with `_exit`) and runs `true` twice through a
/// shell: the run's children.
#[test]
fn child_forks_and_execs() {
    if std::env::var("TIERMEM_CHILD").as_deref() != Ok(FORKER) {
        return;
    }
    let v = vec![1u8; 32 << 20];
    for _ in 0..2 {
        // SAFETY: the child only reads memory and leaves with _exit.
        match unsafe { libc::fork() } {
            0 => {
                let ok = v.iter().step_by(4096).all(|&b| b == 1);
                // SAFETY: ends the child without the parent's exit path.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) }
            }
            pid => {
                assert!(pid > 0);
                let mut status = 0;
                // SAFETY: waits for the child forked above.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                assert_eq!(status, 0);
            }
        }
    }
    let st = Command::new("sh")
        .args(["-c", "true; exec true"])
        .status()
        .unwrap();
    assert!(st.success());
    let st = Command::new("true").status().unwrap();
    assert!(st.success());
}

const FORKER: &str = "child_forks_and_execs";

/// The 32 MiB child, which then changes directory and leaves through
/// `_exit` (no `atexit` handlers: dash ends `sh -c` this way).
#[test]
fn child_moves_and_leaves_by_underscore_exit() {
    if std::env::var("TIERMEM_CHILD").as_deref() != Ok(UNDERSCORE) {
        return;
    }
    let v = vec![1u8; 32 << 20];
    assert!(v.iter().step_by(4096).all(|&b| b == 1));
    std::env::set_current_dir("/").unwrap();
    // SAFETY: ends the process; its data goes with it.
    unsafe { libc::_exit(0) }
}

const UNDERSCORE: &str = "child_moves_and_leaves_by_underscore_exit";

/// The 32 MiB child, which closes its standard error before it ends (GNU
/// programs do, in an `atexit` handler that runs before tiermem's).
#[test]
fn child_closes_stderr() {
    if std::env::var("TIERMEM_CHILD").as_deref() != Ok(CLOSER) {
        return;
    }
    let v = vec![1u8; 32 << 20];
    assert!(v.iter().step_by(4096).all(|&b| b == 1));
    // SAFETY: closes descriptor 2; nothing of this process writes to it after.
    unsafe { libc::close(2) };
    // SAFETY: as above, through the exit path with atexit handlers.
    unsafe { libc::exit(0) }
}

const CLOSER: &str = "child_closes_stderr";

/// `tiermem run ARGS -- this-binary child`: the summary lines (stderr's
/// `tiermem:` lines) and the report.
fn run(args: &[&str], env: &[(&str, &str)], tag: &str) -> (String, serde_json::Value) {
    let report = report_path(tag);
    let _ = std::fs::remove_file(&report);
    let out = run_at(args, env, tag, &report);
    let _ = std::fs::remove_file(&report);
    out
}

fn report_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tiermem-summary-{tag}-{}.json", std::process::id()))
}

/// `tiermem run ARGS --report REPORT -- this-binary child`, as it ends.
fn launch(args: &[&str], env: &[(&str, &str)], report: &Path) -> std::process::Output {
    let exe = std::env::current_exe().unwrap();
    let child = env
        .iter()
        .find(|(k, _)| *k == "TIERMEM_CHILD")
        .map_or(CHILD, |(_, v)| v);
    let mut cmd = Command::new(BIN);
    for (k, _) in std::env::vars() {
        if k.starts_with("TIERMEM_") {
            cmd.env_remove(k);
        }
    }
    cmd.arg("run")
        .args(args)
        .arg("--report")
        .arg(report)
        .arg("--")
        .arg(exe)
        .args(["--exact", child, "--test-threads=1"])
        .env("TIERMEM_CHILD", child)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// The same, which must succeed: its summary and report (left in place).
fn run_at(args: &[&str], env: &[(&str, &str)], tag: &str, report: &Path) -> (String, serde_json::Value) {
    let out = launch(args, env, report);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{tag}: {:?}: {err}", out.status);
    let summary: String = err
        .lines()
        .filter(|l| l.starts_with("tiermem:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let text = std::fs::read_to_string(report).unwrap_or_else(|e| panic!("{tag}: no report ({e}): {err}"));
    (summary, serde_json::from_str(&text).unwrap())
}

fn has(summary: &str, says: &[&str]) {
    for s in says {
        assert!(summary.contains(s), "{s:?} missing from the summary:\n{summary}");
    }
}

#[test]
fn a_tiered_run_says_budget_peak_cost_and_that_memory_far_data_stays_in_ram() {
    if !have_preload() {
        return;
    }
    let (s, r) = run(&["--near", "8M"], &[], "memory");
    has(
        &s,
        &[
            "budget 8M: reached (",
            "peak footprint ",
            "(VmHWM)",
            "time in faults ",
            "no movers",
            "moved in ",
            "far store: memory",
            "held in RAM",
            "--far DIR",
        ],
    );
    let c = &r["cost"];
    assert!(c["peak_footprint_bytes"].as_u64() > Some(8 << 20), "{c}");
    assert_eq!(c["budget_bytes"], 8 << 20, "{c}");
    assert_eq!(c["budget_reached"], true, "{c}");
    assert!(c["evictions"].as_u64() > Some(0), "{c}");
    assert_eq!(c["far_kind"], "memory", "{c}");
    // The memory store holds what was evicted, in RAM.
    assert!(c["far_ram_bytes"].as_u64() > Some(16 << 20), "{c}");
    assert_eq!(c["far_ram_bytes"], c["far_held_bytes"], "{c}");
}

#[test]
fn a_far_directory_holds_evicted_data_on_disk_not_in_ram() {
    if !have_preload() {
        return;
    }
    let dir = std::env::temp_dir();
    let (s, r) = run(&["--near", "8M", "--far", dir.to_str().unwrap()], &[], "file");
    has(&s, &["far store: file ", "on disk", "no RAM of its own"]);
    let c = &r["cost"];
    assert_eq!(c["far_kind"], "file", "{c}");
    assert_eq!(c["far_ram_bytes"], 0, "{c}");
    assert!(c["far_held_bytes"].as_u64() > Some(16 << 20), "{c}");
}

#[test]
fn mover_cpu_time_stands_beside_the_time_in_faults() {
    if !have_preload() {
        return;
    }
    // Prefetch on (the default): before the engine kept to the heap's
    // open chunks, a mover died here on a page prefetched past them.
    let (s, r) = run(&["--near", "8M", "--movers", "1"], &[], "movers");
    has(&s, &["time in faults ", "mover CPU ", "of it moving pages"]);
    let c = &r["cost"];
    assert_eq!(c["movers"], 1, "{c}");
    assert!(c["mover_cpu_seconds"].as_f64() > Some(0.0), "{c}");
    assert!(
        c["mover_cpu_seconds"].as_f64() >= c["mover_busy_seconds"].as_f64(),
        "{c}"
    );
    // `--movers auto`: said so, and the report counts its stand-downs
    // (none need happen in a run this short).
    let (s, r) = run(&["--near", "8M", "--movers", "auto"], &[], "movers-auto");
    has(&s, &["movers auto", "time in faults "]);
    let c = &r["cost"];
    assert_eq!(c["movers_auto"], true, "{c}");
    assert!(c["mover_stand_downs"].is_u64(), "{c}");
    // Trials, and how many found the mover not paying: never more.
    let (trials, unpaid) = (c["mover_trials"].as_u64(), c["mover_unpaid"].as_u64());
    assert!(trials.is_some() && unpaid <= trials, "{c}");
    let m = &r["heap"]["region"]["mover"];
    assert!(
        m["stood_down_ns"].is_u64() && m["trials"].is_u64() && m["unpaid"].is_u64(),
        "{r}"
    );
}

#[test]
fn a_budget_never_reached_is_said_with_what_the_share_was_of() {
    if !have_preload() {
        return;
    }
    let (s, r) = run(&["--near", "50%"], &[], "share");
    has(
        &s,
        &[
            "(50% of ",
            " physical memory)",
            "budget never reached",
            "a smaller --near",
        ],
    );
    let c = &r["cost"];
    assert_eq!(c["budget_reached"], false, "{c}");
    assert!(
        c["budget_share"]
            .as_str()
            .is_some_and(|v| v.starts_with("50% of ")),
        "{c}"
    );
}

#[test]
fn runs_where_nothing_was_tiered_get_one_line() {
    if !have_preload() {
        return;
    }
    let (s, r) = run(&["--near", "8M", "--threshold", "512M"], &[], "threshold");
    assert_eq!(s.lines().count(), 1, "{s}");
    has(
        &s,
        &["nothing went to tiermem", "512M", "peak footprint", "untiered"],
    );
    assert!(r["cost"]["peak_footprint_bytes"].as_u64() > Some(0));
    // Untiered on purpose (a heap on huge pages): said as such.
    let (s, r) = run(&["--page-size", "thp"], &[], "untiered");
    has(&s, &["no tiering", "untiered; peak footprint"]);
    assert_eq!(r["cost"]["far_kind"], "none");
}

/// `--near 50%fp`: half the footprint a previous run measured in its
/// report (issue 35 item 4: `--near 25%` is of physical memory, so a
/// 300 MB program never evicted; `bench npb --near 50%` was of the
/// footprint). The budget's share is said in the summary and the report,
/// and carried to the next report so that the next run can use it too.
#[test]
fn near_as_a_share_of_the_footprint_a_previous_run_measured() {
    if !have_preload() {
        return;
    }
    let report = report_path("fp");
    let _ = std::fs::remove_file(&report);
    let fails = |args: &[&str], says: &str| {
        let out = launch(args, &[], &report);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: wanted {says:?} in: {err}");
        assert!(!err.contains("test result"), "{args:?} ran the program: {err}");
    };
    // No report yet: nothing to take a share of, before the program runs.
    fails(&["--near", "50%fp"], "measure the footprint first");
    fails(&["--near", "150%fp"], "at most 100");
    // A first run without tiering measures it.
    let (_, r) = run_at(&[], &[], "fp-measure", &report);
    let footprint = r["cost"]["program_footprint_bytes"].as_u64().unwrap();
    assert!(footprint >= 32 << 20, "{}", r["cost"]);
    let (s, r) = run_at(&["--near", "50%fp"], &[], "fp-half", &report);
    let c = &r["cost"];
    assert_eq!(c["budget_bytes"].as_u64(), Some(footprint / 2), "{c}");
    assert_eq!(c["budget_reached"], true, "{c}");
    assert_eq!(c["program_footprint_bytes"].as_u64(), Some(footprint), "{c}");
    let share = c["budget_share"].as_str().unwrap();
    assert!(
        share.starts_with("50% of the ") && share.ends_with(&format!("footprint in {}", report.display())),
        "{share}"
    );
    has(&s, &["(50% of the ", "footprint in", "reached"]);
    // The footprint is carried: a third run can take a share of it again.
    let (_, r) = run_at(&["--near", "25%fp"], &[], "fp-quarter", &report);
    assert_eq!(r["cost"]["budget_bytes"].as_u64(), Some(footprint / 4));
    // A tiered run with a plain budget does not know the footprint.
    let (_, r) = run_at(&["--near", "8M"], &[], "fp-plain", &report);
    assert!(r["cost"]["program_footprint_bytes"].is_null(), "{}", r["cost"]);
    fails(&["--near", "50%fp"], "reached its budget");
    let _ = std::fs::remove_file(&report);
}

/// Forked and exec'd children get one line in the summary and their
/// counts in the report (issue 35 item 5: they printed nothing at all).
#[test]
fn children_get_one_line() {
    if !have_preload() {
        return;
    }
    let (s, r) = run(&["--near", "8M"], &[("TIERMEM_CHILD", FORKER)], "children");
    let line = s
        .lines()
        .find(|l| l.contains("children:"))
        .unwrap_or_else(|| panic!("no children line: {s}"));
    // The shell forks nothing tiered; `sh -c 'true; exec true'` runs sh
    // and then true in its place; Rust's Command spawns without fork
    // handlers (posix_spawn), so the exec'd programs count, not forks.
    assert!(line.contains("2 forked"), "{line}");
    assert!(
        line.contains("programs exec'd, untiered") && line.contains("--follow-exec"),
        "{line}"
    );
    assert!(line.contains("sh") && line.contains("true x"), "{line}");
    assert_eq!(r["children"]["forked"], 2, "{}", r["children"]);
    let records = std::env::temp_dir().join(format!("tiermem-children-{}", r["pid"]));
    assert!(!records.exists(), "{} left behind", records.display());
    // A wrapper script that runs a program and then execs the tiered one
    // (same pid: the program the user started, again): the wrapper's
    // children count too (each image's start used to drop them).
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "ls / >/dev/null; exec {} --exact {FORKER} --test-threads=1",
        exe.display()
    );
    let out = Command::new(BIN)
        .args(["run", "--near", "8M", "--", "sh", "-c", &script])
        .env("TIERMEM_CHILD", FORKER)
        .env_remove("TIERMEM_REPORT")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let line = err.lines().find(|l| l.contains("children:")).unwrap_or_default();
    assert!(line.contains("ls") && line.contains("2 forked"), "{err}");
}

/// Under `--follow-exec` a tiered child prints a summary of its own only
/// when it evicted; the root's summary sums the others (`make -j2` printed
/// a summary per compiler run: 190 lines).
#[test]
fn followed_children_that_stay_within_the_budget_print_no_summary() {
    if !have_preload() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "/bin/true; {} --exact {CHILD} --test-threads=1 >/dev/null; sh -c 'ls / >/dev/null'",
        exe.display()
    );
    let report = report_path("followed");
    let out = Command::new(BIN)
        .args(["run", "--follow-exec", "--near", "8M", "--report"])
        .arg(&report)
        .args(["--", "sh", "-c", &script])
        .env("TIERMEM_CHILD", CHILD)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    for f in std::fs::read_dir(std::env::temp_dir()).unwrap().flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("tiermem-summary-followed-{}.json", std::process::id())) {
            let _ = std::fs::remove_file(f.path());
        }
    }
    // The shell's and the 32 MiB program's (it evicted at 8M): two.
    let headers = err
        .lines()
        .filter_map(|l| l.strip_prefix("tiermem: ")?.split_once(" s, "))
        .filter(|(secs, _)| secs.parse::<f64>().is_ok())
        .count();
    assert_eq!(headers, 2, "{err}");
    let t = &r["children"]["tiered"];
    assert_eq!(t["printed"], 1, "{t}");
    assert!(t["exited"].as_u64() >= Some(3), "{t}");
    assert!(t["evictions"].as_u64() > Some(0), "{t}");
    let line = err.lines().find(|l| l.contains("children:")).unwrap_or_default();
    assert!(
        line.contains("evicted and printed summaries of their own, the others stayed within the budget")
            && line.contains("in all faults"),
        "{err}"
    );
}

/// From the first-hour session: a program that leaves by `_exit`, one that
/// closes its standard error first, and one that changes directory all get
/// their summary, and the report (named relative to where the run started)
/// lands there.
#[test]
fn every_way_out_gets_a_summary_and_the_report_where_it_was_named() {
    if !have_preload() {
        return;
    }
    let (s, r) = run(&["--near", "8M"], &[("TIERMEM_CHILD", UNDERSCORE)], "underscore");
    has(&s, &["budget 8M: reached"]);
    assert!(r["cost"]["evictions"].as_u64() > Some(0));
    let (s, _) = run(&["--near", "8M"], &[("TIERMEM_CHILD", CLOSER)], "closer");
    has(&s, &["budget 8M: reached"]);
    // Relative to the run's directory, though the program moves to /.
    let dir = std::env::temp_dir().join(format!("tiermem-rel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(BIN)
        .current_dir(&dir)
        .args(["run", "--near", "8M", "--report", "rel.json", "--"])
        .arg(exe)
        .args(["--exact", UNDERSCORE, "--test-threads=1"])
        .env("TIERMEM_CHILD", UNDERSCORE)
        .env_remove("TIERMEM_REPORT")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(dir.join("rel.json").is_file(), "no report in {}", dir.display());
    assert!(!Path::new("/rel.json").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--near N%fp` with a report of another program's run says so.
#[test]
fn a_share_of_another_programs_footprint_is_warned_about() {
    if !have_preload() {
        return;
    }
    let report = report_path("other");
    let _ = std::fs::remove_file(&report);
    let (_, r) = run_at(&[], &[], "other-measure", &report);
    // Stamped at the end, the rest in the order the program wrote it
    // (scripts grep the report: tests/programs/run.sh).
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(text.starts_with("{\n  \"pid\""), "{text}");
    assert!(text.contains("\n  \"launched\": {"), "{text}");
    let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
    assert_eq!(
        r["launched"]["program"],
        exe.display().to_string(),
        "{}",
        r["launched"]
    );
    let out = launch(&["--near", "50%fp"], &[], &report);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("holds the footprint of"));
    // The same report, as if another program had written it.
    let mut j = r.clone();
    j["launched"]["program"] = "/usr/bin/other-program".into();
    std::fs::write(&report, serde_json::to_string(&j).unwrap()).unwrap();
    let out = launch(&["--near", "50%fp"], &[], &report);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("holds the footprint of /usr/bin/other-program, not of"),
        "{err}"
    );
    let _ = std::fs::remove_file(&report);
}

/// 32 MiB swept eight times in order: a loop four times a budget of 8M.
#[test]
fn child_sweeps_32_mib() {
    if std::env::var("TIERMEM_CHILD").as_deref() != Ok(SWEEPER) {
        return;
    }
    let mut v = vec![0u64; 4 << 20];
    for pass in 0..8u64 {
        for i in (0..v.len()).step_by(512) {
            assert_eq!(v[i], pass * i as u64, "page {}", i / 512);
            v[i] += i as u64;
        }
    }
}

const SWEEPER: &str = "child_sweeps_32_mib";

/// Issue 32: with `--policy auto` the summary and the report say what it
/// chose and why; another policy says nothing of it.
#[test]
fn the_auto_policy_says_what_it_chose() {
    if !have_preload() {
        return;
    }
    let (s, r) = run(
        &["--near", "8M", "--policy", "auto"],
        &[("TIERMEM_CHILD", SWEEPER)],
        "auto",
    );
    has(
        &s,
        &[
            "policy auto, ",
            "policy auto: fifo for ",
            "switches to scan",
            "cyclic refaults",
            "pin one with --policy",
        ],
    );
    let a = &r["heap"]["region"]["policy_auto"];
    assert!(a["to_scan"].as_u64() >= Some(1), "{a}");
    assert!(a["evictions_scan"].as_u64() > Some(0), "{a}");
    assert!(a["refaults"].as_u64() > Some(10_000), "{a}");
    let d = &a["decisions"][0];
    assert_eq!(d["to"], "scan", "{a}");
    assert_eq!(d["reason"], "cyclic-refaults", "{a}");
    assert!(d["sequential_permille"].as_u64() >= Some(500), "{a}");
    let (s, r) = run(
        &["--near", "8M", "--policy", "fifo"],
        &[("TIERMEM_CHILD", SWEEPER)],
        "fifo",
    );
    assert!(!s.contains("policy auto"), "{s}");
    assert!(s.contains("policy fifo"), "{s}");
    assert!(r["heap"]["region"]["policy_auto"].is_null(), "{r}");
}
