//! Bounce buffers: plain memory that a system call on a pipe, a socket or
//! a device reads or writes in place of a tiered buffer, with the data
//! copied between the two in user mode, where a fault on a tiered page is
//! served like any other.
//!
//! Pinning the tiered pages for such a call instead would hold them for as
//! long as it blocks: a thread waiting in `recv` would keep its pins, and
//! with them part of the budget, while another thread's `send` waits for
//! pins of its own (issue 30.3). A bounced call holds nothing but its
//! buffer, and a `siglongjmp` out of it loses nothing but that buffer's
//! slot (taken back at the thread's next call from a shallower frame).
//!
//! Buffers come from a pool of [`SLOTS`] mappings of [`CHUNK`] bytes, made
//! on first use and kept; a call that needs more (a datagram larger than a
//! chunk), or finds every slot taken, gets a mapping of its own for the
//! call. Everything here is async-signal-safe: the kernel-access trap runs
//! it in its SIGSYS handler.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bytes a pooled buffer holds: what a pipe or stream-socket call moves at
/// once through a bounce buffer.
pub const CHUNK: usize = 256 << 10;

/// Bytes up to which a call on a device goes in one call, through a
/// buffer of its own size: a device may want each request and reply whole
/// (`/dev/fuse`, whose largest request is 1 MiB and a page).
pub const DEVICE_WHOLE_MAX: usize = 16 << 20;

/// Pooled buffers.
const SLOTS: usize = 64;

struct Slot {
    /// The mapping (0: not made yet).
    addr: AtomicUsize,
    /// The thread holding it (0: free).
    tid: AtomicU64,
    /// The stack pointer of the frame holding it: a frame deeper than the
    /// thread's current one is gone (left by `siglongjmp`).
    sp: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    addr: AtomicUsize::new(0),
    tid: AtomicU64::new(0),
    sp: AtomicUsize::new(0),
};
static POOL: [Slot; SLOTS] = [FREE; SLOTS];

/// A bounce buffer of at least the length asked for; given back on drop.
pub struct Bounce {
    addr: usize,
    len: usize,
    /// The pool slot, or None for a mapping of its own.
    slot: Option<usize>,
}

fn stack_pointer() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

fn map(len: usize) -> Option<usize> {
    // SAFETY: a fresh private anonymous mapping; the kernel picks the place.
    let p = unsafe {
        crate::raw::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as usize)
}

impl Bounce {
    /// A buffer of `len` bytes or more. None when no memory can be mapped.
    ///
    /// A thread holds one pooled buffer per frame: one it took in the same
    /// frame or a deeper one and still holds is taken to be left behind
    /// (by `siglongjmp`) and handed out again. A signal handler that runs
    /// while the thread holds one runs deeper, and gets another.
    pub fn get(len: usize) -> Option<Bounce> {
        if len <= CHUNK {
            if let Some(b) = Bounce::pooled() {
                return Some(b);
            }
        }
        Bounce::private(len)
    }

    /// A buffer of `len` bytes or more that is nobody else's, ever: for a
    /// call that keeps references to the pages after it returns
    /// (`vmsplice` into a pipe). Its mapping goes on drop; the pages live
    /// on as long as the kernel holds them.
    pub fn private(len: usize) -> Option<Bounce> {
        let len = len.max(1);
        Some(Bounce {
            addr: map(len)?,
            len,
            slot: None,
        })
    }

    fn pooled() -> Option<Bounce> {
        let tid = u64::from(crate::thread::gettid());
        let sp = stack_pointer();
        for (i, s) in POOL.iter().enumerate() {
            let held = s.tid.load(Ordering::Acquire);
            // This thread's slot from a frame no shallower than this one:
            // that frame was left without giving it back (a live one would
            // be an outer frame, higher up the stack).
            let stale = held == tid && s.sp.load(Ordering::Relaxed) <= sp;
            if held != 0 && !stale {
                continue;
            }
            // Acquire: the mapping made by the slot's last holder.
            if s.tid
                .compare_exchange(held, tid, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            s.sp.store(sp, Ordering::Relaxed);
            let mut addr = s.addr.load(Ordering::Relaxed);
            if addr == 0 {
                match map(CHUNK) {
                    Some(a) => {
                        addr = a;
                        s.addr.store(a, Ordering::Relaxed);
                    }
                    None => {
                        s.tid.store(0, Ordering::Release);
                        return None;
                    }
                }
            }
            return Some(Bounce {
                addr,
                len: CHUNK,
                slot: Some(i),
            });
        }
        None
    }

    /// Its address, for a system call's argument.
    pub fn addr(&self) -> u64 {
        self.addr as u64
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Copies `n` bytes from `src` into the buffer at `at`, in user mode
    /// (faults on tiered pages are served as the program's own would be).
    ///
    /// # Safety
    /// `src..src + n` readable memory; `at + n` at most [`Bounce::len`].
    pub unsafe fn load_at(&mut self, at: usize, src: usize, n: usize) {
        assert!(at.checked_add(n).is_some_and(|e| e <= self.len));
        // SAFETY: by the caller's promise; in the buffer (checked), which
        // is ours and disjoint.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, (self.addr + at) as *mut u8, n) };
    }

    /// Copies `n` bytes of the buffer at `at` to `dst`, in user mode.
    ///
    /// # Safety
    /// `dst..dst + n` writable memory; `at + n` at most [`Bounce::len`].
    pub unsafe fn store_at(&self, at: usize, dst: usize, n: usize) {
        assert!(at.checked_add(n).is_some_and(|e| e <= self.len));
        // SAFETY: by the caller's promise; in the buffer (checked).
        unsafe { std::ptr::copy_nonoverlapping((self.addr + at) as *const u8, dst as *mut u8, n) };
    }
}

impl Drop for Bounce {
    fn drop(&mut self) {
        match self.slot {
            // Release: our writes to the buffer before the next holder's.
            Some(i) => POOL[i].tid.store(0, Ordering::Release),
            // SAFETY: the mapping made for this buffer alone.
            None => unsafe {
                crate::raw::munmap(self.addr as *mut libc::c_void, self.len);
            },
        }
    }
}

/// What a descriptor is, for how a call on it may be split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdKind {
    /// A regular file or a block device: the same bytes in several calls
    /// as in one, and no wait on another process.
    File,
    /// A pipe or a stream socket: a call may block for as long as another
    /// thread or process likes; a shorter read is as good as a longer one.
    Stream,
    /// A character device (a terminal, `/dev/zero`, `/dev/urandom`): a
    /// call may block (a terminal), but programs expect a read of
    /// `/dev/urandom` to come back whole.
    Device,
    /// A socket that keeps message boundaries (datagram, sequenced packet,
    /// raw): one message, one call, whatever its size.
    Messages,
}

/// The kind of `fd` (a plain `fstat`, and `getsockopt` for a socket;
/// async-signal-safe). An invalid descriptor is a [`FdKind::Stream`]: the
/// call then fails as it would have.
pub fn fd_kind(fd: i32) -> FdKind {
    // SAFETY: a zeroed stat is a valid out-parameter; fstat only writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: any fd value is safe to pass; the kernel checks it.
    // Untrapped: this runs in the kernel-access trap's handler, and `st`
    // may lie on a tiered stack (the trap's `fstat` rule).
    if unsafe {
        crate::trampoline::untrapped_syscall(
            libc::SYS_fstat,
            [fd as u64, &mut st as *mut _ as u64, 0, 0, 0, 0],
        )
    } != 0
    {
        return FdKind::Stream;
    }
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG | libc::S_IFBLK => FdKind::File,
        libc::S_IFCHR => FdKind::Device,
        libc::S_IFSOCK => {
            let mut ty: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: valid out-parameters of the sizes given.
            let r = unsafe {
                crate::trampoline::untrapped_syscall(
                    libc::SYS_getsockopt,
                    [
                        fd as u64,
                        libc::SOL_SOCKET as u64,
                        libc::SO_TYPE as u64,
                        &mut ty as *mut libc::c_int as u64,
                        &mut len as *mut libc::socklen_t as u64,
                        0,
                    ],
                )
            };
            if r == 0 && ty != libc::SOCK_STREAM {
                FdKind::Messages
            } else {
                FdKind::Stream
            }
        }
        _ => FdKind::Stream,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_buffers_are_reused_and_large_ones_mapped_alone() {
        std::thread::spawn(|| {
            let a = Bounce::get(100).unwrap();
            assert_eq!(a.len(), CHUNK);
            #[inline(never)]
            fn deeper(outer: u64) {
                let pad = [0u8; 4096];
                std::hint::black_box(&pad);
                // A handler running while the outer frame holds one.
                let b = Bounce::get(CHUNK).unwrap();
                assert_ne!(b.addr(), outer);
            }
            deeper(a.addr());
            drop(a);
            let big = Bounce::get(CHUNK + 1).unwrap();
            assert!(big.len() > CHUNK && big.slot.is_none());
            drop(big);
            let mut c = Bounce::get(8).unwrap();
            assert!(c.slot.is_some());
            let src = [7u8; 8];
            let mut dst = [0u8; 8];
            // SAFETY: both arrays are 8 bytes.
            unsafe {
                c.load_at(0, src.as_ptr() as usize, 8);
                c.store_at(0, dst.as_mut_ptr() as usize, 8);
            }
            assert_eq!(dst, src);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_slot_left_by_a_deeper_frame_is_taken_back() {
        std::thread::spawn(|| {
            #[inline(never)]
            fn deeper() -> usize {
                let pad = [0u8; 4096];
                std::hint::black_box(&pad);
                let b = Bounce::get(1).unwrap();
                let addr = b.addr() as usize;
                std::mem::forget(b); // as siglongjmp would leave it
                addr
            }
            let lost = deeper();
            // Every other slot taken by other threads' frames would not be
            // reclaimed; this thread's lost one is.
            let held: Vec<Bounce> = (0..SLOTS).filter_map(|_| Bounce::get(1)).collect();
            assert!(held.iter().any(|b| b.addr() as usize == lost));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn descriptors_are_told_apart() {
        let mut fds = [0; 2];
        // SAFETY: valid out-arrays.
        unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            assert_eq!(fd_kind(fds[0]), FdKind::Stream);
            libc::close(fds[0]);
            libc::close(fds[1]);
            assert_eq!(
                libc::socketpair(libc::AF_UNIX, libc::SOCK_DGRAM, 0, fds.as_mut_ptr()),
                0
            );
            assert_eq!(fd_kind(fds[0]), FdKind::Messages);
            libc::close(fds[0]);
            libc::close(fds[1]);
            assert_eq!(
                libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()),
                0
            );
            assert_eq!(fd_kind(fds[0]), FdKind::Stream);
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        let z = std::fs::File::open("/dev/zero").unwrap();
        assert_eq!(fd_kind(std::os::fd::AsRawFd::as_raw_fd(&z)), FdKind::Device);
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        assert_eq!(fd_kind(std::os::fd::AsRawFd::as_raw_fd(&f)), FdKind::File);
    }
}
