//! Arrays of all-zero elements in their own private anonymous mapping
//! (`MAP_NORESERVE`): a page of the array costs memory only once an element
//! on it is written, so metadata sized for a huge virtual range costs in
//! proportion to the part in use. Creating one is O(1) (no initialising
//! loop); dropping it unmaps it.

use crate::mm::{MapOptions, Mapping, MmError};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};

/// Types whose all-zero bit pattern is a valid value and that need no drop.
///
/// # Safety
/// Implementors must accept every element being all-zero bytes, and must not
/// implement `Drop` (the array never runs destructors).
pub unsafe trait ZeroValid: Sized {}

// SAFETY: zero is a valid integer, `false`, and a zero atomic; none of these
// has a destructor.
unsafe impl ZeroValid for u8 {}
// SAFETY: as above.
unsafe impl ZeroValid for u16 {}
// SAFETY: as above.
unsafe impl ZeroValid for u32 {}
// SAFETY: as above.
unsafe impl ZeroValid for u64 {}
// SAFETY: as above.
unsafe impl ZeroValid for usize {}
// SAFETY: as above.
unsafe impl ZeroValid for bool {}
// SAFETY: as above.
unsafe impl ZeroValid for AtomicU8 {}
// SAFETY: as above.
unsafe impl ZeroValid for AtomicU32 {}
// SAFETY: as above.
unsafe impl ZeroValid for AtomicU64 {}
// SAFETY: as above.
unsafe impl ZeroValid for AtomicUsize {}
// SAFETY: as above.
unsafe impl ZeroValid for AtomicBool {}

/// `len` elements of `T`, all zero at first, in a mapping of their own.
pub struct ZeroedArray<T: ZeroValid> {
    map: Mapping,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: ZeroValid> std::fmt::Debug for ZeroedArray<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ZeroedArray({} x {} bytes)",
            self.len,
            std::mem::size_of::<T>()
        )
    }
}

impl<T: ZeroValid> ZeroedArray<T> {
    /// Maps `len` zero elements (address space only: no memory is committed).
    pub fn new(len: usize) -> Result<ZeroedArray<T>, MmError> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(MmError::BadLength { len, unit: 1 })?;
        let page = crate::mm::base_page_size();
        let bytes = bytes.max(1).div_ceil(page) * page;
        let (map, _) = Mapping::anonymous(
            bytes,
            &MapOptions {
                noreserve: true,
                ..Default::default()
            },
        )?;
        Ok(ZeroedArray {
            map,
            len,
            _t: PhantomData,
        })
    }
}

impl<T: ZeroValid> std::ops::Deref for ZeroedArray<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the mapping is private, readable and writable, page
        // aligned (so aligned for T), at least `len * size_of::<T>()` bytes,
        // owned by `self` for the borrow's lifetime, and all-zero or written
        // through this array only: every element is a valid T (ZeroValid).
        unsafe { std::slice::from_raw_parts(self.map.addr() as *const T, self.len) }
    }
}

impl<T: ZeroValid> std::ops::DerefMut for ZeroedArray<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; `&mut self` makes the view exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.map.addr() as *mut T, self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_zero_and_keeps_writes() {
        let mut a = ZeroedArray::<u32>::new(10_000).unwrap();
        assert_eq!(a.len(), 10_000);
        assert!(a.iter().all(|&x| x == 0));
        a[9_999] = 7;
        assert_eq!(a[9_999], 7);
        let e = ZeroedArray::<AtomicU64>::new(0).unwrap();
        assert!(e.is_empty());
    }
}
