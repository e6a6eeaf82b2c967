//! What the exit summary says about the run's other processes (issue 35:
//! forked and exec'd children printed nothing, so a user could not tell
//! that half a pipeline ran untiered). Every process of the run appends
//! one record to a small file that the root process names in
//! `TIERMEM_CHILDREN_LOG` (internal): `f` when a tiered process forks (the
//! child has a private copy of its tiered memory), `x NAME` when a child
//! `exec`s a program. The root reads and removes the file at exit;
//! `tiermem run` removes it after the root ends, however it ended.

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
                "{n} {programs} exec'd, tiered with summaries of their own ({})",
                names.join(", ")
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
}
