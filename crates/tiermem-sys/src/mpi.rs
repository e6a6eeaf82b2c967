//! MPI-3 for the shared virtual memory across nodes (cargo feature `mpi`):
//! a thin safe layer over `mpi::ffi` (rsmpi's raw bindings, which expose
//! every `MPI_Win_*` call that rsmpi itself does not wrap). Like the rest of
//! this crate, the `unsafe` code stays here:
//!
//! - [`init`]: MPI initialised with `MPI_THREAD_MULTIPLE`, or the program's
//!   own initialisation checked; finalised at exit if tiermem initialised it;
//! - [`Comm`]: communicators (world, duplicates, node splits) with the
//!   collectives the SVM needs, errors returned instead of aborting;
//! - [`Window`]: one window over an owned [`Mapping`], in a passive-target
//!   epoch (`MPI_Win_lock_all(MPI_MODE_NOCHECK)`) from creation to drop;
//! - [`Batch`]: one-sided operations on a window (`MPI_Get`, `MPI_Put` of
//!   byte runs through an hindexed datatype, `MPI_Fetch_and_op`,
//!   `MPI_Compare_and_swap`) whose buffers stay borrowed until
//!   `MPI_Win_flush_all` completes them;
//! - [`Progress`]: a thread that drives MPI's progress engine, for
//!   transports whose one-sided operations need the target to make progress
//!   (Open MPI's `osc/ucx` over TCP emulates RMA with active messages).
//!
//! ```no_run
//! use std::sync::Arc;
//! use tiermem_sys::mm::{MapOptions, Mapping};
//! use tiermem_sys::mpi;
//! let m = mpi::init()?;
//! let world = mpi::Comm::world(&m)?;
//! let (mem, _) = Mapping::anonymous(4096, &MapOptions::default()).unwrap();
//! let win = mpi::Window::create(&world, Arc::new(mem))?;
//! let (one, mut old) = (1u64, 0u64);
//! let mut b = win.batch();
//! b.fetch_add(0, 0, &one, &mut old)?; // word 0 of rank 0's window += 1
//! b.flush()?;
//! # Ok::<(), mpi::MpiError>(())
//! ```
//!
//! Signal context: the SVM's fault handler calls [`Batch`] operations.
//! MPI is not async-signal-safe; what makes this workable is that the
//! fault is synchronous (raised by a load or store of the faulting thread,
//! never inside MPI, as long as SVM memory is not handed to MPI calls), and
//! that under `MPI_THREAD_MULTIPLE` another thread holding MPI's internal
//! locks releases them without help from the faulting thread.

use crate::mm::{Mapping, MemRange};
use mpi::ffi;
use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// An MPI call that failed.
#[derive(Debug, thiserror::Error)]
pub enum MpiError {
    /// A call returned an error code (the communicator's or window's error
    /// handler is `MPI_ERRORS_RETURN`).
    #[error("{call} failed: {msg} (MPI error {code})")]
    Call {
        /// The MPI function.
        call: &'static str,
        /// Its return code.
        code: i32,
        /// `MPI_Error_string` of the code.
        msg: String,
    },
    /// The program initialised MPI below `MPI_THREAD_MULTIPLE`.
    #[error(
        "MPI was initialised with thread level {provided}, and tiermem needs MPI_THREAD_MULTIPLE (3): \
         initialise with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...), or let tiermem initialise MPI"
    )]
    ThreadLevel {
        /// The level the program asked for and got.
        provided: i32,
    },
    /// MPI was finalised already.
    #[error("MPI is finalised")]
    Finalized,
    /// A rank or count does not fit MPI's `int`.
    #[error("{0} does not fit an MPI int")]
    TooLarge(&'static str),
}

fn error_string(code: c_int) -> String {
    let mut buf = vec![0u8; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: buf holds MPI_MAX_ERROR_STRING bytes plus one, as the call requires.
    let rc = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return "unknown error".into();
    }
    buf.truncate(len.max(0) as usize);
    String::from_utf8_lossy(&buf).into_owned()
}

fn check(call: &'static str, rc: c_int) -> Result<(), MpiError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(MpiError::Call {
            call,
            code: rc,
            msg: error_string(rc),
        })
    }
}

fn int(v: usize, what: &'static str) -> Result<c_int, MpiError> {
    c_int::try_from(v).map_err(|_| MpiError::TooLarge(what))
}

/// Whether this process was started by an MPI launcher (`mpirun`,
/// `mpiexec`, `srun` with PMI): the variables Open MPI, MPICH's Hydra and
/// PMIx put in every rank's environment.
pub fn launched() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"]
        .iter()
        .any(|v| crate::env::var_os(v).is_some())
}

/// Proof that MPI is initialised with `MPI_THREAD_MULTIPLE`.
#[derive(Clone, Copy, Debug)]
pub struct Mpi {
    /// tiermem called `MPI_Init_thread` (and finalises at exit).
    pub initialised_here: bool,
}

static INIT: Mutex<Option<Mpi>> = Mutex::new(None);
/// Progress threads running (stopped before `MPI_Finalize` at exit).
static PROGRESS_THREADS: AtomicUsize = AtomicUsize::new(0);
static STOP_ALL_PROGRESS: AtomicBool = AtomicBool::new(false);
/// Batches and collectives in flight on the program's threads. The
/// progress thread stays out of MPI while there are some: those threads
/// drive progress themselves, and MPI's internal locks are spinlocks (UCX's
/// worker lock): a progress thread holding one while descheduled on an
/// oversubscribed CPU made the owner spin through whole time slices
/// (measured: 43% of a rank's time in `pthread_spin_lock`).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Marks the calling thread as driving MPI for its life.
struct Active;

impl Active {
    fn enter() -> Active {
        // Relaxed: a hint to the progress thread, not a synchronisation.
        ACTIVE.fetch_add(1, Ordering::Relaxed);
        Active
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

extern "C" fn finalize_at_exit() {
    // Stop progress threads first: MPI_Finalize with another thread inside
    // MPI is erroneous.
    STOP_ALL_PROGRESS.store(true, Ordering::SeqCst);
    while PROGRESS_THREADS.load(Ordering::SeqCst) != 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut done: c_int = 0;
    // SAFETY: plain queries and MPI_Finalize from the exiting thread; no other
    // thread of ours is inside MPI (see above).
    unsafe {
        ffi::MPI_Finalized(&mut done);
        if done == 0 {
            ffi::MPI_Finalize();
        }
    }
}

/// Initialises MPI with `MPI_THREAD_MULTIPLE` unless the program did (then
/// its thread level is checked). When tiermem initialises MPI it also
/// finalises it at process exit (`atexit`).
pub fn init() -> Result<Mpi, MpiError> {
    let mut g = INIT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = *g {
        return Ok(m);
    }
    let (mut flag, mut fin, mut provided): (c_int, c_int, c_int) = (0, 0, 0);
    // SAFETY: MPI_Initialized and MPI_Finalized may be called at any time.
    unsafe {
        check("MPI_Finalized", ffi::MPI_Finalized(&mut fin))?;
        check("MPI_Initialized", ffi::MPI_Initialized(&mut flag))?;
    }
    if fin != 0 {
        return Err(MpiError::Finalized);
    }
    let multiple = ffi::MPI_THREAD_MULTIPLE as c_int;
    let m = if flag == 0 {
        // SAFETY: MPI is not initialised (checked above, under INIT's lock);
        // NULL argc/argv are allowed by MPI-2 and later.
        check("MPI_Init_thread", unsafe {
            ffi::MPI_Init_thread(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                multiple,
                &mut provided,
            )
        })?;
        // SAFETY: registers a plain extern "C" function.
        unsafe { libc::atexit(finalize_at_exit) };
        Mpi {
            initialised_here: true,
        }
    } else {
        // SAFETY: MPI is initialised.
        check("MPI_Query_thread", unsafe {
            ffi::MPI_Query_thread(&mut provided)
        })?;
        Mpi {
            initialised_here: false,
        }
    };
    if provided < multiple {
        return Err(MpiError::ThreadLevel { provided });
    }
    *g = Some(m);
    Ok(m)
}

/// An MPI handle that may move between threads: under
/// `MPI_THREAD_MULTIPLE` every handle may be used from any thread.
#[derive(Clone, Copy)]
struct Handle<T>(T);
// SAFETY: see the type's docs (MPI_THREAD_MULTIPLE is checked by init()).
unsafe impl<T> Send for Handle<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Handle<T> {}

/// Reduction operators.
#[derive(Clone, Copy, Debug)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

impl ReduceOp {
    fn raw(self) -> ffi::MPI_Op {
        // SAFETY: reads of MPI's predefined operator handles.
        unsafe {
            match self {
                ReduceOp::Sum => ffi::RSMPI_SUM,
                ReduceOp::Min => ffi::RSMPI_MIN,
                ReduceOp::Max => ffi::RSMPI_MAX,
            }
        }
    }
}

fn u64_type() -> ffi::MPI_Datatype {
    // SAFETY: read of a predefined datatype handle.
    unsafe { ffi::RSMPI_UINT64_T }
}

fn byte_type() -> ffi::MPI_Datatype {
    // SAFETY: read of a predefined datatype handle.
    unsafe { ffi::RSMPI_UINT8_T }
}

/// A communicator; duplicates and splits are freed on drop, with errors
/// returned (`MPI_ERRORS_RETURN`) rather than aborting the job.
pub struct Comm {
    raw: Handle<ffi::MPI_Comm>,
    owned: bool,
    rank: usize,
    size: usize,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Comm(rank {} of {})", self.rank, self.size)
    }
}

impl Comm {
    fn wrap(raw: ffi::MPI_Comm, owned: bool) -> Result<Comm, MpiError> {
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: raw is a valid communicator handle (world or one we made).
        unsafe {
            check(
                "MPI_Comm_set_errhandler",
                ffi::MPI_Comm_set_errhandler(raw, ffi::RSMPI_ERRORS_RETURN),
            )?;
            check("MPI_Comm_rank", ffi::MPI_Comm_rank(raw, &mut rank))?;
            check("MPI_Comm_size", ffi::MPI_Comm_size(raw, &mut size))?;
        }
        Ok(Comm {
            raw: Handle(raw),
            owned,
            rank: rank as usize,
            size: size as usize,
        })
    }

    /// `MPI_COMM_WORLD`, its error handler set to `MPI_ERRORS_RETURN`.
    pub fn world(_: &Mpi) -> Result<Comm, MpiError> {
        // SAFETY: read of a predefined handle; MPI is initialised (token).
        Comm::wrap(unsafe { ffi::RSMPI_COMM_WORLD }, false)
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Processes in the communicator.
    pub fn size(&self) -> usize {
        self.size
    }

    /// `MPI_Comm_dup` (collective).
    pub fn dup(&self) -> Result<Comm, MpiError> {
        let mut out = ffi::MPI_Comm(std::ptr::null_mut());
        // SAFETY: valid communicator; out receives the new handle.
        check("MPI_Comm_dup", unsafe { ffi::MPI_Comm_dup(self.raw.0, &mut out) })?;
        Comm::wrap(out, true)
    }

    /// `MPI_Comm_split` by `color`, ordered by `key` (collective).
    pub fn split(&self, color: usize, key: usize) -> Result<Comm, MpiError> {
        let mut out = ffi::MPI_Comm(std::ptr::null_mut());
        let (c, k) = (int(color, "a color")?, int(key, "a key")?);
        // SAFETY: valid communicator; out receives the new handle.
        check("MPI_Comm_split", unsafe {
            ffi::MPI_Comm_split(self.raw.0, c, k, &mut out)
        })?;
        Comm::wrap(out, true)
    }

    /// The processes that can share memory with this one
    /// (`MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`): the node (collective).
    pub fn split_shared(&self) -> Result<Comm, MpiError> {
        let mut out = ffi::MPI_Comm(std::ptr::null_mut());
        // SAFETY: valid communicator; MPI_INFO_NULL; out receives the handle.
        check("MPI_Comm_split_type", unsafe {
            ffi::MPI_Comm_split_type(
                self.raw.0,
                ffi::RSMPI_COMM_TYPE_SHARED,
                self.rank as c_int,
                ffi::RSMPI_INFO_NULL,
                &mut out,
            )
        })?;
        Comm::wrap(out, true)
    }

    /// `MPI_Barrier` (blocking; see [`Comm::ibarrier`] for one that can be
    /// abandoned).
    pub fn barrier(&self) -> Result<(), MpiError> {
        // SAFETY: valid communicator.
        check("MPI_Barrier", unsafe { ffi::MPI_Barrier(self.raw.0) })
    }

    /// `MPI_Ibarrier`: completes when every process entered it.
    pub fn ibarrier(&self) -> Result<Pending, MpiError> {
        let comm = self.raw.0;
        Pending::start("MPI_Ibarrier", Vec::new(), Vec::new(), |_, _, req| {
            // SAFETY: valid communicator; req receives the request.
            unsafe { ffi::MPI_Ibarrier(comm, req) }
        })
    }

    /// `MPI_Iallreduce` of `send` (u64 elements): the result is the
    /// `Vec` that [`Pending::test`] returns when done.
    pub fn iallreduce(&self, op: ReduceOp, send: Vec<u64>) -> Result<Pending, MpiError> {
        let recv = vec![0u64; send.len()];
        let n = int(send.len(), "a reduction length")?;
        let (op, comm) = (op.raw(), self.raw.0);
        Pending::start("MPI_Iallreduce", send, recv, |s, r, req| {
            // SAFETY: both buffers are heap allocations owned by the
            // returned Pending, which keeps them alive until the request
            // completes (or leaks them if it is dropped before).
            unsafe { ffi::MPI_Iallreduce(s, r, n, u64_type(), op, comm, req) }
        })
    }

    /// `MPI_Iallgather` of `send` (u64 elements, the same length in every
    /// process): the result, `size()` times `send.len()` words in rank
    /// order, is the `Vec` that [`Pending::test`] returns when done.
    pub fn iallgather(&self, send: Vec<u64>) -> Result<Pending, MpiError> {
        let recv = vec![0u64; send.len() * self.size];
        let n = int(send.len(), "an allgather length")?;
        let comm = self.raw.0;
        Pending::start("MPI_Iallgather", send, recv, |s, r, req| {
            // SAFETY: both buffers are heap allocations owned by the
            // returned Pending (see iallreduce).
            unsafe { ffi::MPI_Iallgather(s, n, u64_type(), r, n, u64_type(), comm, req) }
        })
    }

    /// `MPI_Allgather` of one slice per process: `out` gets `size()` times
    /// `send.len()` words, in rank order.
    pub fn allgather(&self, send: &[u64], out: &mut [u64]) -> Result<(), MpiError> {
        assert_eq!(out.len(), send.len() * self.size, "allgather output size");
        let n = int(send.len(), "an allgather length")?;
        // SAFETY: send and out are valid for the lengths given (asserted).
        check("MPI_Allgather", unsafe {
            ffi::MPI_Allgather(
                send.as_ptr().cast(),
                n,
                u64_type(),
                out.as_mut_ptr().cast(),
                n,
                u64_type(),
                self.raw.0,
            )
        })
    }

    /// `MPI_Bcast` of `buf` from `root`.
    pub fn bcast(&self, root: usize, buf: &mut [u64]) -> Result<(), MpiError> {
        let n = int(buf.len(), "a broadcast length")?;
        // SAFETY: buf is valid for n words.
        check("MPI_Bcast", unsafe {
            ffi::MPI_Bcast(
                buf.as_mut_ptr().cast(),
                n,
                u64_type(),
                int(root, "a rank")?,
                self.raw.0,
            )
        })
    }

    /// `MPI_Abort`: ends every process of the job.
    pub fn abort(&self, code: i32) -> ! {
        // SAFETY: valid communicator; MPI_Abort does not return in practice.
        unsafe { ffi::MPI_Abort(self.raw.0, code) };
        std::process::abort()
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: a communicator we created and nobody else frees.
            unsafe { ffi::MPI_Comm_free(&mut self.raw.0) };
        }
    }
}

/// A nonblocking collective in flight, owning its buffers.
pub struct Pending {
    req: Handle<ffi::MPI_Request>,
    done: bool,
    send: Vec<u64>,
    recv: Vec<u64>,
}

impl Pending {
    /// Starts a nonblocking operation `call` with `start` (given the
    /// buffers' addresses and the request to fill), and returns it owning
    /// `send` and `recv`: moving a `Vec` leaves its heap buffer in place,
    /// so the addresses stay valid until the request completes.
    fn start(
        call: &'static str,
        send: Vec<u64>,
        mut recv: Vec<u64>,
        start: impl FnOnce(*const c_void, *mut c_void, &mut ffi::MPI_Request) -> c_int,
    ) -> Result<Pending, MpiError> {
        let mut req = ffi::MPI_Request(std::ptr::null_mut());
        check(
            call,
            start(send.as_ptr().cast(), recv.as_mut_ptr().cast(), &mut req),
        )?;
        Ok(Pending {
            req: Handle(req),
            done: false,
            send,
            recv,
        })
    }

    /// `MPI_Test`: `Some(result)` once complete (the reduced words; empty
    /// for a barrier).
    pub fn test(&mut self) -> Result<Option<Vec<u64>>, MpiError> {
        if self.done {
            return Ok(Some(std::mem::take(&mut self.recv)));
        }
        let _active = Active::enter();
        let mut flag: c_int = 0;
        // SAFETY: req is an active request of ours; STATUS_IGNORE is allowed.
        check("MPI_Test", unsafe {
            ffi::MPI_Test(&mut self.req.0, &mut flag, ffi::RSMPI_STATUS_IGNORE)
        })?;
        if flag != 0 {
            self.done = true;
            self.send.clear();
            return Ok(Some(std::mem::take(&mut self.recv)));
        }
        Ok(None)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            // Abandoned (a peer failed): MPI may still write the buffers, so
            // they are leaked, and the request is freed.
            std::mem::forget(std::mem::take(&mut self.send));
            std::mem::forget(std::mem::take(&mut self.recv));
            // SAFETY: an active request of ours; freeing it lets it complete
            // in the background.
            unsafe { ffi::MPI_Request_free(&mut self.req.0) };
        }
    }
}

/// An RMA window over a whole [`Mapping`], in a passive-target epoch for its
/// whole life (`MPI_Win_lock_all(MPI_MODE_NOCHECK)` at creation,
/// `MPI_Win_unlock_all` before `MPI_Win_free`). Displacements are bytes.
///
/// Creation and drop are collective over the communicator: every process
/// creates and drops its windows in the same order.
pub struct Window {
    raw: Handle<ffi::MPI_Win>,
    /// Exposed memory: kept alive as long as the window.
    mem: Arc<Mapping>,
    size: usize,
}

impl Window {
    /// `MPI_Win_create` over `mem` (collective), then `MPI_Win_lock_all`.
    pub fn create(comm: &Comm, mem: Arc<Mapping>) -> Result<Window, MpiError> {
        let mut raw = ffi::MPI_Win(std::ptr::null_mut());
        // SAFETY: mem is a live mapping of mem.len() bytes; the window keeps
        // an Arc of it, so it stays mapped until after MPI_Win_free.
        unsafe {
            check(
                "MPI_Win_create",
                ffi::MPI_Win_create(
                    mem.as_ptr().cast(),
                    mem.len() as ffi::MPI_Aint,
                    1,
                    ffi::RSMPI_INFO_NULL,
                    comm.raw.0,
                    &mut raw,
                ),
            )?;
            let w = Window {
                raw: Handle(raw),
                mem,
                size: comm.size,
            };
            check(
                "MPI_Win_set_errhandler",
                ffi::MPI_Win_set_errhandler(raw, ffi::RSMPI_ERRORS_RETURN),
            )?;
            check(
                "MPI_Win_lock_all",
                ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, raw),
            )?;
            Ok(w)
        }
    }

    /// This process's exposed memory.
    pub fn local(&self) -> &Mapping {
        &self.mem
    }

    /// A batch of one-sided operations, completed by [`Batch::flush`].
    pub fn batch(&self) -> Batch<'_> {
        Batch {
            win: self,
            pending: false,
            _active: Active::enter(),
            _bufs: PhantomData,
        }
    }

    fn target(&self, rank: usize) -> c_int {
        assert!(
            rank < self.size,
            "target rank {rank} outside a window of {}",
            self.size
        );
        rank as c_int
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // SAFETY: our window, in the lock_all epoch opened at creation.
        unsafe {
            ffi::MPI_Win_unlock_all(self.raw.0);
            ffi::MPI_Win_free(&mut self.raw.0);
        }
    }
}

/// The local side of a contiguous one-sided transfer: where a get writes,
/// or what a put reads, and how many elements.
#[derive(Clone, Copy)]
enum Origin {
    Get(*mut c_void, usize),
    Put(*const c_void, usize),
}

impl Origin {
    /// A get into the elements of `out`.
    fn get_into<T>(out: &mut [T]) -> Origin {
        Origin::Get(out.as_mut_ptr().cast(), out.len())
    }

    /// A put of the elements of `src`.
    fn put_from<T>(src: &[T]) -> Origin {
        Origin::Put(src.as_ptr().cast(), src.len())
    }
}

/// One-sided operations on a [`Window`]. Buffers handed to an operation
/// stay borrowed until [`Batch::flush`] (`MPI_Win_flush_all`) has completed
/// it at origin and target; dropping an unflushed batch flushes it.
///
/// Operations that read a buffer, and results (`old`), are only defined
/// after the flush.
pub struct Batch<'a> {
    win: &'a Window,
    pending: bool,
    _active: Active,
    _bufs: PhantomData<&'a mut [u8]>,
}

impl<'a> Batch<'a> {
    /// `MPI_Get` of `len` bytes at `disp` of `target`'s window into `dst` at
    /// `dst_offset`.
    pub fn get(
        &mut self,
        target: usize,
        disp: usize,
        dst: &'a Mapping,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), MpiError> {
        let origin = Origin::Get(dst.range(dst_offset, len).addr() as *mut c_void, len);
        // SAFETY: the origin is inside the live mapping dst (range()
        // checks), which stays borrowed until the flush; the caller's page
        // protocol gives this batch the bytes (nothing else writes them).
        unsafe { self.transfer(target, disp, origin, byte_type()) }
    }

    /// `MPI_Get` of `out.len()` bytes at byte `disp` of `target`'s window.
    pub fn get_bytes(&mut self, target: usize, disp: usize, out: &'a mut [u8]) -> Result<(), MpiError> {
        // SAFETY: out is borrowed mutably until the flush.
        unsafe { self.transfer(target, disp, Origin::get_into(out), byte_type()) }
    }

    /// `MPI_Get` of `out.len()` words at byte `disp` of `target`'s window.
    pub fn get_words(&mut self, target: usize, disp: usize, out: &'a mut [u64]) -> Result<(), MpiError> {
        // SAFETY: out is borrowed mutably until the flush.
        unsafe { self.transfer(target, disp, Origin::get_into(out), u64_type()) }
    }

    /// Starts a contiguous `MPI_Get` or `MPI_Put` (by `origin`) of the
    /// origin's elements, of type `ty`, from or to byte `disp` of `target`'s
    /// window.
    ///
    /// # Safety
    /// The origin buffer must be valid for its elements (writable, and
    /// written by nothing else, for a get; readable for a put) and stay so
    /// until the flush.
    unsafe fn transfer(
        &mut self,
        target: usize,
        disp: usize,
        origin: Origin,
        ty: ffi::MPI_Datatype,
    ) -> Result<(), MpiError> {
        let (call, what, count) = match origin {
            Origin::Get(_, count) => ("MPI_Get", "a get length", count),
            Origin::Put(_, count) => ("MPI_Put", "a put length", count),
        };
        let n = int(count, what)?;
        self.pending = true;
        let (t, d, w) = (self.win.target(target), disp as ffi::MPI_Aint, self.win.raw.0);
        // SAFETY: the caller's guarantee on the origin buffer; our window,
        // in its epoch.
        let rc = unsafe {
            match origin {
                Origin::Get(dst, _) => ffi::MPI_Get(dst, n, ty, t, d, n, ty, w),
                Origin::Put(src, _) => ffi::MPI_Put(src, n, ty, t, d, n, ty, w),
            }
        };
        check(call, rc)
    }

    /// `MPI_Put` of the byte runs `(offset, len)` of `src` to the same
    /// offsets from byte `disp` of `target`'s window, and nothing between
    /// them: one call with an hindexed datatype (a contiguous put for one
    /// run).
    pub fn put_runs(
        &mut self,
        target: usize,
        disp: usize,
        src: MemRange<'a>,
        runs: &[(u32, u32)],
    ) -> Result<(), MpiError> {
        if runs.is_empty() {
            return Ok(());
        }
        for &(o, l) in runs {
            assert!(
                o as usize + l as usize <= src.len(),
                "run outside the source range"
            );
        }
        self.pending = true;
        let t = self.win.target(target);
        if let [(o, l)] = runs {
            // SAFETY: the run is inside src (asserted), borrowed until the flush.
            return check("MPI_Put", unsafe {
                ffi::MPI_Put(
                    (src.addr() + *o as usize) as *const c_void,
                    *l as c_int,
                    byte_type(),
                    t,
                    (disp + *o as usize) as ffi::MPI_Aint,
                    *l as c_int,
                    byte_type(),
                    self.win.raw.0,
                )
            });
        }
        let lens: Vec<c_int> = runs.iter().map(|r| r.1 as c_int).collect();
        let offs: Vec<ffi::MPI_Aint> = runs.iter().map(|r| r.0 as ffi::MPI_Aint).collect();
        let n = int(runs.len(), "a run count")?;
        let mut ty = ffi::MPI_Datatype(std::ptr::null_mut());
        // SAFETY: lens and offs have n entries; the type describes runs inside
        // src (asserted) and is freed after the put that uses it is started
        // (MPI keeps what a started operation needs).
        unsafe {
            check(
                "MPI_Type_create_hindexed",
                ffi::MPI_Type_create_hindexed(n, lens.as_ptr(), offs.as_ptr(), byte_type(), &mut ty),
            )?;
            check("MPI_Type_commit", ffi::MPI_Type_commit(&mut ty))?;
            let rc = ffi::MPI_Put(
                src.addr() as *const c_void,
                1,
                ty,
                t,
                disp as ffi::MPI_Aint,
                1,
                ty,
                self.win.raw.0,
            );
            ffi::MPI_Type_free(&mut ty);
            check("MPI_Put", rc)
        }
    }

    /// `MPI_Put` of `src` bytes to byte `disp` of `target`'s window.
    pub fn put_bytes(&mut self, target: usize, disp: usize, src: &'a [u8]) -> Result<(), MpiError> {
        // SAFETY: src is borrowed until the flush.
        unsafe { self.transfer(target, disp, Origin::put_from(src), byte_type()) }
    }

    /// `MPI_Put` of `src` words to byte `disp` of `target`'s window.
    pub fn put_words(&mut self, target: usize, disp: usize, src: &'a [u64]) -> Result<(), MpiError> {
        // SAFETY: src is borrowed until the flush.
        unsafe { self.transfer(target, disp, Origin::put_from(src), u64_type()) }
    }

    /// `MPI_Fetch_and_op(MPI_SUM)` on the word at byte `disp` of `target`'s
    /// window: adds `*v` (wrapping: a decrement is the two's complement);
    /// `old` gets the value before. The operand stays borrowed until the
    /// flush (no allocation: usable from the fault handler).
    pub fn fetch_add(
        &mut self,
        target: usize,
        disp: usize,
        v: &'a u64,
        old: &'a mut u64,
    ) -> Result<(), MpiError> {
        self.pending = true;
        // SAFETY: v and old are borrowed until the flush.
        check("MPI_Fetch_and_op", unsafe {
            ffi::MPI_Fetch_and_op(
                (v as *const u64).cast(),
                (old as *mut u64).cast(),
                u64_type(),
                self.win.target(target),
                disp as ffi::MPI_Aint,
                ffi::RSMPI_SUM,
                self.win.raw.0,
            )
        })
    }

    /// `MPI_Compare_and_swap` on the word at byte `disp` of `target`'s
    /// window: if it equals `*expect`, it becomes `*new`; `old` gets the
    /// value before.
    pub fn compare_swap(
        &mut self,
        target: usize,
        disp: usize,
        expect: &'a u64,
        new: &'a u64,
        old: &'a mut u64,
    ) -> Result<(), MpiError> {
        self.pending = true;
        // SAFETY: the three words are borrowed until the flush.
        check("MPI_Compare_and_swap", unsafe {
            ffi::MPI_Compare_and_swap(
                (new as *const u64).cast(),
                (expect as *const u64).cast(),
                (old as *mut u64).cast(),
                u64_type(),
                self.win.target(target),
                disp as ffi::MPI_Aint,
                self.win.raw.0,
            )
        })
    }

    /// `MPI_Win_flush_all`: every operation of the batch is complete at
    /// origin and target.
    pub fn flush(mut self) -> Result<(), MpiError> {
        self.pending = false;
        // SAFETY: our window, in its lock_all epoch.
        check("MPI_Win_flush_all", unsafe {
            ffi::MPI_Win_flush_all(self.win.raw.0)
        })
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        if self.pending {
            // SAFETY: as in flush(); the borrowed buffers are still alive.
            unsafe { ffi::MPI_Win_flush_all(self.win.raw.0) };
        }
    }
}

/// A thread that calls into MPI's progress engine every `interval`
/// (`MPI_Iprobe` on a private communicator, which never matches), so that
/// one-sided operations targeting this process complete while its own
/// threads compute, and runs a hook (no MPI calls) every round. Stopped
/// and joined on drop (and before `MPI_Finalize` at exit).
pub struct Progress {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts the thread on a duplicate of `comm` (collective); `hook` runs
    /// every round (it must not call MPI).
    pub fn start(
        comm: &Comm,
        interval: Duration,
        mut hook: Box<dyn FnMut() + Send>,
    ) -> Result<Progress, MpiError> {
        let own = comm.dup()?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        PROGRESS_THREADS.fetch_add(1, Ordering::SeqCst);
        // A runtime thread: the application's asynchronous signals (a
        // timer, a process-directed SIGUSR1) never run their handlers on it
        // (they could touch SVM pages while its hook owns some).
        let builder = std::thread::Builder::new().name("tiermem-mpi-progress".into());
        let handle = crate::thread::spawn_with_async_signals_blocked(builder, move || {
            let own = own;
            // Timer slack 1 ns: the default 50 us would double the
            // interval of a short sleep.
            // SAFETY: prctl(PR_SET_TIMERSLACK) on the calling thread.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
            let mut flag: c_int = 0;
            // Relaxed: a flag polled every interval; the join orders the rest.
            while !s.load(Ordering::Relaxed) && !STOP_ALL_PROGRESS.load(Ordering::SeqCst) {
                hook();
                // Relaxed: a hint (see ACTIVE).
                if ACTIVE.load(Ordering::Relaxed) != 0 {
                    std::thread::sleep(interval);
                    continue;
                }
                // SAFETY: a communicator this thread owns; STATUS_IGNORE.
                unsafe {
                    ffi::MPI_Iprobe(
                        ffi::RSMPI_ANY_SOURCE,
                        ffi::RSMPI_ANY_TAG,
                        own.raw.0,
                        &mut flag,
                        ffi::RSMPI_STATUS_IGNORE,
                    )
                };
                std::thread::sleep(interval);
            }
            // MPI_Comm_free is collective: calling it here could pair
            // with another process's unrelated collective. The duplicate
            // is left to MPI_Finalize.
            std::mem::forget(own);
            PROGRESS_THREADS.fetch_sub(1, Ordering::SeqCst);
        })
        .map_err(|_| MpiError::Call {
            call: "spawning the MPI progress thread",
            code: -1,
            msg: "thread creation failed".into(),
        })?;
        Ok(Progress {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
