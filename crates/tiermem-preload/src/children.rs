//! What the exit summary says about the run's other processes (issue 35:
//! forked and exec'd children printed nothing, so a user could not tell
//! that half a pipeline ran untiered). Every process of the run appends
//! one record to a small file that the root process names in
//! `TIERMEM_CHILDREN_LOG` (internal): `f` when a tiered process forks (the
//! child has a private copy of its tiered memory), `x NAME` when a child
//! `exec`s a program, `t PRINTED EVICTIONS FAULTS FAULT_US IN OUT` when a
//! tiered child (`--follow-exec`) exits, `u N` when a child that is not
//! the root had `N` io_uring set-ups refused. The root reads and removes
//! the file at exit; `tiermem run` removes it after the root ends, however
//! it ended.
//!
//! A followed child prints a summary of its own only when tiering did
//! something the user should see (it evicted, or ended badly): `make -j2`
//! under `--follow-exec` printed one summary per compiler run, 190 lines
//! of "nothing went to tiermem"; the root's summary now sums them.

use serde::Serialize;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

const VAR: &str = tiermem::config::options::CHILDREN_LOG.var;

static LOG: OnceLock<CString> = OnceLock::new();

/// In the root process's constructor: names the file for the processes
/// it will run (any earlier run's file of a reused pid is dropped).
pub(crate) fn start_root() {
    let path = tiermem::config::children_log_path(std::process::id());
    // An earlier image of this process (a wrapper script that exec'd the
    // program) made the file: its records stay.
    if tiermem_sys::env::var_os(VAR).is_some_and(|v| v == path.as_os_str()) {
        if let Some(c) = log() {
            let _ = tiermem_sys::file::append_record(c, b"");
        }
        return;
    }
    let _ = std::fs::remove_file(&path);
    // SAFETY of the environment change: the library's constructor runs
    // before the program's main and its threads.
    tiermem_sys::env::set_var(VAR, &path);
    if let Ok(c) = CString::new(path.into_os_string().into_encoded_bytes()) {
        // Made now, so that the file is there to be removed however the
        // run ends (an empty file: no children yet).
        let _ = tiermem_sys::file::append_record(&c, b"");
        let _ = LOG.set(c);
    }
}

/// In a tiered process: its forked children say so.
pub(crate) fn record_forks() {
    if log().is_some() {
        tiermem_sys::thread::at_fork(None, None, Some(forked));
    }
}

/// In the constructor of a program a child `exec`ed (not the root).
pub(crate) fn record_exec() {
    let Some(path) = log() else { return };
    let name = std::env::args_os()
        .next()
        .map(|a| {
            std::path::PathBuf::from(a)
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    // One word, one line.
    let name: String = name.chars().filter(|c| !c.is_whitespace()).take(64).collect();
    let _ = tiermem_sys::file::append_record(path, format!("x {name}\n").as_bytes());
}

fn log() -> Option<&'static CString> {
    if LOG.get().is_none() {
        let v = tiermem_sys::env::var_os(VAR)?;
        let _ = LOG.set(CString::new(v.into_encoded_bytes()).ok()?);
    }
    LOG.get()
}

/// In a tiered child at exit: what it did, for the root's summary.
pub(crate) fn record_tiered_end(printed: bool, cost: &crate::report::Cost) {
    if let Some(path) = log() {
        let rec = format!(
            "t {} {} {} {} {} {}\n",
            u8::from(printed),
            cost.evictions,
            cost.faults,
            (cost.fault_seconds * 1e6) as u64,
            cost.bytes_in,
            cost.bytes_out
        );
        let _ = tiermem_sys::file::append_record(path, rec.as_bytes());
    }
}

/// In a process that is not the root, at exit: its refused io_uring
/// set-ups.
pub(crate) fn record_io_uring_refused(n: u64) {
    if n > 0 {
        if let Some(path) = log() {
            let _ = tiermem_sys::file::append_record(path, format!("u {n}\n").as_bytes());
        }
    }
}

/// A fork handler: async-signal-safe (one `write`).
extern "C" fn forked() {
    if let Some(path) = LOG.get() {
        let _ = tiermem_sys::file::append_record(path, b"f\n");
    }
}

/// The run's other processes, as far as they had started by the root's
/// exit.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Children {
    /// Forks of tiered processes (each child with a private copy of the
    /// heap; it prints no summary of its own).
    pub forked: u64,
    /// Programs the children `exec`ed, with how many times each ran.
    pub programs: Vec<(String, u64)>,
    /// Faults of this process's `vfork` children on tiered memory, served
    /// by its lender thread (`tiermem::vfork`).
    pub vfork_faults: u64,
    /// Buffers its `vfork` children handed to the kernel (system calls,
    /// `exec` strings), pinned by the lender.
    pub vfork_loans: u64,
    /// Tiered children (`--follow-exec`) that exited, summed.
    pub tiered: TieredChildren,
    /// io_uring set-ups refused in the other processes of the run (forked
    /// children included, which print nothing of their own).
    pub io_uring_refused: u64,
}

/// What the exec'd programs that tiermem tiered (`--follow-exec`) did, as
/// far as they had exited by the root's exit.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TieredChildren {
    /// Tiered programs that exited.
    pub exited: u64,
    /// Of them, those that printed a summary of their own (they evicted,
    /// or ended badly).
    pub printed: u64,
    /// Their evictions, faults, time in faults and bytes moved, summed.
    pub evictions: u64,
    /// Faults served.
    pub faults: u64,
    /// Seconds their threads spent in faults.
    pub fault_seconds: f64,
    /// Bytes brought in from their far stores.
    pub bytes_in: u64,
    /// Bytes written out to them.
    pub bytes_out: u64,
}

impl Children {
    /// How many programs were exec'd.
    pub fn execs(&self) -> u64 {
        self.programs.iter().map(|(_, n)| n).sum()
    }
}

/// In the root process at exit: the records, and the file gone.
pub(crate) fn take() -> Children {
    let Some(path) = log() else {
        return Children::default();
    };
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(path.as_bytes()));
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let _ = std::fs::remove_file(path);
    parse(&text)
}

fn parse(text: &str) -> Children {
    let mut c = Children::default();
    for line in text.lines() {
        match line.split_once(' ') {
            None if line == "f" => c.forked += 1,
            Some(("x", name)) => match c.programs.iter_mut().find(|(n, _)| n == name) {
                Some((_, k)) => *k += 1,
                None => c.programs.push((name.to_owned(), 1)),
            },
            Some(("u", n)) => c.io_uring_refused += n.parse::<u64>().unwrap_or(0),
            Some(("t", rest)) => {
                let v: Vec<u64> = rest.split(' ').filter_map(|w| w.parse().ok()).collect();
                if let [printed, evictions, faults, fault_us, bytes_in, bytes_out] = v[..] {
                    let t = &mut c.tiered;
                    t.exited += 1;
                    t.printed += printed.min(1);
                    t.evictions += evictions;
                    t.faults += faults;
                    t.fault_seconds += fault_us as f64 / 1e6;
                    t.bytes_in += bytes_in;
                    t.bytes_out += bytes_out;
                }
            }
            _ => {}
        }
    }
    c.programs
        .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    c
}

/// The summary's line, when there were children.
pub fn line(c: &Children, follow_exec: bool) -> Option<String> {
    if c.forked == 0 && c.programs.is_empty() && c.vfork_faults + c.vfork_loans == 0 {
        return None;
    }
    let mut parts = Vec::new();
    if c.vfork_faults + c.vfork_loans > 0 {
        parts.push(format!(
            "vfork children's faults {} and buffers {} served by this process (they share its memory)",
            c.vfork_faults, c.vfork_loans
        ));
    }
    if c.forked > 0 {
        parts.push(format!(
            "{} forked (each with a private copy of the heap, no summary of its own)",
            c.forked
        ));
    }
    if !c.programs.is_empty() {
        let mut names: Vec<String> = c
            .programs
            .iter()
            .take(6)
            .map(|(n, k)| if *k > 1 { format!("{n} x{k}") } else { n.clone() })
            .collect();
        if c.programs.len() > 6 {
            names.push("...".into());
        }
        let n = c.execs();
        let programs = if n == 1 { "program" } else { "programs" };
        parts.push(if follow_exec {
            format!(
                "{n} {programs} exec'd, tiered ({}){}",
                names.join(", "),
                tiered_clause(&c.tiered)
            )
        } else {
            format!(
                "{n} {programs} exec'd, untiered ({}): --follow-exec tiers them",
                names.join(", ")
            )
        });
    }
    Some(format!("tiermem:   children: {}\n", parts.join("; ")))
}

/// What the tiered children did, after their names in the summary line.
fn tiered_clause(t: &TieredChildren) -> String {
    if t.exited == 0 {
        return String::new();
    }
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1 << 20) as f64);
    let who = match (t.printed, t.exited) {
        (0, 1) => "it stayed within the budget (no summary of its own)".to_owned(),
        (0, e) => format!("all {e} stayed within the budget (no summaries of their own)"),
        (1, 1) => "it evicted and printed its own summary".to_owned(),
        (p, e) if p == e => format!("all {e} evicted and printed summaries of their own"),
        (p, e) => format!(
            "{p} of {e} evicted and printed summaries of their own, the others stayed within the budget"
        ),
    };
    if t.faults == 0 {
        return format!(": {who}");
    }
    format!(
        ": {who}; in all faults {}, time in faults {:.2} s, in {}, out {}",
        t.faults,
        t.fault_seconds,
        mib(t.bytes_in),
        mib(t.bytes_out)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_counted_by_kind_and_program() {
        let c = parse("f\nx sh\nf\nx gcc\nx sh\nx sh\ngarbage\nf\n");
        assert_eq!(c.forked, 3);
        assert_eq!(c.programs, vec![("sh".to_owned(), 3), ("gcc".to_owned(), 1)]);
        let l = line(&c, false).unwrap();
        assert!(
            l.contains("3 forked") && l.contains("4 programs exec'd, untiered (sh x3, gcc)"),
            "{l}"
        );
        assert!(line(&Children::default(), false).is_none());
        let v = Children {
            vfork_faults: 5,
            vfork_loans: 2,
            ..Default::default()
        };
        let l = line(&v, false).unwrap();
        assert!(l.contains("faults 5 and buffers 2"), "{l}");
    }

    #[test]
    fn tiered_children_are_summed_in_one_line() {
        let c = parse(
            "x cc1\nt 0 0 120 3000 0 0\nx cc1\nt 1 2048 5000 250000 4194304 8388608\nx as\n\
             t 0 0 10 1000 0 0\nu 2\nu 1\nt 1 2\n",
        );
        assert_eq!(c.io_uring_refused, 3);
        let t = &c.tiered;
        assert_eq!(
            (t.exited, t.printed, t.evictions, t.faults),
            (3, 1, 2048, 5130),
            "{t:?}"
        );
        assert!((t.fault_seconds - 0.254).abs() < 1e-9, "{t:?}");
        let l = line(&c, true).unwrap();
        assert!(
            l.contains("3 programs exec'd, tiered (cc1 x2, as): 1 of 3 evicted and printed summaries")
                && l.contains("faults 5130, time in faults 0.25 s, in 4.0 MiB, out 8.0 MiB"),
            "{l}"
        );
        let quiet = parse("x sh\nt 0 0 4 10 0 0\n");
        let l = line(&quiet, true).unwrap();
        assert!(l.contains("it stayed within the budget"), "{l}");
        // Programs still running at the root's exit have no end record.
        let l = line(&parse("x sh\n"), true).unwrap();
        assert!(l.ends_with("tiered (sh)\n"), "{l}");
    }
}
