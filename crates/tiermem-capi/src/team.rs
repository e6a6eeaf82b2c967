//! Team regions (`tm_team_*`): one region shared by worker processes or threads with separate page tables.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::size_of;

use crate::ffi::{destroy_owned, guard, handle, non_null, owned, user_status, Failure, Out, Owned, RunArg};
use tiermem::fork::ProcessBound;

/// `tm_team_create` flag: sharer-aware replacement instead of FIFO.
pub const TM_TEAM_SHARER_AWARE: c_int = 1;
/// `tm_team_create` flag: pin worker `r` to CPU `r % online CPUs`.
pub const TM_TEAM_PIN: c_int = 2;
/// `tm_team_create` flag: one page per fault (no fault-around).
pub const TM_TEAM_NO_FAULT_AROUND: c_int = 4;
/// `tm_team_create` flag: dirty tracking (read faults map write-protected;
/// evictions write back only written pages).
pub const TM_TEAM_DIRTY_TRACKING: c_int = 8;

/// A team region (opaque).
pub struct tm_team {
    team: tiermem::team::TeamRegion,
    born: ProcessBound,
}

impl Owned for tm_team {
    const OBJECT: &'static str = "team";
    fn born(&self) -> &ProcessBound {
        &self.born
    }
}

/// A worker inside `tm_team_run` (opaque; valid during the callback).
pub struct tm_team_worker {
    worker: *const c_void,
}

/// A worker function: 0 for success, anything else fails the team.
pub type tm_team_fn = Option<unsafe extern "C" fn(w: *mut tm_team_worker, arg: *mut c_void) -> c_int>;

/// Team statistics, summed over all members.
#[repr(C)]
#[derive(Default)]
pub struct tm_team_stats {
    /// Fills (from far memory or zeros).
    pub missing_faults: u64,
    /// Near pages mapped for one more member.
    pub minor_faults: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Eviction runs (one unmap each).
    pub evict_calls: u64,
    /// Bytes read from far memory.
    pub bytes_in: u64,
    /// Bytes written to far memory.
    pub bytes_out: u64,
    /// Evicted pages no member mapped.
    pub victims_unmapped: u64,
    /// Evicted pages only the evicting member mapped.
    pub victims_self: u64,
    /// Evicted pages one other member mapped.
    pub victims_other: u64,
    /// Evicted pages several members mapped.
    pub victims_many: u64,
}

// The header's struct tm_team_stats: ten uint64_t.
const _: () = assert!(size_of::<tm_team_stats>() == 10 * 8);

fn team_flags(
    workers: c_int,
    flags: c_int,
    virt: usize,
    near: usize,
) -> Result<tiermem::team::TeamConfig, Failure> {
    if workers <= 0 {
        return Err(Failure::invalid(format!("{workers} workers")));
    }
    if flags & !(TM_TEAM_SHARER_AWARE | TM_TEAM_PIN | TM_TEAM_NO_FAULT_AROUND | TM_TEAM_DIRTY_TRACKING) != 0 {
        return Err(Failure::invalid(format!("unknown flags {flags:#x}")));
    }
    let mut cfg = tiermem::team::TeamConfig::new(virt, near, workers as usize);
    if flags & TM_TEAM_SHARER_AWARE != 0 {
        cfg.policy = tiermem::team::TeamPolicy::SharerAware;
    }
    if flags & TM_TEAM_PIN != 0 {
        cfg.cpus = (0..tiermem_sys::thread::online_cpus()).collect();
    }
    cfg.fault_around = flags & TM_TEAM_NO_FAULT_AROUND == 0;
    cfg.dirty_tracking = flags & TM_TEAM_DIRTY_TRACKING != 0;
    Ok(cfg)
}

fn new_team(
    out: *mut *mut tm_team,
    make: impl FnOnce() -> Result<tiermem::team::TeamRegion, Failure>,
) -> Result<(), Failure> {
    // SAFETY: out is NULL or writable (caller's contract).
    let out = unsafe { Out::new(out, "out is NULL") }?;
    let team = make()?;
    out.set_box(tm_team {
        team,
        born: ProcessBound::here(),
    });
    Ok(())
}

/// `int tm_team_create(size_t virt_bytes, size_t near_bytes, int workers,
/// int flags, tm_team **out)`: a team region for `workers` workers started
/// by `tm_team_run`; this process (the host) may use it too.
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_team_create(
    virt_bytes: usize,
    near_bytes: usize,
    workers: c_int,
    flags: c_int,
    out: *mut *mut tm_team,
) -> c_int {
    guard("tm_team_create", || {
        new_team(out, || {
            let cfg = team_flags(workers, flags, virt_bytes, near_bytes)?;
            Ok(tiermem::team::TeamRegion::new(cfg)?)
        })
    })
}

fn name_arg<'a>(name: *const c_char) -> Result<&'a str, Failure> {
    non_null(name, "name")?;
    // SAFETY: non-NULL and NUL-terminated (caller's contract).
    unsafe { CStr::from_ptr(name) }
        .to_str()
        .map_err(|_| Failure::invalid("name is not UTF-8"))
}

/// `int tm_team_create_named(const char *name, size_t virt_bytes, size_t
/// near_bytes, int ranks, int flags, tm_team **out)`: a named team region
/// of `ranks` ranks for processes that already exist (MPI ranks on one
/// node); the caller is rank 0, the others call `tm_team_attach`.
///
/// # Safety
/// `name` is NULL or NUL-terminated; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_team_create_named(
    name: *const c_char,
    virt_bytes: usize,
    near_bytes: usize,
    ranks: c_int,
    flags: c_int,
    out: *mut *mut tm_team,
) -> c_int {
    guard("tm_team_create_named", || {
        new_team(out, || {
            let name = name_arg(name)?;
            let cfg = team_flags(ranks, flags, virt_bytes, near_bytes)?;
            Ok(tiermem::team::TeamRegion::create_named(name, cfg)?)
        })
    })
}

/// `int tm_team_attach(const char *name, int rank, tm_team **out)`.
///
/// # Safety
/// `name` is NULL or NUL-terminated; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_team_attach(name: *const c_char, rank: c_int, out: *mut *mut tm_team) -> c_int {
    guard("tm_team_attach", || {
        new_team(out, || {
            let name = name_arg(name)?;
            let rank = usize::try_from(rank).map_err(|_| Failure::invalid(format!("rank {rank}")))?;
            Ok(tiermem::team::TeamRegion::attach(name, rank)?)
        })
    })
}

/// `int tm_team_destroy(tm_team *t)`: leaves (attached) or removes
/// (creator) the team region. NULL is a no-op.
///
/// # Safety
/// `t` is NULL or a live handle not used by anyone during or after.
#[no_mangle]
pub unsafe extern "C" fn tm_team_destroy(t: *mut tm_team) -> c_int {
    // SAFETY: NULL or a live handle from new_team, given up here.
    unsafe { destroy_owned("tm_team_destroy", t) }
}

fn team_ref<'a>(t: *const tm_team) -> Result<&'a tm_team, Failure> {
    // SAFETY: NULL or a live handle (caller's contract); the parent's
    // handle in a forked child is refused.
    unsafe { owned(t, "team") }
}

/// `void *tm_team_base(const tm_team *t)`: the region's address (the same
/// in every member); NULL for NULL.
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_team_base(t: *const tm_team) -> *mut c_void {
    guard("tm_team_base", || Ok(team_ref(t)?.team.base() as *mut c_void))
}

/// `size_t tm_team_size(const tm_team *t)`: bytes; 0 for NULL.
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_team_size(t: *const tm_team) -> usize {
    guard("tm_team_size", || Ok(team_ref(t)?.team.len()))
}

/// `int tm_team_rank(const tm_team *t)`: this process's rank.
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_team_rank(t: *const tm_team) -> c_int {
    guard("tm_team_rank", || Ok(team_ref(t)?.team.rank() as c_int))
}

/// `int tm_team_sync(tm_team *t)`: barrier among the ranks of a named
/// team; TM_EWORKER if a rank died.
///
/// # Safety
/// `t` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tm_team_sync(t: *mut tm_team) -> c_int {
    guard("tm_team_sync", || Ok(team_ref(t)?.team.barrier()?))
}

/// `tm_team_run` kind: workers are processes (a page table each).
pub const TM_TEAM_PROCESSES: c_int = 0;
/// `tm_team_run` kind: workers are threads of this process.
pub const TM_TEAM_THREADS: c_int = 1;

/// `int tm_team_run(tm_team *t, int kind, tm_team_fn fn, void *arg)`:
/// runs `fn(worker, arg)` on every worker (processes or threads) and waits.
/// TM_EWORKER if a worker returned non-zero, crashed or was killed.
///
/// # Safety
/// `t` is NULL or a live handle from `tm_team_create`; `fn` is NULL or a
/// function safe to call concurrently in every worker with `arg`.
#[no_mangle]
pub unsafe extern "C" fn tm_team_run(t: *mut tm_team, kind: c_int, f: tm_team_fn, arg: *mut c_void) -> c_int {
    guard("tm_team_run", || {
        let team = &team_ref(t)?.team;
        let f = f.ok_or_else(|| Failure::null("fn"))?;
        let kind = match kind {
            TM_TEAM_PROCESSES => tiermem::team::TeamKind::Processes,
            TM_TEAM_THREADS => tiermem::team::TeamKind::Threads,
            k => return Err(Failure::invalid(format!("kind {k}"))),
        };
        let arg = RunArg(arg);
        team.run(kind, |w| {
            let mut handle = tm_team_worker {
                worker: w as *const tiermem::team::Worker<'_> as *const c_void,
            };
            // SAFETY: the caller's contract on fn and arg; the handle lives
            // for the call.
            user_status("worker", unsafe { f(&mut handle, arg.get()) })
        })?;
        Ok(())
    })
}

fn worker_ref<'a>(w: *const tm_team_worker) -> Result<&'a tiermem::team::Worker<'a>, Failure> {
    // SAFETY: NULL or the handle tm_team_run passed to the worker function,
    // whose `worker` points to the live Worker for the call's duration.
    let h = unsafe { handle(w, "worker") }?;
    // SAFETY: as above.
    Ok(unsafe { &*(h.worker as *const tiermem::team::Worker<'a>) })
}

/// `int tm_team_worker_rank(const tm_team_worker *w)`.
///
/// # Safety
/// `w` is NULL or the handle passed to the running worker function.
#[no_mangle]
pub unsafe extern "C" fn tm_team_worker_rank(w: *const tm_team_worker) -> c_int {
    guard("tm_team_worker_rank", || Ok(worker_ref(w)?.rank() as c_int))
}

/// `int tm_team_worker_count(const tm_team_worker *w)`.
///
/// # Safety
/// As `tm_team_worker_rank`.
#[no_mangle]
pub unsafe extern "C" fn tm_team_worker_count(w: *const tm_team_worker) -> c_int {
    guard("tm_team_worker_count", || Ok(worker_ref(w)?.workers() as c_int))
}

/// `void *tm_team_worker_base(const tm_team_worker *w)`.
///
/// # Safety
/// As `tm_team_worker_rank`.
#[no_mangle]
pub unsafe extern "C" fn tm_team_worker_base(w: *const tm_team_worker) -> *mut c_void {
    guard("tm_team_worker_base", || Ok(worker_ref(w)?.base() as *mut c_void))
}

/// `int tm_team_barrier(tm_team_worker *w)`: waits for every worker;
/// TM_EWORKER if one died.
///
/// # Safety
/// As `tm_team_worker_rank`.
#[no_mangle]
pub unsafe extern "C" fn tm_team_barrier(w: *mut tm_team_worker) -> c_int {
    guard("tm_team_barrier", || Ok(worker_ref(w)?.barrier()?))
}

/// `int tm_team_stats(const tm_team *t, struct tm_team_stats *out)`.
///
/// # Safety
/// `t` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tm_team_stats(t: *const tm_team, out: *mut tm_team_stats) -> c_int {
    guard("tm_team_stats", || {
        let team = &team_ref(t)?.team;
        non_null(out, "out")?;
        let s = team.stats().total();
        let v = tm_team_stats {
            missing_faults: s.missing_faults,
            minor_faults: s.minor_faults,
            evictions: s.evictions,
            evict_calls: s.evict_calls,
            bytes_in: s.bytes_in,
            bytes_out: s.bytes_out,
            victims_unmapped: s.victims_unmapped,
            victims_self: s.victims_self,
            victims_other: s.victims_other,
            victims_many: s.victims_many,
        };
        // SAFETY: out is non-NULL and writable (caller's contract).
        unsafe { out.write(v) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_flags_set_the_team_config() {
        let cfg = |flags| team_flags(2, flags, 1 << 20, 1 << 19);
        let plain = cfg(0).ok().unwrap();
        assert!(plain.fault_around && !plain.dirty_tracking && plain.cpus.is_empty());
        assert_eq!(plain.policy, tiermem::team::TeamPolicy::Fifo);
        let all = cfg(TM_TEAM_SHARER_AWARE | TM_TEAM_PIN | TM_TEAM_NO_FAULT_AROUND | TM_TEAM_DIRTY_TRACKING)
            .ok()
            .unwrap();
        assert!(!all.fault_around && all.dirty_tracking && !all.cpus.is_empty());
        assert_eq!(all.policy, tiermem::team::TeamPolicy::SharerAware);
        assert!(cfg(16).is_err(), "an unknown flag is refused");
        assert!(team_flags(0, 0, 1 << 20, 1 << 19).is_err(), "no workers");
    }
}
