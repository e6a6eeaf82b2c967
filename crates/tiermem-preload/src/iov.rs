//! System calls whose buffers come in `iovec`s or message headers
//! (`readv`, `writev`, `preadv`, `pwritev`, `preadv2`, `pwritev2`,
//! `recvmsg`, `sendmsg`, `process_vm_readv`/`writev` for the local side):
//! the kernel-access filter cannot see behind the vector, so these are
//! interposed: each buffer is pinned ([`tiermem::pin_buffer`]) for the
//! call, which then runs as the C library's own. A buffer that cannot be
//! pinned whole shortens the call there (a short count, which callers of
//! these functions must handle).

use libc::{c_int, iovec, msghdr, ssize_t};
use std::sync::atomic::{AtomicUsize, Ordering};
use tiermem::PinnedBuffer;

/// The C library's function `name`, looked up once.
fn next(cache: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    let mut f = cache.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: RTLD_NEXT with a NUL-terminated name.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        cache.store(f, Ordering::Release);
    }
    f
}

/// Pins the buffers of `iov[..cnt]`; returns the pins and the vector to
/// pass (cut where pinning stopped). None when no buffer is tiered (the
/// call goes through untouched).
///
/// # Safety
/// `iov` points to `cnt` valid iovecs.
unsafe fn pin_all(
    iov: *const iovec,
    cnt: c_int,
    kernel_writes: bool,
) -> Option<(Vec<PinnedBuffer>, Vec<iovec>)> {
    let heap = crate::heap()?;
    if iov.is_null() || cnt <= 0 {
        return None;
    }
    // SAFETY: the caller's vector.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    // Only vectors that touch tiered memory pay for the pinning.
    let tiered =
        |b: &iovec| heap.contains(b.iov_base as usize) || crate::statics::contains(b.iov_base as usize);
    if !v.iter().any(tiered) {
        return None;
    }
    let mut pins = Vec::with_capacity(v.len());
    let mut out = Vec::with_capacity(v.len());
    for b in v {
        let p = tiermem::pin_buffer(b.iov_base as usize, b.iov_len, kernel_writes);
        let ready = p.ready();
        pins.push(p);
        out.push(iovec {
            iov_base: b.iov_base,
            iov_len: ready,
        });
        if ready < b.iov_len {
            break;
        }
    }
    Some((pins, out))
}

/// Runs a vectored call on `iov[..cnt]` with its tiered buffers pinned:
/// `call(vector, count, done)` makes the call (`done`: bytes already
/// moved, for the file offset of `preadv`/`pwritev`). On a regular file a
/// vector longer than what can be pinned at once is done in pieces, as one
/// call would have done it whole; elsewhere the call is shortened.
///
/// # Safety
/// `iov` points to `cnt` valid iovecs.
unsafe fn vectored(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    kernel_writes: bool,
    call: impl Fn(*const iovec, c_int, usize) -> ssize_t,
) -> ssize_t {
    // SAFETY: the caller's vector.
    let Some((pins, first)) = (unsafe { pin_all(iov, cnt, kernel_writes) }) else {
        return call(iov, cnt, 0);
    };
    // SAFETY: the caller's vector.
    let all = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    let total: usize = all.iter().map(|b| b.iov_len).sum();
    let regular = tiermem_sys::file::fd_is_regular(fd);
    let (mut pins, mut piece) = (pins, first);
    let mut done = 0usize;
    loop {
        let want: usize = piece.iter().map(|b| b.iov_len).sum();
        let r = call(piece.as_ptr(), piece.len() as c_int, done);
        drop(pins);
        if r < 0 {
            return if done > 0 { done as ssize_t } else { r };
        }
        done += r as usize;
        if !regular || (r as usize) < want || done >= total {
            return done as ssize_t;
        }
        // The rest of the vector, from `done` bytes in.
        let mut rest: Vec<iovec> = Vec::new();
        let mut skip = done;
        for b in all {
            if skip >= b.iov_len {
                skip -= b.iov_len;
                continue;
            }
            rest.push(iovec {
                // SAFETY: an offset inside the caller's buffer.
                iov_base: unsafe { (b.iov_base as *mut u8).add(skip) }.cast(),
                iov_len: b.iov_len - skip,
            });
            skip = 0;
        }
        // SAFETY: `rest` is a valid vector inside the caller's buffers.
        match unsafe { pin_all(rest.as_ptr(), rest.len() as c_int, kernel_writes) } {
            Some((p, v)) => (pins, piece) = (p, v),
            None => (pins, piece) = (Vec::new(), rest),
        }
    }
}

macro_rules! iov_call {
    // readv/writev: no offset.
    ($(#[$doc:meta])* fn $name:ident = $cname:literal, writes $w:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As for the C function.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let f = next(&NEXT, $cname);
            // SAFETY: the C library's function of this signature.
            let real: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t = unsafe { std::mem::transmute(f) };
            // SAFETY: the caller's arguments.
            unsafe { vectored(fd, iov, cnt, $w, |v, n, _| real(fd, v, n)) }
        }
    };
    // The positional forms: the offset moves on by what earlier pieces did.
    ($(#[$doc:meta])* fn $name:ident(off $(, $arg:ident: $ty:ty)*) = $cname:literal, writes $w:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As for the C function.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, iov: *const iovec, cnt: c_int, off: libc::off_t $(, $arg: $ty)*) -> ssize_t {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let f = next(&NEXT, $cname);
            type Real = unsafe extern "C" fn(c_int, *const iovec, c_int, libc::off_t $(, $ty)*) -> ssize_t;
            // SAFETY: the C library's function of this signature.
            let real: Real = unsafe { std::mem::transmute(f) };
            // SAFETY: the caller's arguments.
            unsafe { vectored(fd, iov, cnt, $w, |v, n, done| real(fd, v, n, off + done as libc::off_t $(, $arg)*)) }
        }
    };
}

iov_call!(
    /// `readv(2)`.
    fn readv = c"readv", writes true
);
iov_call!(
    /// `writev(2)`.
    fn writev = c"writev", writes false
);
iov_call!(
    /// `preadv(2)`.
    fn preadv(off) = c"preadv", writes true
);
iov_call!(
    /// `pwritev(2)`.
    fn pwritev(off) = c"pwritev", writes false
);
iov_call!(
    /// `preadv2(2)`.
    fn preadv2(off, flags: c_int) = c"preadv2", writes true
);
iov_call!(
    /// `pwritev2(2)`.
    fn pwritev2(off, flags: c_int) = c"pwritev2", writes false
);

/// `recvmsg`/`sendmsg`: the message's data vector.
///
/// # Safety
/// `msg` valid (or null).
unsafe fn msg_call(
    cache: &AtomicUsize,
    name: &std::ffi::CStr,
    fd: c_int,
    msg: *mut msghdr,
    flags: c_int,
    kernel_writes: bool,
) -> ssize_t {
    let f = next(cache, name);
    // SAFETY: the C library's recvmsg/sendmsg.
    let real: unsafe extern "C" fn(c_int, *mut msghdr, c_int) -> ssize_t = unsafe { std::mem::transmute(f) };
    if msg.is_null() {
        // SAFETY: forwarded; the C library reports EFAULT.
        return unsafe { real(fd, msg, flags) };
    }
    // SAFETY: a valid header by the caller's promise.
    let m = unsafe { &mut *msg };
    // SAFETY: the header's vector.
    match unsafe { pin_all(m.msg_iov, m.msg_iovlen as c_int, kernel_writes) } {
        Some((_pins, mut v)) => {
            let (iov, len) = (m.msg_iov, m.msg_iovlen);
            m.msg_iov = v.as_mut_ptr();
            m.msg_iovlen = v.len() as _;
            // SAFETY: the caller's header with a vector of pinned buffers.
            let r = unsafe { real(fd, msg, flags) };
            m.msg_iov = iov;
            m.msg_iovlen = len;
            r
        }
        // SAFETY: forwarded untouched.
        None => unsafe { real(fd, msg, flags) },
    }
}

/// `recvmsg(2)`.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    // SAFETY: forwarded.
    unsafe { msg_call(&NEXT, c"recvmsg", fd, msg, flags, true) }
}

/// `sendmsg(2)`.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    // SAFETY: forwarded (sendmsg does not write the header; msg_call
    // restores the fields it swaps).
    unsafe { msg_call(&NEXT, c"sendmsg", fd, msg as *mut msghdr, flags, false) }
}

macro_rules! vm_call {
    ($(#[$doc:meta])* fn $name:ident = $nr:expr, writes $w:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As for the C function.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            pid: libc::pid_t,
            local: *const iovec,
            liovcnt: libc::c_ulong,
            remote: *const iovec,
            riovcnt: libc::c_ulong,
            flags: libc::c_ulong,
        ) -> ssize_t {
            // SAFETY: forwarded.
            unsafe { vm_call($nr, pid, local, liovcnt, remote, riovcnt, flags, $w) }
        }
    };
}

vm_call!(
    /// `process_vm_readv(2)`: the local vector is written by the kernel.
    fn process_vm_readv = libc::SYS_process_vm_readv, writes true
);
vm_call!(
    /// `process_vm_writev(2)`: the local vector is read by the kernel.
    fn process_vm_writev = libc::SYS_process_vm_writev, writes false
);

/// # Safety
/// As for the C functions.
#[allow(clippy::too_many_arguments)]
unsafe fn vm_call(
    nr: libc::c_long,
    pid: libc::pid_t,
    local: *const iovec,
    liovcnt: libc::c_ulong,
    remote: *const iovec,
    riovcnt: libc::c_ulong,
    flags: libc::c_ulong,
    kernel_writes: bool,
) -> ssize_t {
    // SAFETY: the caller's local vector.
    let (l, n) = match unsafe { pin_all(local, liovcnt as c_int, kernel_writes) } {
        Some((pins, v)) => (Some((pins, v)), 0),
        None => (None, liovcnt),
    };
    let (ptr, cnt) = match &l {
        Some((_, v)) => (v.as_ptr(), v.len() as libc::c_ulong),
        None => (local, n),
    };
    // SAFETY: the caller's arguments with a pinned local vector; these
    // calls are not cancellation points, so the raw system call is the
    // C library's own behaviour.
    let r = unsafe { libc::syscall(nr, pid, ptr, cnt, remote, riovcnt, flags) } as ssize_t;
    drop(l);
    r
}
