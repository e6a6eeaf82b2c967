//! userfaultfd: open, feature handshake, registration and the resolving
//! ioctls (COPY, ZEROPAGE, WAKE, WRITEPROTECT, MOVE, CONTINUE, POISON).
//!
//! ```no_run
//! use tiermem_sys::mm::{Mapping, MapOptions};
//! use tiermem_sys::uffd::{Features, RegisterMode, Uffd, UffdOptions, CopyMode};
//! let (region, _) = Mapping::anonymous(1 << 20, &MapOptions::default()).unwrap();
//! let uffd = Uffd::open(&UffdOptions { required: Features::SIGBUS, ..Default::default() }).unwrap();
//! let reg = uffd.register(&region, RegisterMode::MISSING).unwrap();
//! let page = [7u8; 4096];
//! uffd.copy(&reg, 0, tiermem_sys::mm::MemRange::from_bytes(&page), CopyMode::default()).unwrap();
//! ```
//!
//! Kernel quirks handled here:
//! - `UFFDIO_API` may be issued once per descriptor, so [`Features::probe`]
//!   opens a throw-away descriptor.
//! - The resolving ioctls report a partial result in the struct (`copy`,
//!   `zeropage`, ...), as a signed byte count or a negative errno; a cast to
//!   unsigned would scramble `-EAGAIN` (Firecracker's uffd example explains
//!   the bug), so [`Resolved`] keeps the distinctions.
//! - Every resolving ioctl answers `EAGAIN` while the address space is
//!   changing under a non-cooperative event; callers retry.

use crate::errno::{check, check_size, Errno};
use crate::fdguard::GuardedFd;
use crate::mm::{Mapping, MemRange};
use crate::uapi;
use bitflags::bitflags;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use thiserror::Error;

mod moves;
#[cfg(test)]
mod tests;

bitflags! {
    /// `UFFD_FEATURE_*` bits. Unknown kernel bits are kept.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct Features: u64 {
        /// Write-protect faults are reported (`PAGEFAULT_FLAG_WP`).
        const PAGEFAULT_FLAG_WP = 1 << 0;
        /// fork events.
        const EVENT_FORK = 1 << 1;
        /// mremap events.
        const EVENT_REMAP = 1 << 2;
        /// madvise(DONTNEED/REMOVE) events.
        const EVENT_REMOVE = 1 << 3;
        /// Missing faults on hugetlbfs.
        const MISSING_HUGETLBFS = 1 << 4;
        /// Missing faults on shmem.
        const MISSING_SHMEM = 1 << 5;
        /// munmap events.
        const EVENT_UNMAP = 1 << 6;
        /// Faults raise SIGBUS in the faulting thread instead of queueing a message.
        const SIGBUS = 1 << 7;
        /// Messages carry the faulting thread's id.
        const THREAD_ID = 1 << 8;
        /// Minor faults on hugetlbfs.
        const MINOR_HUGETLBFS = 1 << 9;
        /// Minor faults on shmem.
        const MINOR_SHMEM = 1 << 10;
        /// Exact (unmasked) fault addresses.
        const EXACT_ADDRESS = 1 << 11;
        /// Write protection on hugetlbfs and shmem.
        const WP_HUGETLBFS_SHMEM = 1 << 12;
        /// Write protection of unpopulated ptes.
        const WP_UNPOPULATED = 1 << 13;
        /// UFFDIO_POISON.
        const POISON = 1 << 14;
        /// Asynchronous write protection: writes resolve in the kernel.
        const WP_ASYNC = 1 << 15;
        /// UFFDIO_MOVE.
        const MOVE = 1 << 16;
        const _ = !0;
    }
}

impl Features {
    /// Every feature this kernel supports (a throw-away `UFFDIO_API` handshake).
    pub fn probe() -> Result<Features, UffdError> {
        let fd = open_raw(false)?;
        let api = api(fd.as_fd(), Features::empty())?;
        Ok(Features::from_bits_retain(api.features))
    }

    /// Names of the set bits, for messages.
    pub fn names(self) -> String {
        let v: Vec<&str> = self.iter_names().map(|(n, _)| n).collect();
        if v.is_empty() {
            "(none)".to_owned()
        } else {
            v.join(", ")
        }
    }
}

bitflags! {
    /// Ioctls a registration supports (`uffdio_register.ioctls`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct Ioctls: u64 {
        /// UFFDIO_REGISTER
        const REGISTER = 1 << uapi::NR_REGISTER;
        /// UFFDIO_UNREGISTER
        const UNREGISTER = 1 << uapi::NR_UNREGISTER;
        /// UFFDIO_WAKE
        const WAKE = 1 << uapi::NR_WAKE;
        /// UFFDIO_COPY
        const COPY = 1 << uapi::NR_COPY;
        /// UFFDIO_ZEROPAGE
        const ZEROPAGE = 1 << uapi::NR_ZEROPAGE;
        /// UFFDIO_MOVE
        const MOVE = 1 << uapi::NR_MOVE;
        /// UFFDIO_WRITEPROTECT
        const WRITEPROTECT = 1 << uapi::NR_WRITEPROTECT;
        /// UFFDIO_CONTINUE
        const CONTINUE = 1 << uapi::NR_CONTINUE;
        /// UFFDIO_POISON
        const POISON = 1 << uapi::NR_POISON;
        /// UFFDIO_API
        const API = 1 << uapi::NR_API;
        const _ = !0;
    }
}

bitflags! {
    /// `UFFDIO_REGISTER_MODE_*`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct RegisterMode: u64 {
        /// Faults on missing pages.
        const MISSING = uapi::UFFDIO_REGISTER_MODE_MISSING;
        /// Write-protect faults.
        const WP = uapi::UFFDIO_REGISTER_MODE_WP;
        /// Minor faults (page in the page cache but not mapped).
        const MINOR = uapi::UFFDIO_REGISTER_MODE_MINOR;
    }
}

/// Errors of userfaultfd operations, named after the operation.
#[derive(Debug, Error)]
pub enum UffdError {
    /// Neither `/dev/userfaultfd` nor the syscall gave a descriptor.
    #[error(
        "cannot open a userfaultfd: /dev/userfaultfd: {dev}; userfaultfd(2): {syscall}. \
         Run as root, give access to /dev/userfaultfd, or set vm.unprivileged_userfaultfd=1"
    )]
    Open {
        /// Error from `/dev/userfaultfd`.
        dev: Errno,
        /// Error from the syscall.
        syscall: Errno,
    },
    /// The `UFFDIO_API` handshake failed.
    #[error("UFFDIO_API handshake failed: {0}")]
    Api(Errno),
    /// The kernel lacks features tiermem needs.
    #[error("this kernel's userfaultfd lacks {}: tiermem needs Linux 6.8 or later for all of them", .missing.names())]
    MissingFeatures {
        /// The features asked for and not offered.
        missing: Features,
    },
    /// Registering a range failed.
    #[error("UFFDIO_REGISTER of {len} bytes at {start:#x} ({mode:?}) failed: {errno}")]
    Register {
        /// Start address.
        start: usize,
        /// Length.
        len: usize,
        /// Modes asked for.
        mode: RegisterMode,
        /// What the kernel said.
        errno: Errno,
    },
    /// The registration does not offer an ioctl the caller needs.
    #[error("registered range does not support {0:?}")]
    IoctlUnsupported(Ioctls),
    /// A resolving ioctl failed.
    #[error("{op} at {addr:#x} (+{len}) failed: {errno}")]
    Ioctl {
        /// Which ioctl.
        op: &'static str,
        /// Destination address.
        addr: usize,
        /// Length.
        len: usize,
        /// What the kernel said.
        errno: Errno,
    },
    /// Reading events failed.
    #[error("reading userfaultfd events failed: {0}")]
    Read(Errno),
}

impl UffdError {
    /// The errno behind an ioctl failure, if any.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            UffdError::Ioctl { errno, .. }
            | UffdError::Register { errno, .. }
            | UffdError::Api(errno)
            | UffdError::Read(errno) => Some(*errno),
            _ => None,
        }
    }
}

/// How the descriptor is opened.
#[derive(Clone, Copy, Debug, Default)]
pub struct UffdOptions {
    /// Features that must be present (error otherwise).
    pub required: Features,
    /// Features enabled if the kernel has them.
    pub optional: Features,
    /// `O_NONBLOCK` on the descriptor (for a poll-driven handler thread).
    pub nonblocking: bool,
}

/// An open, initialised userfaultfd.
#[derive(Debug)]
pub struct Uffd {
    fd: GuardedFd,
    features: Features,
}

/// Proof that a mapping's whole range is registered with a [`Uffd`], and the
/// ioctls the kernel offers on it. Only [`Uffd::register`] creates one.
#[derive(Debug)]
pub struct Registration {
    start: usize,
    len: usize,
    page_size: usize,
    mode: RegisterMode,
    ioctls: Ioctls,
}

impl Registration {
    /// Start address.
    pub fn start(&self) -> usize {
        self.start
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }
    /// Registered modes.
    pub fn mode(&self) -> RegisterMode {
        self.mode
    }
    /// Ioctls available on the range.
    pub fn ioctls(&self) -> Ioctls {
        self.ioctls
    }
    fn addr(&self, offset: usize, len: usize) -> usize {
        assert!(
            offset <= self.len && len <= self.len - offset,
            "range {offset}+{len} outside the registration of {} bytes",
            self.len
        );
        debug_assert!(offset.is_multiple_of(self.page_size) && len.is_multiple_of(self.page_size));
        self.start + offset
    }
}

/// Mode bits for [`Uffd::copy`].
#[derive(Clone, Copy, Debug, Default)]
pub struct CopyMode {
    /// Install the page write-protected (`UFFDIO_COPY_MODE_WP`).
    pub write_protect: bool,
    /// Do not wake waiting threads.
    pub dont_wake: bool,
}

/// The outcome of a resolving ioctl that can partly succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// The whole range was resolved.
    Done,
    /// The range (or its start) was already mapped (`EEXIST`): someone else
    /// resolved it.
    AlreadyMapped,
    /// Only `bytes` were done before the kernel asked for a retry (`EAGAIN`).
    Partial {
        /// Bytes resolved.
        bytes: usize,
    },
}

/// A page fault read from the descriptor (handler-thread mode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultEvent {
    /// Faulting address (page aligned unless EXACT_ADDRESS).
    pub address: usize,
    /// The access was a write.
    pub write: bool,
    /// A write-protect fault (the page is present).
    pub wp: bool,
    /// A minor fault.
    pub minor: bool,
    /// Faulting thread id (0 without THREAD_ID).
    pub tid: u32,
}

fn open_raw(nonblocking: bool) -> Result<OwnedFd, UffdError> {
    let flags = libc::O_CLOEXEC | if nonblocking { libc::O_NONBLOCK } else { 0 };
    let dev = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/userfaultfd")
    {
        Ok(dev) => {
            // SAFETY: USERFAULTFD_IOC_NEW takes the open flags as its argument.
            let r = unsafe { libc::ioctl(dev.as_raw_fd(), uapi::USERFAULTFD_IOC_NEW as _, flags) };
            match check(r) {
                // SAFETY: the kernel returned a new descriptor that we own.
                Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
                Err(e) => e,
            }
        }
        Err(e) => Errno(e.raw_os_error().unwrap_or(libc::ENOENT)),
    };
    // SAFETY: the userfaultfd syscall takes only flags.
    let r = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) } as libc::c_int;
    match check(r) {
        // SAFETY: new descriptor owned by us.
        Ok(fd) => Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
        Err(syscall) => Err(UffdError::Open { dev, syscall }),
    }
}

fn api(fd: BorrowedFd<'_>, features: Features) -> Result<uapi::UffdioApi, UffdError> {
    let mut a = uapi::UffdioApi {
        api: uapi::UFFD_API,
        features: features.bits(),
        ioctls: 0,
    };
    // SAFETY: UFFDIO_API reads and writes a struct uffdio_api we own.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), uapi::UFFDIO_API as _, &mut a) }).map_err(UffdError::Api)?;
    Ok(a)
}

impl Uffd {
    /// Opens a userfaultfd and enables `required` plus whatever of `optional`
    /// the kernel has. Fails naming the missing required features.
    pub fn open(opts: &UffdOptions) -> Result<Uffd, UffdError> {
        let available = Features::probe()?;
        let missing = opts.required - available;
        if !missing.is_empty() {
            return Err(UffdError::MissingFeatures { missing });
        }
        let mut want = opts.required | (opts.optional & available);
        // The kernel turns WP_UNPOPULATED on with WP_ASYNC; ask for it so that
        // `features()` tells the truth.
        if want.contains(Features::WP_ASYNC) {
            want |= Features::WP_UNPOPULATED & available;
        }
        let fd = open_raw(opts.nonblocking)?;
        // UFFDIO_API answers with every feature the kernel has, not the
        // ones enabled: those are `want`.
        api(fd.as_fd(), want)?;
        Ok(Uffd {
            fd: GuardedFd::new(fd),
            features: want,
        })
    }

    /// The features enabled on this descriptor.
    pub fn features(&self) -> Features {
        self.features
    }

    /// Registers the whole of `map`.
    pub fn register(&self, map: &Mapping, mode: RegisterMode) -> Result<Registration, UffdError> {
        let mut r = uapi::UffdioRegister {
            range: uapi::UffdioRange::new(map.addr(), map.len()),
            mode: mode.bits(),
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads/writes a struct we own; the range is
        // our live mapping.
        check(unsafe { libc::ioctl(self.fd.as_raw_fd(), uapi::UFFDIO_REGISTER as _, &mut r) }).map_err(
            |errno| UffdError::Register {
                start: map.addr(),
                len: map.len(),
                mode,
                errno,
            },
        )?;
        Ok(Registration {
            start: map.addr(),
            len: map.len(),
            page_size: map.page_size(),
            mode,
            ioctls: Ioctls::from_bits_retain(r.ioctls),
        })
    }

    /// Unregisters a range; waiting threads are woken and fault normally.
    pub fn unregister(&self, reg: Registration) -> Result<(), UffdError> {
        let mut r = uapi::UffdioRange::new(reg.start, reg.len);
        // SAFETY: reads a struct we own.
        check(unsafe { libc::ioctl(self.fd.as_raw_fd(), uapi::UFFDIO_UNREGISTER as _, &mut r) })
            .map(|_| ())
            .map_err(|errno| UffdError::Ioctl {
                op: "UFFDIO_UNREGISTER",
                addr: reg.start,
                len: reg.len,
                errno,
            })
    }

    /// Resolves missing pages at `offset` by copying `src` (`UFFDIO_COPY`).
    pub fn copy(
        &self,
        reg: &Registration,
        offset: usize,
        src: MemRange<'_>,
        mode: CopyMode,
    ) -> Result<Resolved, UffdError> {
        let dst = reg.addr(offset, src.len());
        let mut c = uapi::UffdioCopy {
            dst: dst as u64,
            src: src.addr() as u64,
            len: src.len() as u64,
            mode: bit(mode.write_protect, uapi::UFFDIO_COPY_MODE_WP)
                | bit(mode.dont_wake, uapi::UFFDIO_COPY_MODE_DONTWAKE),
            copy: 0,
        };
        // SAFETY: the struct is ours; dst lies in a range registered with this
        // descriptor (the kernel only fills missing ptes there) and src is
        // readable for the borrow's lifetime.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), uapi::UFFDIO_COPY as _, &mut c) };
        resolved("UFFDIO_COPY", dst, src.len(), r, c.copy)
    }

    /// Maps the shared zero page at missing pages (`UFFDIO_ZEROPAGE`).
    pub fn zeropage(
        &self,
        reg: &Registration,
        offset: usize,
        len: usize,
        dont_wake: bool,
    ) -> Result<Resolved, UffdError> {
        let mode = bit(dont_wake, uapi::UFFDIO_ZEROPAGE_MODE_DONTWAKE);
        self.range_op(
            "UFFDIO_ZEROPAGE",
            uapi::UFFDIO_ZEROPAGE,
            reg.addr(offset, len),
            len,
            mode,
        )
    }

    /// Wakes threads waiting on a range (`UFFDIO_WAKE`).
    pub fn wake(&self, reg: &Registration, offset: usize, len: usize) -> Result<(), UffdError> {
        let dst = reg.addr(offset, len);
        let mut w = uapi::UffdioRange::new(dst, len);
        // SAFETY: struct ours.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), uapi::UFFDIO_WAKE as _, &mut w) };
        check(r).map(|_| ()).map_err(|errno| UffdError::Ioctl {
            op: "UFFDIO_WAKE",
            addr: dst,
            len,
            errno,
        })
    }

    /// Sets (`protect`) or clears write protection on present pages
    /// (`UFFDIO_WRITEPROTECT`). Setting it flushes the TLB of every CPU that
    /// runs this address space; clearing it does not. `dont_wake` applies to
    /// clearing only: the kernel rejects `MODE_WP | MODE_DONTWAKE`, and setting
    /// protection wakes nobody anyway.
    pub fn writeprotect(
        &self,
        reg: &Registration,
        offset: usize,
        len: usize,
        protect: bool,
        dont_wake: bool,
    ) -> Result<(), UffdError> {
        let dst = reg.addr(offset, len);
        let mode = if protect {
            uapi::UFFDIO_WRITEPROTECT_MODE_WP
        } else {
            bit(dont_wake, uapi::UFFDIO_WRITEPROTECT_MODE_DONTWAKE)
        };
        let mut w = uapi::UffdioWriteprotect {
            range: uapi::UffdioRange::new(dst, len),
            mode,
        };
        loop {
            // SAFETY: struct ours; range registered with this descriptor.
            let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), uapi::UFFDIO_WRITEPROTECT as _, &mut w) };
            match check(r) {
                Ok(_) => return Ok(()),
                Err(e) if e.is_again() => continue,
                Err(errno) => {
                    return Err(UffdError::Ioctl {
                        op: "UFFDIO_WRITEPROTECT",
                        addr: dst,
                        len,
                        errno,
                    })
                }
            }
        }
    }

    /// Maps pages that are already in the page cache at a minor fault
    /// (`UFFDIO_CONTINUE`).
    pub fn continue_(
        &self,
        reg: &Registration,
        offset: usize,
        len: usize,
        write_protect: bool,
        dont_wake: bool,
    ) -> Result<Resolved, UffdError> {
        let mode = bit(write_protect, uapi::UFFDIO_CONTINUE_MODE_WP)
            | bit(dont_wake, uapi::UFFDIO_CONTINUE_MODE_DONTWAKE);
        self.range_op(
            "UFFDIO_CONTINUE",
            uapi::UFFDIO_CONTINUE,
            reg.addr(offset, len),
            len,
            mode,
        )
    }

    /// Marks missing pages poisoned (`UFFDIO_POISON`): any access raises
    /// SIGBUS (`BUS_MCEERR_AR`) until the page is discarded. Waiting threads
    /// are woken unless `dont_wake`.
    pub fn poison(
        &self,
        reg: &Registration,
        offset: usize,
        len: usize,
        dont_wake: bool,
    ) -> Result<Resolved, UffdError> {
        let mode = bit(dont_wake, uapi::UFFDIO_POISON_MODE_DONTWAKE);
        self.range_op(
            "UFFDIO_POISON",
            uapi::UFFDIO_POISON,
            reg.addr(offset, len),
            len,
            mode,
        )
    }

    /// The ioctls whose argument is a range, a mode and a result.
    fn range_op(
        &self,
        op: &'static str,
        request: u64,
        dst: usize,
        len: usize,
        mode: u64,
    ) -> Result<Resolved, UffdError> {
        let mut a = uapi::UffdioRangeOp {
            range: uapi::UffdioRange::new(dst, len),
            mode,
            result: 0,
        };
        // SAFETY: the struct is ours and has the layout `request` expects;
        // dst lies in a range registered with this descriptor (the kernel
        // only fills missing ptes or maps page-cache pages there).
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), request as _, &mut a) };
        resolved(op, dst, len, r, a.result)
    }

    /// Drops pages of the registration (`MADV_DONTNEED`). Their next access
    /// faults to the handler instead of reading zeros, because the range is
    /// registered for missing faults; contents are the handler's to restore.
    pub fn discard(
        &self,
        reg: &Registration,
        map: &Mapping,
        offset: usize,
        len: usize,
    ) -> Result<(), crate::mm::MmError> {
        assert_eq!(map.addr(), reg.start, "mapping and registration differ");
        assert!(reg.mode.contains(RegisterMode::MISSING));
        // SAFETY: accesses to a MISSING-registered range after the discard
        // fault to the userfaultfd handler, so no code observes the dropped
        // contents; restoring them is the handler's protocol.
        unsafe { map.discard(offset, len, false) }
    }

    /// [`Uffd::discard`] of several ranges, `(offset, len)` each, with
    /// one TLB shootdown per [`crate::mm::DISCARD_VECTOR`] of them where
    /// the kernel batches (see [`Mapping::discard_ranges`]). Returns the
    /// system calls made.
    pub fn discard_ranges(
        &self,
        reg: &Registration,
        map: &Mapping,
        ranges: &[(usize, usize)],
    ) -> Result<usize, crate::mm::MmError> {
        assert_eq!(map.addr(), reg.start, "mapping and registration differ");
        assert!(reg.mode.contains(RegisterMode::MISSING));
        // SAFETY: as for `discard`: accesses after it fault to the handler.
        unsafe { map.discard_ranges(ranges) }
    }

    /// Reads pending page faults into `out` without blocking (the descriptor
    /// must be non-blocking). Returns how many were read; other events are
    /// skipped.
    pub fn read_faults(&self, out: &mut [FaultEvent]) -> Result<usize, UffdError> {
        const MAX: usize = 64;
        let mut msgs = [uapi::UffdMsg::default(); MAX];
        let want = out.len().min(MAX);
        // SAFETY: reading whole uffd_msg structs into our buffer.
        let r = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr().cast(),
                want * std::mem::size_of::<uapi::UffdMsg>(),
            )
        };
        let n = match check_size(r) {
            Ok(b) => b / std::mem::size_of::<uapi::UffdMsg>(),
            Err(e) if e.is_again() => 0,
            Err(e) => return Err(UffdError::Read(e)),
        };
        let mut k = 0;
        for m in &msgs[..n] {
            if m.event == uapi::UFFD_EVENT_PAGEFAULT {
                out[k] = FaultEvent {
                    address: m.pf_address as usize,
                    write: m.pf_flags & uapi::UFFD_PAGEFAULT_FLAG_WRITE != 0,
                    wp: m.pf_flags & uapi::UFFD_PAGEFAULT_FLAG_WP != 0,
                    minor: m.pf_flags & uapi::UFFD_PAGEFAULT_FLAG_MINOR != 0,
                    tid: m.pf_ptid,
                };
                k += 1;
            }
        }
        Ok(k)
    }
}

impl AsFd for Uffd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// `flag` if `on`, else 0.
fn bit(on: bool, flag: u64) -> u64 {
    if on {
        flag
    } else {
        0
    }
}

fn resolved(
    op: &'static str,
    addr: usize,
    len: usize,
    ret: libc::c_int,
    done: i64,
) -> Result<Resolved, UffdError> {
    if ret == 0 {
        return Ok(Resolved::Done);
    }
    resolved_errno(op, addr, len, ret, done, Errno::last())
}

/// [`resolved`] of a failed call whose errno was `errno`.
fn resolved_errno(
    op: &'static str,
    addr: usize,
    len: usize,
    ret: libc::c_int,
    done: i64,
    errno: Errno,
) -> Result<Resolved, UffdError> {
    if ret == 0 {
        return Ok(Resolved::Done);
    }
    match errno.raw() {
        libc::EEXIST => Ok(Resolved::AlreadyMapped),
        libc::EAGAIN => Ok(Resolved::Partial {
            bytes: if done > 0 { done as usize } else { 0 },
        }),
        _ => Err(UffdError::Ioctl { op, addr, len, errno }),
    }
}
