//! What the `tiermem run` tests share.

use std::path::{Path, PathBuf};

/// The `tiermem` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_tiermem");

/// The preload library next to the binary; None, with a `skipped:` line,
/// when it was not built (`cargo build -p tiermem-preload` builds it).
pub fn preload() -> Option<PathBuf> {
    let p = Path::new(BIN).with_file_name("libtiermem_preload.so");
    // The suite (scripts/test.sh) builds it: a skip there would hide every
    // `tiermem run` test.
    if !p.is_file() && std::env::var_os("CI").is_some() {
        panic!(
            "no {} under CI (cargo build -p tiermem-preload builds it)",
            p.display()
        );
    }
    if !p.is_file() {
        eprintln!(
            "skipped: no {} (cargo build -p tiermem-preload builds it)",
            p.display()
        );
    }
    p.is_file().then_some(p)
}

/// Whether the preload library is there (see [`preload`]).
#[allow(dead_code)] // not every test binary asks this way
pub fn have_preload() -> bool {
    preload().is_some()
}
