//! tiermem's own descriptors (the userfaultfd, the far store, pipes,
//! eventfds), kept from the program's bulk closes.
//!
//! A program that closes "every descriptor above 2" (`close_range(3, ~0)`,
//! `closefrom(3)`, a loop over `close`, Python's `os.closerange`: daemons,
//! shells, test harnesses) or `dup2`s onto a number it believes free took
//! them away, and every evicted page came back wrong, silently. So each is
//! moved up to a high number when it is made (out of the way of `dup2` on
//! small numbers and of the lowest-free rule that `open` follows), and
//! marked here; the interposed `close`, `close_range` and `closefrom`
//! (tiermem-interpose) leave marked descriptors open, and `dup2`/`dup3`
//! onto one fail with `EBUSY`. The mark goes before tiermem closes its own.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// Descriptors below this can be marked (higher ones are left unmarked).
const MARKABLE: usize = 1 << 16;
static MARKED: [AtomicU64; MARKABLE / 64] = [const { AtomicU64::new(0) }; MARKABLE / 64];

/// Whether `fd` is one of tiermem's (the interposed `close` leaves it
/// open).
pub fn is_guarded(fd: RawFd) -> bool {
    let Ok(i) = usize::try_from(fd) else { return false };
    i < MARKABLE && MARKED[i / 64].load(Ordering::Relaxed) & (1 << (i % 64)) != 0
}

/// The first guarded descriptor in `[lo, hi]`, if any.
pub fn first_guarded_in(lo: u32, hi: u32) -> Option<u32> {
    let hi = (hi as usize).min(MARKABLE - 1);
    let mut i = lo as usize;
    while i <= hi {
        let word = MARKED[i / 64].load(Ordering::Relaxed) >> (i % 64);
        if word == 0 {
            i = (i / 64 + 1) * 64;
            continue;
        }
        let at = i + word.trailing_zeros() as usize;
        return (at <= hi).then_some(at as u32);
    }
    None
}

fn mark(fd: RawFd, on: bool) {
    let Ok(i) = usize::try_from(fd) else { return };
    if i >= MARKABLE {
        return;
    }
    let bit = 1u64 << (i % 64);
    if on {
        MARKED[i / 64].fetch_or(bit, Ordering::Relaxed);
    } else {
        MARKED[i / 64].fetch_and(!bit, Ordering::Relaxed);
    }
}

/// Where tiermem's descriptors go: the top 128 numbers below the
/// descriptor limit, or below 1024 where the limit is higher (a larger
/// table costs the kernel memory); 3 (no move) where the limit is small.
fn high_floor() -> RawFd {
    // SAFETY: a plain out-parameter.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: getrlimit writes the struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 3;
    }
    let top = lim.rlim_cur.min(1024) as RawFd;
    if top < 256 {
        3
    } else {
        top - 128
    }
}

/// The numbers tiermem's descriptors take, `[low, high)`: what the signal
/// guard's filter (`seccomp`) traps `close`, `close_range`, `dup2` and
/// `dup3` made through the C library's `syscall()` or its internals for.
pub fn window() -> (u32, u32) {
    (high_floor().max(0) as u32, MARKABLE as u32)
}

/// `close_range(lo, hi, flags)` in pieces around tiermem's descriptors,
/// each made by `raw(lo, hi)` (which returns what the system call does).
/// `CLOSE_RANGE_CLOEXEC` alone changes nothing of theirs (they are
/// close-on-exec already).
pub fn close_range_around(lo: u32, hi: u32, flags: u32, raw: &mut dyn FnMut(u32, u32) -> i64) -> i64 {
    if flags & libc::CLOSE_RANGE_CLOEXEC != 0 || lo > hi {
        return raw(lo, hi);
    }
    let mut at = lo;
    while let Some(g) = first_guarded_in(at, hi) {
        if g > at {
            let r = raw(at, g - 1);
            if r != 0 {
                return r;
            }
        }
        if g == hi {
            return 0;
        }
        at = g + 1;
    }
    raw(at, hi)
}

/// One of tiermem's descriptors: moved to a high number and guarded while
/// it lives; closed (unguarded first) on drop.
#[derive(Debug)]
pub struct GuardedFd {
    /// Closed by `drop`, through the trampoline.
    fd: std::mem::ManuallyDrop<OwnedFd>,
}

/// Closes `fd` through the system-call trampoline: the signal guard traps a
/// close from the C library of a number where tiermem's descriptors are,
/// and a trap while SIGSYS is blocked (tiermem closing its own in a SIGSYS
/// handler: the `fork` the guard runs) would end the process.
fn close_untrapped(fd: OwnedFd) {
    use std::os::fd::IntoRawFd;
    let raw = fd.into_raw_fd();
    // SAFETY: closes a descriptor this code owned (moved out of `fd`).
    unsafe { crate::trampoline::untrapped_syscall(libc::SYS_close, [raw as u64, 0, 0, 0, 0, 0]) };
}

impl GuardedFd {
    /// Takes `fd` over: a close-on-exec copy at a high number replaces it
    /// where one is free (else it stays where it is), and is guarded.
    pub fn new(fd: OwnedFd) -> GuardedFd {
        // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own.
        let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, high_floor()) };
        let fd = if high >= 0 {
            // Not the C library's close, a cancellation point: a thread's
            // first fault makes its write-back pipe here, holding a page
            // busy, and a deferred cancel pending then unwound it out of the
            // fault handler (the page stayed busy, every other thread hung).
            close_untrapped(fd);
            // SAFETY: a new descriptor we own.
            unsafe { OwnedFd::from_raw_fd(high) }
        } else {
            fd
        };
        mark(fd.as_raw_fd(), true);
        GuardedFd {
            fd: std::mem::ManuallyDrop::new(fd),
        }
    }

    /// The descriptor, no longer guarded (for a caller that keeps it as a
    /// plain file), moved back below the high numbers where one is free
    /// (its later close then meets no trap).
    pub fn into_owned(self) -> OwnedFd {
        let mut this = std::mem::ManuallyDrop::new(self);
        mark(this.fd.as_raw_fd(), false);
        // SAFETY: `this` is never dropped, so the descriptor is moved out
        // exactly once.
        let fd = unsafe { std::mem::ManuallyDrop::take(&mut this.fd) };
        // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own.
        let low = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
        if low < 0 || low >= fd.as_raw_fd() {
            if low >= 0 {
                // SAFETY: the copy just made, ours.
                close_untrapped(unsafe { OwnedFd::from_raw_fd(low) });
            }
            return fd;
        }
        close_untrapped(fd);
        // SAFETY: the copy just made, ours.
        unsafe { OwnedFd::from_raw_fd(low) }
    }
}

impl Drop for GuardedFd {
    fn drop(&mut self) {
        // Unguarded before it closes.
        mark(self.fd.as_raw_fd(), false);
        // SAFETY: dropped once: the field is not used again.
        close_untrapped(unsafe { std::mem::ManuallyDrop::take(&mut self.fd) });
    }
}

impl AsRawFd for GuardedFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for GuardedFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guarded_descriptor_moves_high_and_is_unguarded_when_handed_out() {
        // SAFETY: a new pipe's descriptors, owned here.
        let (r, w) = unsafe {
            let mut p = [0; 2];
            assert_eq!(libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC), 0);
            (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1]))
        };
        let low = r.as_raw_fd();
        let g = GuardedFd::new(r);
        let fd = g.as_raw_fd();
        assert!(is_guarded(fd) && !is_guarded(low));
        assert!(
            fd >= high_floor() || high_floor() == 3,
            "{fd} below {}",
            high_floor()
        );
        assert_eq!(first_guarded_in(fd as u32, fd as u32), Some(fd as u32));
        // Handed out: unguarded, and moved back down (its close is then
        // never trapped), the same pipe.
        let plain = g.into_owned();
        assert!(!is_guarded(plain.as_raw_fd()));
        if high_floor() > 3 {
            assert!(
                plain.as_raw_fd() < high_floor(),
                "{} moved down",
                plain.as_raw_fd()
            );
        }
        let mut byte = [0u8; 1];
        // SAFETY: one byte through the pipe's two ends, both open.
        unsafe {
            assert_eq!(libc::write(w.as_raw_fd(), b"x".as_ptr().cast(), 1), 1);
            assert_eq!(libc::read(plain.as_raw_fd(), byte.as_mut_ptr().cast(), 1), 1);
        }
        assert_eq!(&byte, b"x");
        drop((plain, w));
    }
}
