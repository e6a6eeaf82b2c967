//! System calls whose buffers come in `iovec`s or message headers
//! (`readv`, `writev`, `preadv`, `pwritev`, `preadv2`, `pwritev2`,
//! `recvmsg`, `sendmsg`, `process_vm_readv`/`writev` for the local side):
//! the kernel-access filter cannot see behind the vector, so these are
//! interposed. On a regular file each buffer is pinned
//! ([`tiermem::pin_buffer`]) for the call, which then runs as the C
//! library's own, in pieces as large as can be pinned. On a pipe, a socket
//! or a device, which may block for long, nothing is pinned: the data goes
//! through a bounce buffer (`tiermem_sys::bounce`), so a thread blocked in
//! `recvmsg` holds nothing another thread's `sendmsg` needs.

use libc::{c_int, iovec, msghdr, ssize_t};
use std::sync::atomic::AtomicUsize;
use tiermem::PinnedBuffer;
use tiermem_sys::bounce::{Bounce, FdKind};

use tiermem_interpose::next;

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
    // Only vectors that touch tiered memory pay for the pinning.
    // SAFETY: forwarded from the caller.
    if !unsafe { touches_tiered(iov, cnt) } {
        return None;
    }
    // SAFETY: the caller's vector.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
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

/// How a vectored call may be split, by what its descriptor is: see
/// `tiermem_sys::seccomp::Split`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Split {
    Whole,
    Once,
    Pieces,
}

/// How a call on `fd` goes when a buffer of its vector is tiered: pinned
/// (a regular file, `None`), or through a bounce buffer split so.
/// `one_call`: the call must not be repeated (a message with ancillary
/// data: a second `sendmsg` would pass its descriptors again, a second
/// `recvmsg` could drop some).
fn bounce_split(
    fd: c_int,
    kernel_writes: bool,
    wait_all: bool,
    one_call: bool,
    total: usize,
) -> Option<Split> {
    match tiermem_sys::bounce::fd_kind(fd) {
        FdKind::File => None,
        FdKind::Messages => Some(Split::Whole),
        _ if one_call => Some(Split::Whole),
        // A device that wants each request and reply in one call
        // (/dev/fuse) gets it, up to a bound on the bounce buffer.
        FdKind::Device if total <= tiermem_sys::bounce::DEVICE_WHOLE_MAX => Some(Split::Whole),
        FdKind::Stream if kernel_writes && !wait_all => Some(Split::Once),
        FdKind::Stream | FdKind::Device => Some(Split::Pieces),
    }
}

/// Copies `n` bytes between `buf` and the vector `v` from `skip` bytes
/// into it: into the vector (`to_vector`) or out of it.
///
/// # Safety
/// `v`'s buffers valid for what is copied; `buf` valid for `n` bytes.
unsafe fn copy_vector(v: &[iovec], mut skip: usize, buf: usize, n: usize, to_vector: bool) {
    let mut at = 0usize;
    for b in v {
        if at >= n {
            break;
        }
        if skip >= b.iov_len {
            skip -= b.iov_len;
            continue;
        }
        let k = (b.iov_len - skip).min(n - at);
        let user = b.iov_base as usize + skip;
        // In without a fault signal, and held for the copy only.
        let _held = tiermem::pin_buffer(user, k, to_vector);
        // SAFETY: inside the caller's buffer and `buf`, by the caller's
        // promise; user-mode copies, so what could not be pinned faults in.
        unsafe {
            if to_vector {
                std::ptr::copy_nonoverlapping((buf + at) as *const u8, user as *mut u8, k);
            } else {
                std::ptr::copy_nonoverlapping(user as *const u8, (buf + at) as *mut u8, k);
            }
        }
        at += k;
        skip = 0;
    }
}

/// Runs a vectored call with its data going through a bounce buffer
/// (`tiermem_sys::bounce`): `call(vector, count, done)` on a one-element
/// vector of plain memory, the data copied from or to the caller's vector
/// in user mode. Nothing of the caller's is held while the call blocks.
///
/// # Safety
/// `v` the caller's valid vector.
unsafe fn bounced(
    v: &[iovec],
    kernel_writes: bool,
    split: Split,
    keeps_pages: bool,
    mut call: impl FnMut(*const iovec, c_int, usize) -> ssize_t,
) -> ssize_t {
    let total: usize = v.iter().map(|b| b.iov_len).sum();
    let want = if split == Split::Whole {
        total
    } else {
        total.min(tiermem_sys::bounce::CHUNK)
    };
    // A buffer the kernel keeps references to after the call
    // (MSG_ZEROCOPY) is nobody else's: a pooled one is refilled by the
    // next call while the data waits to be sent.
    let b = if keeps_pages {
        Bounce::private(want)
    } else {
        Bounce::get(want)
    };
    let Some(b) = b else {
        // SAFETY: errno is thread-local.
        unsafe { *libc::__errno_location() = libc::ENOMEM };
        return -1;
    };
    let mut done = 0usize;
    loop {
        let n = (total - done).min(b.len());
        if !kernel_writes {
            // SAFETY: the caller's vector; the bounce buffer holds `n`.
            unsafe { copy_vector(v, done, b.addr() as usize, n, false) };
        }
        let one = iovec {
            iov_base: b.addr() as *mut libc::c_void,
            iov_len: n,
        };
        let r = call(&one, 1, done);
        if r < 0 {
            return if done > 0 { done as ssize_t } else { r };
        }
        // MSG_TRUNC: a datagram's whole length, maybe more than was taken.
        let got = (r as usize).min(n);
        if kernel_writes {
            // SAFETY: as above, `got <= n` bytes.
            unsafe { copy_vector(v, done, b.addr() as usize, got, true) };
        }
        if split == Split::Whole {
            return r;
        }
        done += got;
        if split != Split::Pieces || got != n || done >= total {
            return done as ssize_t;
        }
    }
}

/// What a socket call asks of the bounce buffer its data may go through.
#[derive(Clone, Copy, Default)]
struct Shape {
    /// All of it is waited for (`MSG_WAITALL`).
    wait_all: bool,
    /// One call only: a message with ancillary data (a second `sendmsg`
    /// would pass its descriptors again), a peek (a second would read the
    /// stream's head again).
    one_call: bool,
    /// The kernel keeps references to the pages after the call
    /// (`MSG_ZEROCOPY`, until the data is acknowledged).
    keeps_pages: bool,
}

/// Runs a vectored call on `iov[..cnt]`: `call(vector, count, done)` makes
/// the call (`done`: bytes already moved, for the file offset of
/// `preadv`/`pwritev`). On a regular file the tiered buffers are pinned for
/// the call, and a vector longer than what can be pinned at once is done
/// in pieces, as one call would have done it whole (through a bounce
/// buffer where nothing can be pinned). On a pipe, a socket or a device,
/// which may block, the data goes through a bounce buffer.
///
/// # Safety
/// `iov` points to `cnt` valid iovecs.
unsafe fn vectored(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    kernel_writes: bool,
    shape: Shape,
    mut call: impl FnMut(*const iovec, c_int, usize) -> ssize_t,
) -> ssize_t {
    // SAFETY: forwarded from the caller.
    if !unsafe { touches_tiered(iov, cnt) } {
        return call(iov, cnt, 0);
    }
    // SAFETY: the caller's vector.
    let all = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    let total: usize = all.iter().map(|b| b.iov_len).sum();
    let one_call = shape.one_call || shape.keeps_pages;
    if let Some(split) = bounce_split(fd, kernel_writes, shape.wait_all, one_call, total) {
        // SAFETY: the caller's vector.
        return unsafe { bounced(all, kernel_writes, split, shape.keeps_pages, call) };
    }
    let mut done = 0usize;
    loop {
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
        let (pins, piece) = match unsafe { pin_all(rest.as_ptr(), rest.len() as c_int, kernel_writes) } {
            Some(p) => p,
            None => (Vec::new(), rest.clone()),
        };
        let want: usize = piece.iter().map(|b| b.iov_len).sum();
        let r = if want == 0 && done < total {
            // Nothing could be pinned: the rest through a bounce buffer.
            drop(pins);
            // SAFETY: `rest` lies inside the caller's buffers.
            let r = unsafe {
                bounced(&rest, kernel_writes, Split::Pieces, false, |v, n, d| {
                    call(v, n, done + d)
                })
            };
            return if r < 0 && done == 0 {
                r
            } else {
                (done + r.max(0) as usize) as ssize_t
            };
        } else {
            call(piece.as_ptr(), piece.len() as c_int, done)
        };
        drop(pins);
        if r < 0 {
            return if done > 0 { done as ssize_t } else { r };
        }
        done += r as usize;
        if (r as usize) < want || done >= total {
            return done as ssize_t;
        }
    }
}

/// Whether a buffer of `iov[..cnt]` lies in tiered memory.
///
/// # Safety
/// `iov` null or pointing to `cnt` valid iovecs.
unsafe fn touches_tiered(iov: *const iovec, cnt: c_int) -> bool {
    let Some(heap) = crate::heap() else { return false };
    if iov.is_null() || cnt <= 0 {
        return false;
    }
    // SAFETY: the caller's vector.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    v.iter()
        .any(|b| heap.contains(b.iov_base as usize) || crate::statics::contains(b.iov_base as usize))
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
            unsafe { vectored(fd, iov, cnt, $w, Shape::default(), |v, n, _| real(fd, v, n)) }
        }
    };
    // The positional forms: the offset moves on by what earlier pieces did,
    // unless it is -1 (preadv2/pwritev2: the file position, which the
    // kernel moves on itself).
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
            let at = |done: usize| if off < 0 { off } else { off + done as libc::off_t };
            // SAFETY: the caller's arguments.
            unsafe { vectored(fd, iov, cnt, $w, Shape::default(), |v, n, done| real(fd, v, n, at(done) $(, $arg)*)) }
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

/// Whether `addr` lies in tiered memory.
fn tiered(addr: usize) -> bool {
    addr != 0 && (crate::heap().is_some_and(|h| h.contains(addr)) || crate::statics::contains(addr))
}

/// `recvmsg`/`sendmsg`: the message's data vector as for `readv`/`writev`;
/// where the header, the address or the ancillary data lie in tiered
/// memory, the kernel gets copies of them in plain memory, copied in user
/// mode (faults served) before a `sendmsg` and back after a `recvmsg`
/// (the descriptors of an `SCM_RIGHTS` message were lost, with
/// `MSG_CTRUNC`, or `sendmsg` failed with `EFAULT`). A message with
/// ancillary data is sent or received in one call.
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
    // SAFETY: a valid header by the caller's promise (a user-mode read:
    // a tiered one faults in).
    let m = unsafe { &mut *msg };
    let (iov, len) = (m.msg_iov, m.msg_iovlen);
    let wait_all = flags & libc::MSG_WAITALL != 0;
    let has_control = !m.msg_control.is_null() && m.msg_controllen > 0;
    let has_name = !m.msg_name.is_null() && m.msg_namelen > 0;
    let side = tiered(msg as usize)
        || (has_control && tiered(m.msg_control as usize))
        || (has_name && tiered(m.msg_name as usize));
    // The header the kernel gets: the caller's, or a copy on this stack.
    let mut copy: msghdr = *m;
    // The kernel's copies (empty where not needed).
    let name_len = if side && has_name {
        m.msg_namelen as usize
    } else {
        0
    };
    let control_len = if side && has_control { m.msg_controllen } else { 0 };
    let mut name_buf = vec![0u8; name_len];
    let mut control_buf = vec![0u8; control_len];
    if side {
        if has_name {
            // SAFETY: the caller's address buffer, msg_namelen bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(m.msg_name as *const u8, name_buf.as_mut_ptr(), name_buf.len())
            };
            copy.msg_name = name_buf.as_mut_ptr().cast();
        }
        if has_control {
            // SAFETY: the caller's control buffer, msg_controllen bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    m.msg_control as *const u8,
                    control_buf.as_mut_ptr(),
                    control_buf.len(),
                )
            };
            copy.msg_control = control_buf.as_mut_ptr().cast();
        }
    }
    let target: *mut msghdr = if side { &mut copy } else { msg };
    // SAFETY: the header's vector; `call` swaps in the vector to pass and
    // restores the caller's (or sets the copy's).
    let r = unsafe {
        vectored(
            fd,
            iov,
            len as c_int,
            kernel_writes,
            Shape {
                wait_all,
                one_call: has_control || flags & libc::MSG_PEEK != 0,
                keeps_pages: !kernel_writes && flags & libc::MSG_ZEROCOPY != 0,
            },
            |v, n, _| {
                (*target).msg_iov = v as *mut iovec;
                (*target).msg_iovlen = n as _;
                let r = real(fd, target, flags);
                (*target).msg_iov = iov;
                (*target).msg_iovlen = len;
                r
            },
        )
    };
    if side && kernel_writes && r >= 0 {
        // What the kernel wrote into the copies, back to the caller's.
        if has_name {
            let n = (copy.msg_namelen as usize).min(name_buf.len());
            // SAFETY: the caller's address buffer holds msg_namelen >= n bytes.
            unsafe { std::ptr::copy_nonoverlapping(name_buf.as_ptr(), m.msg_name as *mut u8, n) };
        }
        if has_control {
            let n = copy.msg_controllen.min(control_buf.len());
            // SAFETY: the caller's control buffer holds msg_controllen >= n bytes.
            unsafe { std::ptr::copy_nonoverlapping(control_buf.as_ptr(), m.msg_control as *mut u8, n) };
        }
        m.msg_namelen = copy.msg_namelen;
        m.msg_controllen = copy.msg_controllen;
        m.msg_flags = copy.msg_flags;
    }
    r
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

/// `vmsplice(2)`. Into a pipe, the kernel keeps references to the pages
/// themselves (no copy): a tiered page would be one tiermem may evict or
/// reuse for other data while the pipe still holds it, and on the
/// in-context path a missing one fails the call with EFAULT. So the data is
/// copied into pages of its own, which are spliced and then left to the
/// pipe; what the reader gets is the data as of the call (without tiermem,
/// a later write by the program could still show). Out of a pipe into
/// tiered memory, the call copies, as `readv` does: through a bounce buffer.
///
/// # Safety
/// As for the C function.
#[no_mangle]
pub unsafe extern "C" fn vmsplice(
    fd: c_int,
    iov: *const iovec,
    nr: libc::c_ulong,
    flags: libc::c_uint,
) -> ssize_t {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let f = next(&NEXT, c"vmsplice");
    // SAFETY: the C library's function of this signature.
    let real: unsafe extern "C" fn(c_int, *const iovec, libc::c_ulong, libc::c_uint) -> ssize_t =
        unsafe { std::mem::transmute(f) };
    // SAFETY: the caller's vector.
    if nr > c_int::MAX as libc::c_ulong || !unsafe { touches_tiered(iov, nr as c_int) } {
        // SAFETY: the caller's arguments.
        return unsafe { real(fd, iov, nr, flags) };
    }
    // SAFETY: the caller's vector.
    let all = unsafe { std::slice::from_raw_parts(iov, nr as usize) };
    // SAFETY: F_GETFL takes no argument.
    let mode = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if mode < 0 || mode & libc::O_ACCMODE == libc::O_RDONLY {
        // Out of the pipe (or a bad descriptor, which the call reports).
        // SAFETY: the caller's vector and arguments.
        return unsafe {
            bounced(all, true, Split::Once, false, |v, n, _| {
                real(fd, v, n as libc::c_ulong, flags)
            })
        };
    }
    let total: usize = all.iter().map(|b| b.iov_len).sum();
    let Some(pages) = Bounce::private(total) else {
        // SAFETY: errno is thread-local.
        unsafe { *libc::__errno_location() = libc::ENOMEM };
        return -1;
    };
    // SAFETY: the caller's vector; `pages` holds `total` bytes.
    unsafe { copy_vector(all, 0, pages.addr() as usize, total, false) };
    let one = iovec {
        iov_base: pages.addr() as *mut libc::c_void,
        iov_len: total,
    };
    // SAFETY: a vector of our own pages, which the pipe keeps (a gift of
    // pages that are ours to give is as good as the program's).
    unsafe { real(fd, &one, 1, flags) }
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
    let raw = |l: *const iovec, ln: usize, r: *const iovec, rn: usize| {
        // SAFETY: the caller's arguments with a local vector of its own
        // buffers or a bounce buffer; these calls are not cancellation
        // points, so the raw system call is the C library's own behaviour.
        unsafe { libc::syscall(nr, pid, l, ln as libc::c_ulong, r, rn as libc::c_ulong, flags) as ssize_t }
    };
    // SAFETY: the caller's local vector.
    if !unsafe { touches_tiered(local, liovcnt as c_int) } {
        return raw(local, liovcnt as usize, remote, riovcnt as usize);
    }
    if local.is_null() || remote.is_null() {
        return raw(local, liovcnt as usize, remote, riovcnt as usize);
    }
    // SAFETY: the caller's vectors (counts checked by the kernel below).
    let (all_local, all_remote) = unsafe {
        (
            std::slice::from_raw_parts(local, liovcnt as usize),
            std::slice::from_raw_parts(remote, riovcnt as usize),
        )
    };
    // The local side is this process's memory and never blocks: pinned,
    // as much as the region lets at once, and the call repeated from where
    // the last one stopped until both vectors are done or the kernel
    // stops short (the remote side: the call's own short count). One call
    // cut where pinning stopped would return a short count the program
    // did not cause, which the kernel never does for a whole element
    // (Open MPI takes it for an error). Through a bounce buffer if nothing
    // could be pinned.
    let mut done = 0usize;
    loop {
        let l = skipped(all_local, done);
        let r = skipped(all_remote, done);
        if l.is_empty() || r.is_empty() {
            // Nothing to move at all still makes the call (it checks the
            // pid and the permission: a probe).
            return if done == 0 {
                raw(local, liovcnt as usize, remote, riovcnt as usize)
            } else {
                done as ssize_t
            };
        }
        // SAFETY: a vector of the caller's buffers.
        let (got, asked) = match unsafe { pin_all(l.as_ptr(), l.len() as c_int, kernel_writes) } {
            Some((_pins, v)) if v.iter().any(|b| b.iov_len > 0) => (
                raw(v.as_ptr(), v.len(), r.as_ptr(), r.len()),
                v.iter().map(|b| b.iov_len).sum::<usize>(),
            ),
            _ => {
                let call = |v: *const iovec, n: c_int, _done: usize| raw(v, n as usize, r.as_ptr(), r.len());
                // SAFETY: the caller's buffers.
                let got = unsafe { bounced(&l, kernel_writes, Split::Whole, false, call) };
                (got, usize::MAX)
            }
        };
        if got < 0 {
            return if done > 0 { done as ssize_t } else { got };
        }
        done += got as usize;
        if got == 0 || (got as usize) < asked {
            return done as ssize_t;
        }
    }
}

/// `v` without its first `skip` bytes (empty elements dropped).
fn skipped(v: &[iovec], mut skip: usize) -> Vec<iovec> {
    let mut out = Vec::with_capacity(v.len());
    for b in v {
        if skip >= b.iov_len {
            skip -= b.iov_len;
            continue;
        }
        out.push(iovec {
            // Pointer arithmetic on an address only: the kernel checks it.
            iov_base: (b.iov_base as usize + skip) as *mut libc::c_void,
            iov_len: b.iov_len - skip,
        });
        skip = 0;
    }
    out
}
