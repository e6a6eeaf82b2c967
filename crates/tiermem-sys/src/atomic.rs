//! Atomic views of plain words the caller owns exclusively.
//!
//! Benchmark workloads carve their arrays out of one mapping as `&mut [u64]`
//! and then share some of them among threads (a GUPS table, BFS parents).
//! [`as_atomic_u64`] is the stable equivalent of the unstable
//! `AtomicU64::from_mut_slice`.

use std::sync::atomic::AtomicU64;

/// Views `words` as atomics for the lifetime of the exclusive borrow.
pub fn as_atomic_u64(words: &mut [u64]) -> &[AtomicU64] {
    const _: () = assert!(
        std::mem::size_of::<AtomicU64>() == std::mem::size_of::<u64>()
            && std::mem::align_of::<AtomicU64>() == std::mem::align_of::<u64>()
    );
    // SAFETY: AtomicU64 has the same size, alignment and bit validity as u64
    // (checked at compile time above); the exclusive borrow of `words` lasts
    // as long as the returned slice, so no non-atomic access can overlap the
    // atomic ones.
    unsafe { std::slice::from_raw_parts(words.as_mut_ptr().cast::<AtomicU64>(), words.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn atomic_view_writes_through() {
        let mut v = vec![1u64, 2, 3];
        let a = as_atomic_u64(&mut v);
        std::thread::scope(|s| {
            s.spawn(|| a[0].fetch_add(10, Ordering::Relaxed));
            s.spawn(|| a[2].fetch_xor(3, Ordering::Relaxed));
        });
        assert_eq!(v, [11, 2, 0]);
    }
}
