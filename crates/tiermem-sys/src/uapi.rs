//! Kernel ABI for x86-64 Linux that the installed C headers may lack.
//!
//! The Debian headers on our machines predate UFFDIO_MOVE, UFFDIO_POISON,
//! `UFFD_FEATURE_WP_ASYNC` and `PAGEMAP_SCAN`, so everything tiermem needs
//! is spelled out here from `include/uapi/linux/userfaultfd.h` and
//! `include/uapi/linux/fs.h` (Linux 6.7+). These are private: the safe
//! wrappers in the sibling modules are the only users.

#![allow(dead_code)]

/// `_IOC(dir, type, nr, size)` from `asm-generic/ioctl.h`.
const fn ioc(dir: u64, ty: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | (ty << 8) | nr
}
const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;
const fn iowr(ty: u64, nr: u64, size: usize) -> u64 {
    ioc(IOC_READ | IOC_WRITE, ty, nr, size)
}
const fn ior(ty: u64, nr: u64, size: usize) -> u64 {
    ioc(IOC_READ, ty, nr, size)
}
const fn io(ty: u64, nr: u64) -> u64 {
    ioc(0, ty, nr, 0)
}

pub const UFFD_API: u64 = 0xAA;
const UFFDIO: u64 = 0xAA;

// Ioctl numbers (`_UFFDIO_*`), also the bit positions in `uffdio_api.ioctls`
// and `uffdio_register.ioctls`.
pub const NR_REGISTER: u64 = 0x00;
pub const NR_UNREGISTER: u64 = 0x01;
pub const NR_WAKE: u64 = 0x02;
pub const NR_COPY: u64 = 0x03;
pub const NR_ZEROPAGE: u64 = 0x04;
pub const NR_MOVE: u64 = 0x05;
pub const NR_WRITEPROTECT: u64 = 0x06;
pub const NR_CONTINUE: u64 = 0x07;
pub const NR_POISON: u64 = 0x08;
pub const NR_API: u64 = 0x3F;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct UffdioApi {
    pub api: u64,
    pub features: u64,
    pub ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct UffdioRange {
    pub start: u64,
    pub len: u64,
}

impl UffdioRange {
    /// The range of `len` bytes at address `start`.
    pub fn new(start: usize, len: usize) -> Self {
        UffdioRange {
            start: start as u64,
            len: len as u64,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct UffdioRegister {
    pub range: UffdioRange,
    pub mode: u64,
    pub ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct UffdioCopy {
    pub dst: u64,
    pub src: u64,
    pub len: u64,
    pub mode: u64,
    /// Bytes copied, or a negative errno; written by the kernel.
    pub copy: i64,
}

/// `struct uffdio_zeropage`, `uffdio_continue` and `uffdio_poison` share
/// this layout: a range, a mode, and the bytes done (or a negative errno)
/// written back by the kernel (`zeropage`, `mapped`, `updated`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct UffdioRangeOp {
    pub range: UffdioRange,
    pub mode: u64,
    pub result: i64,
}
const _: () = assert!(std::mem::size_of::<UffdioRangeOp>() == 32);

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct UffdioMove {
    pub dst: u64,
    pub src: u64,
    pub len: u64,
    pub mode: u64,
    pub moved: i64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct UffdioWriteprotect {
    pub range: UffdioRange,
    pub mode: u64,
}

/// `struct uffd_msg`: 32 bytes; only the page-fault arm of the union is
/// decoded, the other events are reported by their code.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct UffdMsg {
    pub event: u8,
    pub reserved1: u8,
    pub reserved2: u16,
    pub reserved3: u32,
    /// `arg.pagefault.flags`
    pub pf_flags: u64,
    /// `arg.pagefault.address`
    pub pf_address: u64,
    /// `arg.pagefault.feat.ptid` (with `UFFD_FEATURE_THREAD_ID`), padded.
    pub pf_ptid: u32,
    pub pad: u32,
}
const _: () = assert!(std::mem::size_of::<UffdMsg>() == 32);

pub const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
pub const UFFD_PAGEFAULT_FLAG_WRITE: u64 = 1 << 0;
pub const UFFD_PAGEFAULT_FLAG_WP: u64 = 1 << 1;
pub const UFFD_PAGEFAULT_FLAG_MINOR: u64 = 1 << 2;

pub const UFFDIO_REGISTER_MODE_MISSING: u64 = 1 << 0;
pub const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
pub const UFFDIO_REGISTER_MODE_MINOR: u64 = 1 << 2;

pub const UFFDIO_COPY_MODE_DONTWAKE: u64 = 1 << 0;
pub const UFFDIO_COPY_MODE_WP: u64 = 1 << 1;
pub const UFFDIO_ZEROPAGE_MODE_DONTWAKE: u64 = 1 << 0;
pub const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
pub const UFFDIO_WRITEPROTECT_MODE_DONTWAKE: u64 = 1 << 1;
pub const UFFDIO_CONTINUE_MODE_DONTWAKE: u64 = 1 << 0;
pub const UFFDIO_CONTINUE_MODE_WP: u64 = 1 << 1;
pub const UFFDIO_POISON_MODE_DONTWAKE: u64 = 1 << 0;
pub const UFFDIO_MOVE_MODE_DONTWAKE: u64 = 1 << 0;
pub const UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES: u64 = 1 << 1;

pub const UFFDIO_API: u64 = iowr(UFFDIO, NR_API, std::mem::size_of::<UffdioApi>());
pub const UFFDIO_REGISTER: u64 = iowr(UFFDIO, NR_REGISTER, std::mem::size_of::<UffdioRegister>());
pub const UFFDIO_UNREGISTER: u64 = ior(UFFDIO, NR_UNREGISTER, std::mem::size_of::<UffdioRange>());
pub const UFFDIO_WAKE: u64 = ior(UFFDIO, NR_WAKE, std::mem::size_of::<UffdioRange>());
pub const UFFDIO_COPY: u64 = iowr(UFFDIO, NR_COPY, std::mem::size_of::<UffdioCopy>());
pub const UFFDIO_ZEROPAGE: u64 = iowr(UFFDIO, NR_ZEROPAGE, std::mem::size_of::<UffdioRangeOp>());
pub const UFFDIO_MOVE: u64 = iowr(UFFDIO, NR_MOVE, std::mem::size_of::<UffdioMove>());
pub const UFFDIO_WRITEPROTECT: u64 = iowr(UFFDIO, NR_WRITEPROTECT, std::mem::size_of::<UffdioWriteprotect>());
pub const UFFDIO_CONTINUE: u64 = iowr(UFFDIO, NR_CONTINUE, std::mem::size_of::<UffdioRangeOp>());
pub const UFFDIO_POISON: u64 = iowr(UFFDIO, NR_POISON, std::mem::size_of::<UffdioRangeOp>());

/// `USERFAULTFD_IOC_NEW` on `/dev/userfaultfd`.
pub const USERFAULTFD_IOC_NEW: u64 = io(0xAA, 0x00);
/// `UFFD_USER_MODE_ONLY` flag of the userfaultfd syscall.
pub const UFFD_USER_MODE_ONLY: i32 = 1;

// PAGEMAP_SCAN (include/uapi/linux/fs.h, 6.7+).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct PmScanArg {
    pub size: u64,
    pub flags: u64,
    pub start: u64,
    pub end: u64,
    pub walk_end: u64,
    pub vec: u64,
    pub vec_len: u64,
    pub max_pages: u64,
    pub category_inverted: u64,
    pub category_mask: u64,
    pub category_anyof_mask: u64,
    pub return_mask: u64,
}
const _: () = assert!(std::mem::size_of::<PmScanArg>() == 96);

#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PageRegionRaw {
    pub start: u64,
    pub end: u64,
    pub categories: u64,
}

pub const PAGEMAP_SCAN: u64 = iowr(b'f' as u64, 16, std::mem::size_of::<PmScanArg>());

// futex(2)
pub const FUTEX_WAIT_PRIVATE: i32 = 128;
pub const FUTEX_WAKE_PRIVATE: i32 = 128 | 1;

// mmap flags for explicit huge page sizes: log2(size) << MAP_HUGE_SHIFT.
pub const MAP_HUGE_SHIFT: i32 = 26;
pub const MAP_HUGE_2MB: i32 = 21 << MAP_HUGE_SHIFT;
pub const MAP_HUGE_1GB: i32 = 30 << MAP_HUGE_SHIFT;

/// `mremap` flag: move the pages but keep the old range mapped (5.7).
pub const MREMAP_DONTUNMAP: libc::c_int = 4;
/// `madvise` advice: populate a range writable (5.14).
pub const MADV_POPULATE_WRITE: libc::c_int = 23;

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers below are the values the kernel headers of 6.x define;
    /// computing them from the sizes must give exactly those.
    #[test]
    fn ioctl_numbers_match_the_kernel_headers() {
        assert_eq!(UFFDIO_API, 0xc018_aa3f);
        assert_eq!(UFFDIO_REGISTER, 0xc020_aa00);
        assert_eq!(UFFDIO_UNREGISTER, 0x8010_aa01);
        assert_eq!(UFFDIO_WAKE, 0x8010_aa02);
        assert_eq!(UFFDIO_COPY, 0xc028_aa03);
        assert_eq!(UFFDIO_ZEROPAGE, 0xc020_aa04);
        assert_eq!(UFFDIO_MOVE, 0xc028_aa05);
        assert_eq!(UFFDIO_WRITEPROTECT, 0xc018_aa06);
        assert_eq!(UFFDIO_CONTINUE, 0xc020_aa07);
        assert_eq!(UFFDIO_POISON, 0xc020_aa08);
        assert_eq!(USERFAULTFD_IOC_NEW, 0xaa00);
        assert_eq!(PAGEMAP_SCAN, 0xc060_6610);
    }
}

// seccomp (include/uapi/linux/seccomp.h, filter.h, bpf_common.h, audit.h).
pub const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;
pub const SECCOMP_FILTER_FLAG_TSYNC: libc::c_uint = 1;
pub const SECCOMP_RET_TRAP: u32 = 0x0003_0000;
pub const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
pub const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
pub const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
/// `si_code` of a SIGSYS raised by a seccomp filter.
pub const SYS_SECCOMP: i32 = 1;
// struct seccomp_data { int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]; }
pub const SECCOMP_DATA_NR: u32 = 0;
pub const SECCOMP_DATA_ARCH: u32 = 4;
pub const SECCOMP_DATA_IP: u32 = 8;
pub const SECCOMP_DATA_ARGS: u32 = 16;
/// `BPF_LD | BPF_W | BPF_ABS` (BPF_LD and BPF_W are 0).
pub const BPF_LD_W_ABS: u16 = 0x20;
pub const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
pub const BPF_JMP_JGE_K: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
pub const BPF_JMP_JGT_K: u16 = 0x05 | 0x20; // BPF_JMP | BPF_JGT | BPF_K
pub const BPF_JMP_JSET_K: u16 = 0x05 | 0x40; // BPF_JMP | BPF_JSET | BPF_K
pub const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
pub const BPF_JMP_JA: u16 = 0x05; // BPF_JMP | BPF_JA: pc += k (32 bits)

/// `struct sock_filter`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockFilter {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// `struct sock_fprog`.
#[repr(C)]
pub struct SockFprog {
    pub len: u16,
    pub filter: *const SockFilter,
}
