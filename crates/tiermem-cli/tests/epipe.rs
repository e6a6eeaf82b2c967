//! Every subcommand ends quietly when its reader goes away (issue 35 item
//! 7: `tiermem info | head -1` panicked with "failed printing to stdout:
//! Broken pipe"): stdout is a socket whose other end is closed before the
//! command starts, so its first write meets a closed pipe, every time.

use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

#[test]
fn a_closed_stdout_ends_every_subcommand_quietly() {
    for args in [
        &["info"][..],
        &["info", "--json"],
        &["env"],
        &["hugepages"],
        &["--help"],
        &["run", "--help"],
        &["bench", "--help"],
        &["bench", "stencil", "--help"],
        &["--version"],
    ] {
        let (ours, theirs) = UnixStream::pair().unwrap();
        drop(ours);
        let out = Command::new(env!("CARGO_BIN_EXE_tiermem"))
            .args(args)
            .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
            "tiermem {args:?}: {:?}: {err}",
            out.status
        );
        assert!(err.is_empty(), "tiermem {args:?} said: {err}");
    }
}
