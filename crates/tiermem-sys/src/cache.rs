//! Cache-line write-back and invalidation (`clwb`, `clflushopt`, `clflush`,
//! `sfence`): the software form of the non-coherent memory operations of
//! paper 5 (Rhymes), where a release flushes written lines to shared memory
//! (the SCC's write-combine buffer flush) and an acquire invalidates cached
//! lines (the SCC's `CL1INVMB`). Non-coherent shared memory such as
//! multi-host CXL needs exactly these; on cache-coherent machines they are
//! correct and cost what they cost, which is what the SVM benchmark measures.
//!
//! The instructions are chosen at run time from what the CPU offers
//! ([`features`]): write-back uses `clwb` (keeps the line cached), else
//! `clflushopt`, else `clflush`; invalidation uses `clflushopt`, else
//! `clflush`. Both end with `sfence`, which orders the flushes before the
//! stores that follow (the release flag).
//!
//! ```
//! use tiermem_sys::cache;
//! let buf = vec![1u8; 4096];
//! // 64 lines, or 65 when the buffer does not start on a line.
//! let lines = cache::write_back(tiermem_sys::mm::MemRange::from_bytes(&buf));
//! assert!(lines == 0 || lines == 64 || lines == 65);
//! ```

use crate::mm::MemRange;
use std::sync::OnceLock;

/// Cache line size assumed (x86-64).
pub const LINE: usize = 64;

/// The flush instructions this CPU has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// `clwb`: write a line back, keep it cached.
    pub clwb: bool,
    /// `clflushopt`: write back and invalidate, weakly ordered.
    pub clflushopt: bool,
    /// `clflush`: write back and invalidate, ordered.
    pub clflush: bool,
}

/// What this CPU offers (probed once).
pub fn features() -> Features {
    static F: OnceLock<Features> = OnceLock::new();
    *F.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            // std's feature detection does not know clwb/clflushopt: ask
            // CPUID leaf 7 (EBX bit 23 clflushopt, bit 24 clwb).
            #[allow(unused_unsafe)] // __cpuid* became safe in newer Rust
            // SAFETY: CPUID exists on every x86-64 CPU and has no side
            // effects; leaf 7 is read only if the maximum leaf allows it.
            let ebx7 = unsafe {
                if std::arch::x86_64::__cpuid(0).eax >= 7 {
                    std::arch::x86_64::__cpuid_count(7, 0).ebx
                } else {
                    0
                }
            };
            Features {
                clwb: ebx7 & (1 << 24) != 0,
                clflushopt: ebx7 & (1 << 23) != 0,
                clflush: std::arch::is_x86_feature_detected!("sse2"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Features::default()
        }
    })
}

#[derive(Clone, Copy)]
enum Op {
    Clwb,
    Clflushopt,
    Clflush,
}

#[cfg(target_arch = "x86_64")]
fn line_op(op: Op, addr: usize) {
    // SAFETY: the caller passes an address inside a mapped, readable range
    // (a MemRange); these instructions only write a line back and/or drop
    // it from the cache, never change memory contents, and fault like a
    // read on an unmapped address (which the MemRange excludes). The
    // instruction was checked to exist by `features()`.
    unsafe {
        match op {
            Op::Clwb => std::arch::asm!("clwb [{0}]", in(reg) addr, options(nostack, preserves_flags)),
            Op::Clflushopt => {
                std::arch::asm!("clflushopt [{0}]", in(reg) addr, options(nostack, preserves_flags))
            }
            Op::Clflush => std::arch::asm!("clflush [{0}]", in(reg) addr, options(nostack, preserves_flags)),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn line_op(_op: Op, _addr: usize) {}

/// `sfence`: orders earlier flushes and stores before later stores.
pub fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no operands and touches no memory.
    unsafe {
        std::arch::asm!("sfence", options(nostack, preserves_flags))
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

fn each_line(range: MemRange<'_>, op: Option<Op>) -> usize {
    let Some(op) = op else {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        return 0;
    };
    if range.is_empty() {
        return 0;
    }
    let start = range.addr() & !(LINE - 1);
    let end = range.addr() + range.len();
    let mut n = 0;
    let mut a = start;
    while a < end {
        line_op(op, a);
        a += LINE;
        n += 1;
    }
    store_fence();
    n
}

/// Writes every cache line of `range` back to memory (`clwb`, falling back
/// to `clflushopt`/`clflush`), then `sfence`. Returns the lines flushed (0
/// where the CPU has none of the instructions: then only a fence).
pub fn write_back(range: MemRange<'_>) -> usize {
    let f = features();
    each_line(
        range,
        first_of(&[
            (f.clwb, Op::Clwb),
            (f.clflushopt, Op::Clflushopt),
            (f.clflush, Op::Clflush),
        ]),
    )
}

/// Writes back and invalidates every cache line of `range` (`clflushopt`,
/// falling back to `clflush`), then `sfence`: the next read of each line
/// comes from memory. Returns the lines invalidated.
pub fn invalidate(range: MemRange<'_>) -> usize {
    let f = features();
    each_line(
        range,
        first_of(&[(f.clflushopt, Op::Clflushopt), (f.clflush, Op::Clflush)]),
    )
}

/// The first instruction the CPU has, in order of preference.
fn first_of(choices: &[(bool, Op)]) -> Option<Op> {
    choices.iter().find(|c| c.0).map(|c| c.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::{MapOptions, Mapping};

    #[test]
    fn flushes_keep_contents_and_count_lines() {
        let (m, mut user) = Mapping::anonymous(64 << 10, &MapOptions::default()).unwrap();
        let w: &mut [u64] = m.user_slice_mut(&mut user);
        for (i, x) in w.iter_mut().enumerate() {
            *x = i as u64 * 3;
        }
        let f = features();
        let expect = if f.clwb || f.clflushopt || f.clflush {
            1024
        } else {
            0
        };
        assert_eq!(write_back(m.range(0, 64 << 10)), expect);
        assert_eq!(invalidate(m.range(0, 64 << 10)), expect);
        // An unaligned range covers the lines it touches.
        if expect > 0 {
            assert_eq!(invalidate(m.range(60, 8)), 2);
        }
        let w: &mut [u64] = m.user_slice_mut(&mut user);
        assert!(w.iter().enumerate().all(|(i, &x)| x == i as u64 * 3));
    }

    #[test]
    fn this_machine_has_clflush() {
        #[cfg(target_arch = "x86_64")]
        assert!(features().clflush);
    }
}
