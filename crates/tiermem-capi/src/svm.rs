//! Shared virtual memory (`tm_svm_*`, paper 5, Rhymes): a heap shared by forked processes, locks, barriers.

use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::ptr;

use crate::ffi::{destroy_owned, guard, non_null, owned, user_status, CReturn, Failure, Out, Owned, RunArg};
use tiermem::fork::ProcessBound;

/// `tm_svm_create` flag: SPM pages in the noncoherent flavour.
pub const TM_SVM_NONCOHERENT: c_int = 1;
/// `tm_svm_create` flag: pin process `r` to CPU `r % online CPUs`.
pub const TM_SVM_PIN: c_int = 2;

/// An SVM team (opaque).
pub struct tm_svm {
    svm: tiermem::svm::Svm,
    born: ProcessBound,
}

impl Owned for tm_svm {
    const OBJECT: &'static str = "SVM";
    fn born(&self) -> &ProcessBound {
        &self.born
    }
}

/// The function each SVM process runs.
pub type tm_svm_fn = Option<unsafe extern "C" fn(arg: *mut c_void) -> c_int>;

/// Protocol counters (all processes of the last run), as in the header.
#[repr(C)]
#[derive(Default)]
pub struct tm_svm_stats {
    /// DSM/read-only-private read faults.
    pub read_faults: u64,
    /// DSM write faults (twins made).
    pub write_faults: u64,
    /// Write faults on write-protected SPM pages.
    pub spm_write_faults: u64,
    /// Home pages copied into private copies.
    pub fetches: u64,
    /// Pages diffed against their twins.
    pub diffs: u64,
    /// Byte runs applied to home copies.
    pub diff_runs: u64,
    /// Bytes of diff applied.
    pub diff_bytes: u64,
    /// Write notices attached to locks.
    pub notices_sent: u64,
    /// Write notices read at acquires.
    pub notices_received: u64,
    /// Cached copies invalidated.
    pub invalidations: u64,
    /// Cache lines written back (noncoherent).
    pub lines_flushed: u64,
    /// Cache lines invalidated (noncoherent).
    pub lines_invalidated: u64,
}

// The header's struct tm_svm_stats: twelve uint64_t.
const _: () = assert!(size_of::<tm_svm_stats>() == 12 * 8);

thread_local! {
    /// The SVM process this (forked) process runs as, during tm_svm_run.
    static SVM_PROC: std::cell::Cell<*const c_void> = const { std::cell::Cell::new(ptr::null()) };
}

fn svm_ref<'a>(s: *const tm_svm) -> Result<&'a tm_svm, Failure> {
    // SAFETY: NULL or a live handle from tm_svm_create (caller's
    // contract); the parent's handle in a forked child is refused.
    unsafe { owned(s, "svm") }
}

/// Runs `f` (under [`guard`]) with the calling process's SVM process, or
/// fails outside `tm_svm_run`.
fn with_proc<T: CReturn>(
    func: &str,
    f: impl FnOnce(&tiermem::svm::SvmProc<'_>) -> Result<T, Failure>,
) -> T::C {
    guard(func, || {
        let p = SVM_PROC.with(|c| c.get());
        if p.is_null() {
            return Err(Failure::invalid(format!(
                "{func} outside a tm_svm_run process function"
            )));
        }
        // SAFETY: set by tm_svm_run to a SvmProc that lives for the whole
        // process function (this thread's), and cleared after it.
        f(unsafe { &*(p as *const tiermem::svm::SvmProc<'_>) })
    })
}

/// `int tm_svm_create(size_t heap_bytes, int procs, int flags, tm_svm **out)`.
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_svm_create(
    heap_bytes: usize,
    procs: c_int,
    flags: c_int,
    out: *mut *mut tm_svm,
) -> c_int {
    guard("tm_svm_create", || {
        // SAFETY: out is NULL or writable (caller's contract).
        let out = unsafe { Out::new(out, "out is NULL") }?;
        // 0: every rank of an MPI job (Svm::new refuses it for a forked team).
        if procs < 0 {
            return Err(Failure::invalid(format!("{procs} processes")));
        }
        if flags & !(TM_SVM_NONCOHERENT | TM_SVM_PIN) != 0 {
            return Err(Failure::invalid(format!("unknown flags {flags:#x}")));
        }
        let mut cfg = tiermem::svm::SvmConfig::new(heap_bytes, procs as usize);
        if flags & TM_SVM_NONCOHERENT != 0 {
            cfg.flavour = tiermem::svm::SpmFlavour::Noncoherent;
        }
        if flags & TM_SVM_PIN != 0 {
            cfg.cpus = (0..tiermem_sys::thread::online_cpus()).collect();
        }
        let svm = tiermem::svm::Svm::new(cfg)?;
        out.set_box(tm_svm {
            svm,
            born: ProcessBound::here(),
        });
        Ok(())
    })
}

/// `int tm_svm_run(tm_svm *s, tm_svm_fn fn, void *arg)`: forks the team's
/// processes, each runs `fn(arg)` and may call the `tm_svm_*` functions
/// below; waits for all. TM_EWORKER if one returned non-zero, crashed or
/// was killed.
///
/// # Safety
/// `s` is NULL or a live handle; `fn` is NULL or a function safe to call
/// in every process with `arg`.
#[no_mangle]
pub unsafe extern "C" fn tm_svm_run(s: *mut tm_svm, f: tm_svm_fn, arg: *mut c_void) -> c_int {
    guard("tm_svm_run", || {
        let svm = &svm_ref(s)?.svm;
        let f = f.ok_or_else(|| Failure::null("fn"))?;
        let arg = RunArg(arg);
        svm.run(|p| {
            SVM_PROC.with(|c| c.set(p as *const tiermem::svm::SvmProc<'_> as *const c_void));
            // SAFETY: the caller's contract on fn and arg.
            let rc = unsafe { f(arg.get()) };
            SVM_PROC.with(|c| c.set(ptr::null()));
            user_status("process", rc)
        })?;
        Ok(())
    })
}

/// `int tm_svm_rank(void)`: this process's rank (inside `tm_svm_run`).
#[no_mangle]
pub extern "C" fn tm_svm_rank() -> c_int {
    with_proc("tm_svm_rank", |p| Ok(p.rank() as c_int))
}

/// `int tm_svm_nodes(void)`: nodes the team spans (1 for a forked team).
#[no_mangle]
pub extern "C" fn tm_svm_nodes() -> c_int {
    with_proc("tm_svm_nodes", |p| Ok(p.nodes() as c_int))
}

/// `void *tm_svm_malloc_cyclic(size_t size)`: collective allocation whose
/// pages are homed on the ranks of an MPI job in turn (page `i` on rank
/// `i % ranks`); like `tm_svm_malloc` in a forked team.
#[no_mangle]
pub extern "C" fn tm_svm_malloc_cyclic(size: usize) -> *mut c_void {
    with_proc("tm_svm_malloc_cyclic", |p| {
        Ok(p.malloc_distributed(size, tiermem::svm::Distribution::Cyclic)? as *mut c_void)
    })
}

/// `int tm_svm_procs(void)`: processes in the team.
#[no_mangle]
pub extern "C" fn tm_svm_procs() -> c_int {
    with_proc("tm_svm_procs", |p| Ok(p.procs() as c_int))
}

/// `void *tm_svm_malloc(size_t size)`: collective allocation (every process
/// calls it in the same order with the same size; the same address in
/// all). NULL on error (`tm_last_error` says why).
#[no_mangle]
pub extern "C" fn tm_svm_malloc(size: usize) -> *mut c_void {
    with_proc("tm_svm_malloc", |p| Ok(p.malloc(size)? as *mut c_void))
}

/// `int tm_svm_free(void *ptr)`: collective free.
#[no_mangle]
pub extern "C" fn tm_svm_free(ptr: *mut c_void) -> c_int {
    with_proc("tm_svm_free", |p| Ok(p.free(ptr as usize)?))
}

fn lock_id(id: c_int) -> Result<usize, Failure> {
    usize::try_from(id).map_err(|_| Failure::invalid(format!("lock id {id}")))
}

/// `int tm_svm_lock(int id)`.
#[no_mangle]
pub extern "C" fn tm_svm_lock(id: c_int) -> c_int {
    with_proc("tm_svm_lock", |p| Ok(p.lock(lock_id(id)?)?))
}

/// `int tm_svm_unlock(int id)`.
#[no_mangle]
pub extern "C" fn tm_svm_unlock(id: c_int) -> c_int {
    with_proc("tm_svm_unlock", |p| Ok(p.unlock(lock_id(id)?)?))
}

/// `int tm_svm_barrier(void)`.
#[no_mangle]
pub extern "C" fn tm_svm_barrier() -> c_int {
    with_proc("tm_svm_barrier", |p| Ok(p.barrier()?))
}

/// `tm_svm_set_mode` mode: shared physical memory.
pub const TM_SVM_SPM: c_int = 0;
/// `tm_svm_set_mode` mode: private cached copy (scope consistency).
pub const TM_SVM_DSM: c_int = 1;

/// `int tm_svm_set_mode(void *ptr, size_t len, int mode)`: whole pages,
/// this process only.
#[no_mangle]
pub extern "C" fn tm_svm_set_mode(ptr: *mut c_void, len: usize, mode: c_int) -> c_int {
    with_proc("tm_svm_set_mode", |p| {
        let m = match mode {
            TM_SVM_SPM => tiermem::svm::SvmMode::Spm,
            TM_SVM_DSM => tiermem::svm::SvmMode::Dsm,
            m => return Err(Failure::invalid(format!("mode {m}"))),
        };
        Ok(p.set_mode(ptr as usize, len, m)?)
    })
}

/// `int tm_svm_hint_read_only(void *ptr, size_t len)`: the paper's
/// "read-only private" hint.
#[no_mangle]
pub extern "C" fn tm_svm_hint_read_only(ptr: *mut c_void, len: usize) -> c_int {
    with_proc("tm_svm_hint_read_only", |p| {
        Ok(p.hint_read_only(ptr as usize, len)?)
    })
}

/// `int tm_svm_stats(const tm_svm *s, struct tm_svm_stats *out)`: counters
/// of the last run, all processes.
///
/// # Safety
/// `s` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_svm_stats(s: *const tm_svm, out: *mut tm_svm_stats) -> c_int {
    guard("tm_svm_stats", || {
        let t = svm_ref(s)?.svm.total_stats();
        non_null(out, "out")?;
        let c = tm_svm_stats {
            read_faults: t.read_faults,
            write_faults: t.write_faults,
            spm_write_faults: t.spm_write_faults,
            fetches: t.fetches,
            diffs: t.diffs,
            diff_runs: t.diff_runs,
            diff_bytes: t.diff_bytes,
            notices_sent: t.notices_sent,
            notices_received: t.notices_received,
            invalidations: t.invalidations,
            lines_flushed: t.lines_flushed,
            lines_invalidated: t.lines_invalidated,
        };
        // SAFETY: out is non-NULL and writable (caller's contract).
        unsafe { out.write(c) };
        Ok(())
    })
}

/// `int tm_svm_destroy(tm_svm *s)`. NULL is a no-op.
///
/// # Safety
/// `s` is NULL or a live handle, not used after.
#[no_mangle]
pub unsafe extern "C" fn tm_svm_destroy(s: *mut tm_svm) -> c_int {
    // SAFETY: NULL or a live handle from tm_svm_create, given up here.
    unsafe { destroy_owned("tm_svm_destroy", s) }
}
