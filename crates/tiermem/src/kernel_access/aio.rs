//! Linux asynchronous I/O (`io_submit`, libaio) on tiered buffers.
//!
//! A direct read submitted with `io_submit` pins its buffer's pages when it
//! is submitted, and the device fills them later, after the call has
//! returned, until the program reaps the completion (`io_getevents`). A
//! page of such a buffer evicted in between took its share of the data
//! after the region had let it go: fio's libaio engine with `--direct=1`
//! read back corrupt blocks under `tiermem run` on the handler-thread path
//! (on the in-context path the submission failed with `EFAULT`).
//!
//! So `io_submit` always traps (its buffers lie behind its arguments, where
//! the filter cannot look): the buffers of its reads and writes
//! (`IOCB_CMD_PREAD`, `PWRITE`, `PREADV`, `PWRITEV`) that lie in tiered
//! memory are brought in and pinned before the call, and stay pinned until
//! `io_getevents` (or `io_pgetevents`) returns their completion, or
//! `io_cancel` or `io_destroy` ends them. These pins are not held to the
//! pin allowance: the budget grows by them while the I/O is in flight
//! (`fault::PinKind::Io`), so a buffer larger than the budget still goes
//! whole. The structures the kernel reads at submission (the list, the
//! control blocks, the vectors) and writes at reaping (the events, the
//! timeout) are pinned for the call alone.
//!
//! A program that reaps completions from the ring in its own memory
//! (fio's `userspace_reap`) never tells: its buffers stay pinned until the
//! same control block is submitted again, the context is destroyed, or the
//! buffer is freed ([`discarding`]: a discard waits for pins to go).
//! Only with the signal guard (always under `tiermem run`): a thread that
//! blocked SIGSYS would be killed by the trap.

use crate::fault::{first_registered_in, pin_for_io, pin_for_kernel, KernelPins};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use tiermem_sys::seccomp::{self, TrapRule, TrappedSyscall};

const IOCB_CMD_PREAD: u16 = 0;
const IOCB_CMD_PWRITE: u16 = 1;
const IOCB_CMD_PREADV: u16 = 7;
const IOCB_CMD_PWRITEV: u16 = 8;
/// `sizeof(struct iocb)`; the opcode is at 16, the buffer at 24 and its
/// length (a vector's count) at 32.
const IOCB_BYTES: usize = 64;
/// `sizeof(struct iovec)`.
const IOVEC_BYTES: usize = 16;
/// `sizeof(struct io_event)`; the control block's address is at 8.
const EVENT_BYTES: usize = 32;
/// The kernel's limit on a vector (`UIO_MAXIOV`).
const MAX_IOV: usize = 1024;
/// `sizeof(struct timespec)`, and of `io_pgetevents`'s signal argument.
const TIMESPEC: usize = 16;

/// `io_pgetevents` (x86-64; the libc crate does not name it).
const SYS_IO_PGETEVENTS: i64 = 333;

/// The calls trapped.
const CALLS: [i64; 5] = [
    libc::SYS_io_submit,
    libc::SYS_io_getevents,
    SYS_IO_PGETEVENTS,
    libc::SYS_io_cancel,
    libc::SYS_io_destroy,
];

/// Their rules: always (see the module doc).
pub(super) fn rules() -> impl Iterator<Item = TrapRule> {
    CALLS.iter().map(|&nr| TrapRule::always(nr))
}

/// A submitted I/O's pins, until its completion is reaped.
struct InFlight {
    ctx: u64,
    iocb: u64,
    /// The buffers pinned, as `(addr, len)`.
    ranges: Vec<(usize, usize)>,
    _pins: Vec<KernelPins>,
}

static IN_FLIGHT: Mutex<Vec<InFlight>> = Mutex::new(Vec::new());
/// Whether `IN_FLIGHT` may hold anything: discards look only then.
static ANY: AtomicBool = AtomicBool::new(false);

/// Ends the pins of I/O whose buffers meet `[addr, addr + len)`, which the
/// program is discarding (freed, unmapped): its I/O has ended, reaped
/// where no call saw it, and a discard waits for pins to go.
pub(crate) fn discarding(addr: usize, len: usize) {
    if ANY.load(Ordering::Acquire) {
        let end_at = addr.saturating_add(len);
        end(|e| e.ranges.iter().any(|&(a, l)| a < end_at && addr < a + l));
    }
}

/// Serves a trapped AIO call; None for any other call.
pub(super) fn on_trap(call: &TrappedSyscall<'_>) -> Option<i64> {
    let [ctx, a1, a2, a3, a4, _] = call.args;
    let r = match call.nr {
        libc::SYS_io_submit => submit(call),
        libc::SYS_io_getevents | SYS_IO_PGETEVENTS => {
            // io_getevents takes five arguments: its sixth register holds
            // a leftover, not a pointer.
            let usig = if call.nr == SYS_IO_PGETEVENTS {
                call.args[5]
            } else {
                0
            };
            let _for_call = [
                pin_for_kernel(a3 as usize, (a2 as usize).saturating_mul(EVENT_BYTES), true),
                pin_for_kernel(a4 as usize, TIMESPEC, false),
                pin_for_kernel(usig as usize, TIMESPEC, false),
            ];
            let r = call.execute(call.nr, call.args, true);
            let reaped: Vec<u64> = (0..r.max(0) as usize)
                .map_while(|k| read_u64(a3 as usize + k * EVENT_BYTES + 8))
                .collect();
            end(|e| e.ctx == ctx && reaped.contains(&e.iocb));
            r
        }
        libc::SYS_io_cancel => {
            let _for_call = pin_for_kernel(a2 as usize, EVENT_BYTES, true);
            let r = call.execute(call.nr, call.args, true);
            if r == 0 {
                end(|e| e.ctx == ctx && e.iocb == a1);
            }
            r
        }
        libc::SYS_io_destroy => {
            // The kernel waits for the context's I/O to end first.
            let r = call.execute(call.nr, call.args, true);
            if r == 0 {
                end(|e| e.ctx == ctx);
            }
            r
        }
        _ => return None,
    };
    Some(r)
}

/// `io_submit(ctx, nr, list)` with the buffers of its reads and writes
/// pinned until they complete.
fn submit(call: &TrappedSyscall<'_>) -> i64 {
    let [ctx, nr, list, ..] = call.args;
    let list = list as usize;
    let n = (nr as i64).clamp(0, 1 << 16) as usize;
    let mut for_call = vec![pin_for_kernel(list, n * 8, false)];
    let mut blocks: Vec<InFlight> = Vec::with_capacity(n);
    for k in 0..n {
        // Where the kernel cannot read a block, it stops there itself.
        let Some(iocb) = read_u64(list + k * 8) else { break };
        for_call.push(pin_for_kernel(iocb as usize, IOCB_BYTES, false));
        let mut cb = [0u8; IOCB_BYTES];
        if seccomp::read_untiered(iocb as usize, &mut cb) < IOCB_BYTES {
            break;
        }
        let word = |at: usize| u64::from_ne_bytes(cb[at..at + 8].try_into().expect("8 bytes"));
        let op = u16::from_ne_bytes([cb[16], cb[17]]);
        let (buf, len) = (word(24) as usize, word(32) as usize);
        let kernel_writes = matches!(op, IOCB_CMD_PREAD | IOCB_CMD_PREADV);
        let mut pins = Vec::new();
        let mut ranges = Vec::new();
        let mut pin = |a: usize, l: usize| {
            if l > 0 && first_registered_in(a, l).is_some() {
                pins.push(pin_for_io(a, l, kernel_writes));
                ranges.push((a, l));
            }
        };
        match op {
            IOCB_CMD_PREAD | IOCB_CMD_PWRITE => pin(buf, len),
            IOCB_CMD_PREADV | IOCB_CMD_PWRITEV if len <= MAX_IOV => {
                for_call.push(pin_for_kernel(buf, len * IOVEC_BYTES, false));
                for v in 0..len {
                    let at = buf + v * IOVEC_BYTES;
                    if let (Some(base), Some(l)) = (read_u64(at), read_u64(at + 8)) {
                        pin(base as usize, l as usize);
                    }
                }
            }
            _ => {}
        }
        blocks.push(InFlight {
            ctx,
            iocb,
            ranges,
            _pins: pins,
        });
    }
    let r = call.execute(call.nr, call.args, true);
    drop(for_call);
    let submitted = r.max(0) as usize;
    let mut table = IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner());
    // Blocks not submitted drop their pins here.
    for block in blocks.into_iter().take(submitted) {
        if block.ranges.is_empty() {
            continue;
        }
        // A block submitted again has ended, reaped where no call saw it
        // (from the ring, in user space).
        table.retain(|e| !(e.ctx == ctx && e.iocb == block.iocb));
        table.push(block);
    }
    ANY.store(!table.is_empty(), Ordering::Release);
    r
}

/// Drops the pins of the I/O that `ended` picks.
fn end(ended: impl Fn(&InFlight) -> bool) {
    let mut table = IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner());
    if table.is_empty() {
        return;
    }
    let gone: Vec<InFlight> = table.extract_if(.., |e| ended(e)).collect();
    ANY.store(!table.is_empty(), Ordering::Release);
    drop(table);
    drop(gone);
}

/// The 8 bytes at `at`, through the kernel (an unmapped address gives
/// None, as the kernel's own read would fail), brought in first where
/// they are tiered.
fn read_u64(at: usize) -> Option<u64> {
    if at == 0 {
        return None;
    }
    let _pin = pin_for_kernel(at, 8, false);
    let mut b = [0u8; 8];
    (seccomp::read_untiered(at, &mut b) == 8).then(|| u64::from_ne_bytes(b))
}
