//! The process environment as tiermem reads it: from the C library's
//! `environ` itself, never through `getenv`. A program may define its own
//! `getenv` (bash does: it looks the name up in its shell variables, which
//! live in its `.bss`), and the dynamic linker binds every `getenv` call to
//! it, tiermem's too. tiermem reads its settings while it takes the
//! program's static arrays over, when a touch of them cannot be served:
//! bash died of SIGBUS there (`tiermem run --threshold 32K -- bash -c ...`,
//! handler-thread path: hung). Rust's `std::env::vars_os` walks `environ`.

use std::ffi::{OsStr, OsString};

/// The value of variable `name`, if set.
pub fn var_os(name: impl AsRef<OsStr>) -> Option<OsString> {
    let name = name.as_ref();
    std::env::vars_os().find_map(|(k, v)| (k == name).then_some(v))
}

/// The value of variable `name`, if set and valid UTF-8.
pub fn var(name: impl AsRef<OsStr>) -> Option<String> {
    var_os(name).and_then(|v| v.into_string().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_what_the_environment_holds() {
        let path = super::var("PATH").expect("PATH is set in tests");
        assert_eq!(Some(path), std::env::var("PATH").ok());
        assert!(super::var_os("TIERMEM_SURELY_NOT_SET_ANYWHERE").is_none());
    }
}
