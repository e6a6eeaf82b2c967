//! The process environment as tiermem reads it: from the C library's
//! `environ` itself, never through `getenv`. A program may define its own
//! `getenv` (bash does: it looks the name up in its shell variables, which
//! live in its `.bss`), and the dynamic linker binds every `getenv` call to
//! it, tiermem's too. tiermem reads its settings while it takes the
//! program's static arrays over, when a touch of them cannot be served:
//! bash died of SIGBUS there (`tiermem run --threshold 32K -- bash -c ...`,
//! handler-thread path: hung). Rust's `std::env::vars_os` walks `environ`.
//! Likewise a variable is set with the C library's own `setenv`: bash's,
//! called from tiermem's constructor before bash had started, lost it
//! (`TIERMEM_CHILDREN_LOG` never reached bash's children).

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::{OnceLock, RwLock};

/// Readers of the environment here against `set_var` (the C library's
/// `setenv` may move `environ` while a reader walks it; Rust's own lock,
/// which `std::env::set_var` takes, is not taken by the C library's).
static ENV: RwLock<()> = RwLock::new(());

/// The value of variable `name`, if set.
pub fn var_os(name: impl AsRef<OsStr>) -> Option<OsString> {
    let name = name.as_ref();
    let _reading = ENV.read().unwrap_or_else(|p| p.into_inner());
    std::env::vars_os().find_map(|(k, v)| (k == name).then_some(v))
}

/// The value of variable `name`, if set and valid UTF-8.
pub fn var(name: impl AsRef<OsStr>) -> Option<String> {
    var_os(name).and_then(|v| v.into_string().ok())
}

/// The C library's own `setenv` (0 when it cannot be found).
fn c_library_setenv() -> usize {
    static SETENV: OnceLock<usize> = OnceLock::new();
    *SETENV.get_or_init(|| {
        // SAFETY: a lookup of the loaded C library (RTLD_NOLOAD: never
        // loads one), then of one of its symbols; the handle is kept.
        unsafe {
            let h = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
            if h.is_null() {
                return 0;
            }
            libc::dlsym(h, c"setenv".as_ptr()) as usize
        }
    })
}

/// Sets variable `name` to `value` for this process and the programs it
/// runs, through the C library's `setenv` (not a program's own).
///
/// Like `std::env::set_var`, only while no other thread reads or changes
/// the environment (tiermem calls it from its constructor).
pub fn set_var(name: &str, value: impl AsRef<OsStr>) {
    let (Ok(n), Ok(v)) = (CString::new(name), CString::new(value.as_ref().as_bytes())) else {
        return;
    };
    let _writing = ENV.write().unwrap_or_else(|p| p.into_inner());
    match c_library_setenv() {
        0 => std::env::set_var(name, value),
        f => {
            // SAFETY: the C library's setenv, of this signature, on two
            // NUL-terminated strings (it copies them).
            let setenv: unsafe extern "C" fn(
                *const libc::c_char,
                *const libc::c_char,
                libc::c_int,
            ) -> libc::c_int = unsafe { std::mem::transmute(f) };
            // SAFETY: as above.
            unsafe { setenv(n.as_ptr(), v.as_ptr(), 1) };
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_what_the_environment_holds() {
        let path = super::var("PATH").expect("PATH is set in tests");
        assert_eq!(Some(path), std::env::var("PATH").ok());
        assert!(super::var_os("TIERMEM_SURELY_NOT_SET_ANYWHERE").is_none());
    }

    #[test]
    fn sets_through_the_c_library() {
        assert_ne!(super::c_library_setenv(), 0, "the C library's setenv is found");
        super::set_var("TIERMEM_ENV_TEST_VALUE", "a b");
        assert_eq!(super::var("TIERMEM_ENV_TEST_VALUE").as_deref(), Some("a b"));
        assert_eq!(std::env::var("TIERMEM_ENV_TEST_VALUE").as_deref(), Ok("a b"));
    }
}
