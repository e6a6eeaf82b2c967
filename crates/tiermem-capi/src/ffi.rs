//! The conventions all exported functions share: pointer checks, panic catching, codes, `tm_last_error`.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CString};
use std::panic::{self, AssertUnwindSafe};
use std::ptr;

use crate::codes::{TM_EINTERNAL, TM_EINVAL, TM_OK};
use tiermem::fork::ProcessBound;

/// The largest `struct_size` accepted: anything bigger is taken for an
/// uninitialised struct rather than a struct from the far future.
pub(crate) const MAX_STRUCT_SIZE: u32 = 4096;

thread_local! {
    /// The calling thread's last failure, returned by `tm_last_error`.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// A failed call: its code and the detail for `tm_last_error`.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: c_int,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure {
            code: TM_EINVAL,
            message: message.into(),
        }
    }

    /// A pointer argument (or function pointer) `what` that was NULL.
    pub(crate) fn null(what: &str) -> Failure {
        Failure::invalid(format!("{what} is NULL"))
    }
}

impl From<tiermem::Error> for Failure {
    fn from(e: tiermem::Error) -> Failure {
        Failure {
            code: e.code() as c_int,
            message: e.to_string(),
        }
    }
}

/// Records `message` as this thread's last error, prefixed by the function
/// that failed. Never panics: a thread whose locals are being destroyed
/// keeps its old message.
fn set_last_error(func: &str, message: &str) {
    let text = format!("{func}: {message}").replace('\0', "\\0");
    let c = CString::new(text).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut slot) = e.try_borrow_mut() {
            *slot = c;
        }
    });
}

/// This thread's last error message (NUL-terminated), or `None` while the
/// thread's locals are unavailable. The pointer targets the CString's heap
/// buffer, which lives until [`set_last_error`] replaces it on this
/// thread's next failure.
pub(crate) fn last_error() -> Option<*const c_char> {
    LAST_ERROR
        .try_with(|e| e.try_borrow().map(|s| s.as_ptr()).ok())
        .ok()
        .flatten()
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// Runs the body of exported function `func`: a failure or a panic becomes
/// a negative code with the detail left for `tm_last_error`.
pub(crate) fn call<T>(func: &str, body: impl FnOnce() -> Result<T, Failure>) -> Result<T, c_int> {
    // AssertUnwindSafe: after a panic, the caller only gets an error code;
    // a region the panic left half-updated reports its state through later
    // calls, as it would after any internal error.
    match panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(f)) => {
            set_last_error(func, &f.message);
            Err(f.code)
        }
        Err(payload) => {
            set_last_error(
                func,
                &format!(
                    "internal error (panic: {}); please report it",
                    panic_message(&*payload)
                ),
            );
            // Dropping a payload can itself panic; keep that inside too.
            let _ = panic::catch_unwind(AssertUnwindSafe(move || drop(payload)));
            Err(TM_EINTERNAL)
        }
    }
}

/// How a body's result reaches C (the header's conventions): functions
/// returning `int` return 0 ([`TM_OK`]) or a count on success and the
/// negative code on failure; functions returning a pointer or a size
/// return NULL or 0 on failure.
pub(crate) trait CReturn: Sized {
    /// The exported function's C return type.
    type C;
    /// What C gets for a call's outcome: the value, or for a failure its
    /// code, NULL or 0.
    fn to_c(outcome: Result<Self, c_int>) -> Self::C;
}

/// Implements [`CReturn`] for each `type => C type, |outcome| what C gets;`.
macro_rules! c_return {
    ($($(#[$doc:meta])* $t:ty => $c:ty, |$r:ident| $to_c:expr;)+) => {$(
        $(#[$doc])*
        impl CReturn for $t {
            type C = $c;
            fn to_c($r: Result<$t, c_int>) -> $c {
                $to_c
            }
        }
    )+};
}

c_return! {
    /// `int` functions that only succeed or fail: `TM_OK` or the code.
    () => c_int, |r| r.map_or_else(|code| code, |()| TM_OK);
    /// `int` functions returning a count or a rank: the value or the code.
    c_int => c_int, |r| r.unwrap_or_else(|code| code);
    /// `size_t` functions: the size, or 0.
    usize => usize, |r| r.unwrap_or(0);
    /// Pointer functions: the pointer, or NULL.
    *mut c_void => *mut c_void, |r| r.unwrap_or(ptr::null_mut());
}

/// The body of every fallible exported function `func`: runs it under
/// [`call`] (panics caught, failures left for `tm_last_error`) and hands C
/// the value or the failure in the form its return type takes
/// ([`CReturn`]).
pub(crate) fn guard<T: CReturn>(func: &str, body: impl FnOnce() -> Result<T, Failure>) -> T::C {
    T::to_c(call(func, body))
}

/// [`guard`] for functions where NULL is a no-op returning `TM_OK`
/// (destroy and free): the body only runs for a non-NULL `p`.
pub(crate) fn unless_null<P>(func: &str, p: *const P, body: impl FnOnce() -> Result<(), Failure>) -> c_int {
    if p.is_null() {
        return TM_OK;
    }
    guard(func, body)
}

/// `tm_*_destroy` of a handle made by [`Out::set_box`]: NULL is a no-op
/// returning `TM_OK`, anything else is dropped (inside [`guard`]).
///
/// # Safety
/// `handle` is NULL or a live handle from [`Out::set_box`] that the caller
/// gives up: no one uses it during or after the call.
pub(crate) unsafe fn destroy<H>(func: &str, handle: *mut H) -> c_int {
    unless_null(func, handle, || {
        // SAFETY: a live handle (a leaked Box) that the caller gives up
        // here, so we own it again (the function's contract).
        drop(unsafe { Box::from_raw(handle) });
        Ok(())
    })
}

/// A handle that remembers the process that made it: in a `fork()`ed
/// child every call on the parent's handle fails with `TM_EFORKED` and
/// touches nothing (docs/fork.md).
pub(crate) trait Owned {
    /// What the handle is, for messages ("region", "team", ...).
    const OBJECT: &'static str;
    /// The process that made it.
    fn born(&self) -> &ProcessBound;
}

/// [`handle`], refused with `TM_EFORKED` in a forked child.
///
/// # Safety
/// As for [`handle`].
pub(crate) unsafe fn owned<'a, H: Owned>(p: *const H, what: &str) -> Result<&'a H, Failure> {
    // SAFETY: forwarded caller's contract.
    let h = unsafe { handle(p, what) }?;
    h.born().check("", H::OBJECT)?;
    Ok(h)
}

/// [`destroy`] of an [`Owned`] handle: in a forked child the parent's
/// handle is left alone (`TM_EFORKED`).
///
/// # Safety
/// As for [`destroy`].
pub(crate) unsafe fn destroy_owned<H: Owned>(func: &str, handle: *mut H) -> c_int {
    // SAFETY: NULL or a live handle (the function's contract), only read.
    if let Some(h) = unsafe { handle.as_ref() } {
        if !h.born().is_here() {
            return guard(func, || h.born().check("", H::OBJECT).map_err(Failure::from));
        }
    }
    // SAFETY: forwarded caller's contract.
    unsafe { destroy(func, handle) }
}

/// The functions that cannot fail (they leave `tm_last_error` alone): a
/// panic, which they never raise, would return `fallback`.
pub(crate) fn infallible<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    panic::catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

/// A pointer argument `what` that must not be NULL: NULL is `TM_EINVAL`
/// with "`what` is NULL".
pub(crate) fn non_null<T>(p: *const T, what: &str) -> Result<(), Failure> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    Ok(())
}

/// The object behind handle `p` (a `Box` leaked to C), or `TM_EINVAL` with
/// "`what` is NULL".
///
/// # Safety
/// `p` is NULL or points to a live `H` that outlives `'a` and is only read
/// through shared references meanwhile.
pub(crate) unsafe fn handle<'a, H>(p: *const H, what: &str) -> Result<&'a H, Failure> {
    // SAFETY: NULL or live (the function's contract).
    unsafe { p.as_ref() }.ok_or_else(|| Failure::null(what))
}

/// An out parameter (`T **out`): checked for NULL and cleared at once, so
/// that C finds NULL there after any failure.
pub(crate) struct Out<T>(*mut *mut T);

impl<T> Out<T> {
    /// Checks `out` (NULL is `TM_EINVAL` with `if_null` as the message) and
    /// stores NULL in it.
    ///
    /// # Safety
    /// `out` is NULL or writable (and stays so while the `Out` lives).
    pub(crate) unsafe fn new(out: *mut *mut T, if_null: &str) -> Result<Out<T>, Failure> {
        if out.is_null() {
            return Err(Failure::invalid(if_null));
        }
        // SAFETY: out is non-NULL and writable (the function's contract).
        unsafe { out.write(ptr::null_mut()) };
        Ok(Out(out))
    }

    /// Stores the result.
    pub(crate) fn set(self, value: *mut T) {
        // SAFETY: checked writable by `new`, whose contract keeps it so.
        unsafe { self.0.write(value) };
    }

    /// Stores `value` as a new handle, a `Box` leaked to C (given back by
    /// [`destroy`]).
    pub(crate) fn set_box(self, value: T) {
        self.set(Box::into_raw(Box::new(value)));
    }
}

/// A caller's `void *arg`, handed to its function in every worker or
/// process (team and SVM runs).
pub(crate) struct RunArg(pub(crate) *mut c_void);
// SAFETY: the pointer is handed to the caller's function in each worker;
// sharing it is the caller's contract (documented in the header).
unsafe impl Sync for RunArg {}

impl RunArg {
    // A method, so that closures capture the whole (Sync) wrapper.
    pub(crate) fn get(&self) -> *mut c_void {
        self.0
    }
}

/// Folds the status a user function (team worker, SVM process) returned
/// into the core's error: 0 is success.
pub(crate) fn user_status(what: &str, rc: c_int) -> Result<(), tiermem::Error> {
    if rc == 0 {
        Ok(())
    } else {
        Err(tiermem::Error::Usage(format!(
            "the {what} function returned {rc}"
        )))
    }
}
