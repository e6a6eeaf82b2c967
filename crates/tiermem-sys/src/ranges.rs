//! A table of address ranges that a signal handler can search: lock-free,
//! O(log n), no allocation, no lock on the read side.
//!
//! The table is a sorted array published through one pointer (RCU style).
//! Writers copy the array, edit the copy, publish it, wait for a grace
//! period and only then free the old array. Readers announce themselves in
//! one of two counters (sleepable-RCU style, as in the kernel's SRCU): a
//! writer flips the epoch twice and waits each time until the counter of
//! the previous epoch drains, so every reader that could still see the old
//! array has left before it is freed. A reader never waits for anything: a
//! fault handler that interrupts a writer on its own thread reads the old
//! or the new array and goes on.
//!
//! ```
//! use tiermem_sys::ranges::RangeTable;
//! static TABLE: RangeTable<u32> = RangeTable::new();
//! TABLE.insert(0x1000, 0x3000, 7).unwrap();
//! assert_eq!(TABLE.get(0x2fff), Some(7));
//! assert_eq!(TABLE.get(0x3000), None);
//! assert_eq!(TABLE.remove(|start, _, _| start == 0x1000), vec![7]);
//! ```
//!
//! Values are cloned on lookup (an `Arc` clone is one atomic increment, so
//! an `Arc` value stays signal-safe; it must never be the last reference
//! dropped in a handler, which the owner guarantees by waiting for its
//! in-flight users before it drops its own).
//!
//! After `fork()`, call [`RangeTable::after_fork_in_child`] in the child
//! (and bracket the fork with [`RangeTable::before_fork`] /
//! [`RangeTable::after_fork_in_parent`]): the child has only the forking
//! thread, so reader counts copied from the parent's other threads are
//! stale, and a writer lock held by another thread would never be released.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::time::Duration;

/// One range `[start, end)` and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry<V> {
    /// First address.
    pub start: usize,
    /// One past the last address.
    pub end: usize,
    /// What the owner registered.
    pub value: V,
}

/// A published array, sorted by `start`, ranges disjoint.
struct Snapshot<V> {
    entries: Vec<Entry<V>>,
}

impl<V> Snapshot<V> {
    fn find(&self, addr: usize) -> Option<&Entry<V>> {
        let i = self.entries.partition_point(|e| e.start <= addr);
        let e = self.entries.get(i.checked_sub(1)?)?;
        (addr < e.end).then_some(e)
    }

    /// The first entry that ends after `addr` (containing it, or the next
    /// one above it).
    fn find_from(&self, addr: usize) -> Option<&Entry<V>> {
        let i = self.entries.partition_point(|e| e.end <= addr);
        self.entries.get(i)
    }
}

/// A reader counter alone on its cache line: readers on different CPUs
/// bump the same counter, but never share a line with the epoch.
#[repr(align(64))]
struct Counter(AtomicUsize);

/// Address ranges with values, searched from signal handlers.
pub struct RangeTable<V> {
    /// The published array (null: empty).
    current: AtomicPtr<Snapshot<V>>,
    /// Its low bit selects the counter new readers use.
    epoch: AtomicUsize,
    readers: [Counter; 2],
    /// One writer at a time (a spin lock, so that a fork handler can take
    /// it and release it in another function).
    writer: AtomicBool,
}

// SAFETY: the table owns its snapshots (and through them values of type V),
// hands out only clones of V and shared references to V inside `read`, and
// all its own state is atomic: it is as thread-safe as V is Send + Sync.
unsafe impl<V: Send + Sync> Sync for RangeTable<V> {}
// SAFETY: as above; moving the table moves owned snapshots of V.
unsafe impl<V: Send + Sync> Send for RangeTable<V> {}

/// Why an insertion was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InsertError {
    /// The range is empty or wraps around.
    #[error("empty range {0:#x}..{1:#x}")]
    Empty(usize, usize),
    /// The range overlaps one already registered.
    #[error("overlaps the registered range {0:#x}..{1:#x}")]
    Overlap(usize, usize),
}

/// Decrements a reader counter when a read ends, also by unwinding.
struct ReadSide<'a>(&'a AtomicUsize);

impl Drop for ReadSide<'_> {
    fn drop(&mut self) {
        // Release: the reader's loads of the snapshot happen before a
        // writer that sees the counter drop frees it.
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl<V> RangeTable<V> {
    /// An empty table (usable in a `static`).
    pub const fn new() -> RangeTable<V> {
        RangeTable {
            current: AtomicPtr::new(std::ptr::null_mut()),
            epoch: AtomicUsize::new(0),
            readers: [Counter(AtomicUsize::new(0)), Counter(AtomicUsize::new(0))],
            writer: AtomicBool::new(false),
        }
    }

    /// Calls `f` with the entry containing `addr`, if any. Lock-free and
    /// allocation-free: callable from a signal handler. `f` must not block
    /// for long (writers wait for it).
    pub fn read<R>(&self, addr: usize, f: impl for<'a> FnOnce(Option<&'a Entry<V>>) -> R) -> R {
        self.with_snapshot(|s| f(s.and_then(|s| s.find(addr))))
    }

    /// Runs `f` on the published snapshot inside a read-side section.
    fn with_snapshot<R>(&self, f: impl for<'a> FnOnce(Option<&'a Snapshot<V>>) -> R) -> R {
        // SeqCst on the epoch, the counter and the pointer: a reader whose
        // increment a writer misses must load the pointer after the
        // writer's store (one total order over the three; see `synchronize`).
        let idx = self.epoch.load(Ordering::SeqCst) & 1;
        let counter = &self.readers[idx].0;
        counter.fetch_add(1, Ordering::SeqCst);
        let _read = ReadSide(counter);
        let p = self.current.load(Ordering::SeqCst);
        // SAFETY: a non-null pointer was published by a writer from
        // Box::into_raw, and a writer frees a replaced snapshot only after
        // a grace period that waits for every reader counted before its
        // epoch flips, which includes this one (it is counted until
        // `_read` drops, after `f` returns); `f`'s result cannot borrow the
        // snapshot (the lifetime is higher-ranked).
        f(unsafe { p.as_ref() })
    }

    /// Calls `f` with the first entry that ends after `addr`: the one
    /// containing it, or the next one above it. Lock-free like [`read`].
    ///
    /// [`read`]: RangeTable::read
    pub fn read_from<R>(&self, addr: usize, f: impl for<'a> FnOnce(Option<&'a Entry<V>>) -> R) -> R {
        self.with_snapshot(|s| f(s.and_then(|s| s.find_from(addr))))
    }

    /// A clone of the value of the range containing `addr`.
    pub fn get(&self, addr: usize) -> Option<V>
    where
        V: Clone,
    {
        self.read(addr, |e| e.map(|e| e.value.clone()))
    }

    /// Number of ranges.
    pub fn len(&self) -> usize {
        let _w = self.lock_writer();
        // SAFETY: under the writer lock nobody frees the current snapshot.
        unsafe { self.current.load(Ordering::Acquire).as_ref() }.map_or(0, |s| s.entries.len())
    }

    /// Whether no range is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `[start, end)` with `value`. Refuses an empty range or one that
    /// overlaps a registered range.
    pub fn insert(&self, start: usize, end: usize, value: V) -> Result<(), InsertError>
    where
        V: Clone,
    {
        if start >= end {
            return Err(InsertError::Empty(start, end));
        }
        self.update(|entries| {
            let i = entries.partition_point(|e| e.start < start);
            if let Some(prev) = i.checked_sub(1).map(|k| &entries[k]) {
                if prev.end > start {
                    return Err(InsertError::Overlap(prev.start, prev.end));
                }
            }
            if let Some(next) = entries.get(i) {
                if next.start < end {
                    return Err(InsertError::Overlap(next.start, next.end));
                }
            }
            entries.insert(i, Entry { start, end, value });
            Ok(())
        })
    }

    /// Removes every entry for which `pred(start, end, &value)` holds and
    /// returns their values, once no reader can see them any more.
    pub fn remove(&self, mut pred: impl FnMut(usize, usize, &V) -> bool) -> Vec<V>
    where
        V: Clone,
    {
        let mut removed = Vec::new();
        let r: Result<(), std::convert::Infallible> = self.update(|entries| {
            let mut kept = Vec::with_capacity(entries.len());
            for e in entries.drain(..) {
                if pred(e.start, e.end, &e.value) {
                    removed.push(e.value);
                } else {
                    kept.push(e);
                }
            }
            *entries = kept;
            Ok(())
        });
        let Ok(()) = r;
        removed
    }

    /// Copies the array, lets `edit` change the copy, publishes it and frees
    /// the old one after a grace period. Nothing changes if `edit` fails.
    fn update<E>(&self, edit: impl FnOnce(&mut Vec<Entry<V>>) -> Result<(), E>) -> Result<(), E>
    where
        V: Clone,
    {
        let _w = self.lock_writer();
        let old = self.current.load(Ordering::Acquire);
        // SAFETY: only writers replace the snapshot, and we hold the writer
        // lock, so `old` stays valid while we copy it.
        let mut entries = unsafe { old.as_ref() }.map_or_else(Vec::new, |s| s.entries.clone());
        edit(&mut entries)?;
        let new = Box::into_raw(Box::new(Snapshot { entries }));
        // SeqCst: see `read`.
        self.current.store(new, Ordering::SeqCst);
        self.synchronize();
        if !old.is_null() {
            // SAFETY: `old` came from Box::into_raw, is no longer published,
            // and the grace period has let every reader that could hold it
            // leave; no other writer frees it (we hold the lock).
            drop(unsafe { Box::from_raw(old) });
        }
        Ok(())
    }

    /// Waits until every reader that started before the call has finished.
    fn synchronize(&self) {
        // A reader reads the epoch, bumps that epoch's counter, then loads
        // the pointer. One that bumped its counter after we looked at it
        // loads the new pointer (SeqCst). One that read the epoch long ago
        // may bump the counter we are not waiting for: flipping twice and
        // draining both counters catches it either way.
        for _ in 0..2 {
            let idx = self.epoch.fetch_add(1, Ordering::SeqCst) & 1;
            let mut spins = 0u32;
            while self.readers[idx].0.load(Ordering::SeqCst) != 0 {
                backoff(&mut spins);
            }
        }
    }

    fn lock_writer(&self) -> WriterGuard<'_> {
        let mut spins = 0u32;
        // Acquire: the previous writer's edits are visible to this one.
        while self
            .writer
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            backoff(&mut spins);
        }
        WriterGuard(&self.writer)
    }

    /// Call in a `pthread_atfork` prepare handler: no writer is half-way
    /// through an update while the process is copied.
    pub fn before_fork(&self) {
        std::mem::forget(self.lock_writer());
    }

    /// Call in the parent's `pthread_atfork` handler.
    pub fn after_fork_in_parent(&self) {
        self.writer.store(false, Ordering::Release);
    }

    /// Call in the child's `pthread_atfork` handler: the child's only
    /// thread is not reading, so every reader count is stale.
    pub fn after_fork_in_child(&self) {
        for c in &self.readers {
            c.0.store(0, Ordering::Relaxed);
        }
        self.writer.store(false, Ordering::Release);
    }
}

impl<V> Default for RangeTable<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> Drop for RangeTable<V> {
    fn drop(&mut self) {
        let p = *self.current.get_mut();
        if !p.is_null() {
            // SAFETY: we own the table exclusively; p came from Box::into_raw.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

struct WriterGuard<'a>(&'a AtomicBool);

impl Drop for WriterGuard<'_> {
    fn drop(&mut self) {
        // Release: this writer's edits are visible to the next one.
        self.0.store(false, Ordering::Release);
    }
}

/// Spin, then yield, then sleep: readers hold their counter for a lookup
/// (tens of nanoseconds) unless preempted.
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else if *spins < 128 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    #[test]
    fn lookup_edges_and_overlaps() {
        let t: RangeTable<u32> = RangeTable::new();
        assert_eq!(t.get(5), None);
        t.insert(0x2000, 0x3000, 2).unwrap();
        t.insert(0x1000, 0x2000, 1).unwrap();
        t.insert(0x5000, 0x6000, 5).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(0xfff), None);
        assert_eq!(t.get(0x1000), Some(1));
        assert_eq!(t.get(0x1fff), Some(1));
        assert_eq!(t.get(0x2000), Some(2));
        assert_eq!(t.get(0x3000), None);
        assert_eq!(t.get(0x5fff), Some(5));
        assert_eq!(
            t.read_from(0x3000, |e| e.map(|e| e.value)),
            Some(5),
            "the next range up"
        );
        assert_eq!(
            t.read_from(0x1800, |e| e.map(|e| e.value)),
            Some(1),
            "the containing range"
        );
        assert_eq!(t.read_from(0x6000, |e| e.map(|e| e.value)), None);
        assert_eq!(
            t.insert(0x2800, 0x2900, 9),
            Err(InsertError::Overlap(0x2000, 0x3000))
        );
        assert_eq!(
            t.insert(0x4000, 0x5001, 9),
            Err(InsertError::Overlap(0x5000, 0x6000))
        );
        assert_eq!(
            t.insert(0x4000, 0x4000, 9),
            Err(InsertError::Empty(0x4000, 0x4000))
        );
        t.insert(0x3000, 0x5000, 3).unwrap();
        assert_eq!(t.get(0x4fff), Some(3));
        assert_eq!(t.remove(|_, _, v| *v % 2 == 1), vec![1, 3, 5]);
        assert_eq!(t.get(0x1000), None);
        assert_eq!(t.get(0x2000), Some(2));
        assert!(!t.is_empty());
    }

    #[test]
    fn many_ranges_binary_search() {
        let t: RangeTable<usize> = RangeTable::new();
        for k in (0..1000).rev() {
            t.insert(k * 0x10000, k * 0x10000 + 0x8000, k).unwrap();
        }
        for k in 0..1000 {
            assert_eq!(t.get(k * 0x10000 + 0x7fff), Some(k));
            assert_eq!(t.get(k * 0x10000 + 0x8000), None);
        }
    }

    /// Readers on stable ranges see their value at every moment while
    /// writers insert and remove other ranges; values are Arcs, so a
    /// use after free of a snapshot or a value shows up under Miri (and as
    /// a wrong value without it).
    #[test]
    fn readers_and_writers_concurrently() {
        let t: Arc<RangeTable<Arc<AtomicU64>>> = Arc::new(RangeTable::new());
        let (rounds, readers) = if cfg!(miri) { (20, 2) } else { (2000, 3) };
        for k in 0..4usize {
            t.insert(k << 20, (k << 20) + 4096, Arc::new(AtomicU64::new(k as u64)))
                .unwrap();
        }
        let stop = AtomicBool::new(false);
        let stop = &stop;
        std::thread::scope(|s| {
            for r in 0..readers {
                let t = &t;
                s.spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) || n < 10 {
                        let k = (n as usize + r) % 4;
                        let v = t.get((k << 20) + 100).expect("stable range vanished");
                        assert_eq!(v.load(Ordering::Relaxed), k as u64);
                        // Churned ranges: present or absent, never garbage.
                        if let Some(v) = t.get((8 << 20) + (n as usize % 8) * 8192) {
                            assert!(v.load(Ordering::Relaxed) >= 100);
                        }
                        n += 1;
                    }
                });
            }
            for i in 0..rounds {
                let j = i % 8;
                let at = (8 << 20) + j * 8192;
                t.insert(at, at + 4096, Arc::new(AtomicU64::new(100 + i as u64)))
                    .unwrap();
                let gone = t.remove(|start, _, _| start == at);
                assert_eq!(gone.len(), 1);
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn fork_hooks_reset_state() {
        let t: RangeTable<u8> = RangeTable::new();
        t.insert(1, 2, 1).unwrap();
        t.before_fork();
        t.after_fork_in_parent();
        t.insert(2, 3, 2).unwrap();
        t.before_fork();
        // As if a thread of the parent had been reading at the fork.
        t.readers[0].0.fetch_add(1, Ordering::Relaxed);
        t.after_fork_in_child();
        t.insert(3, 4, 3).unwrap();
        assert_eq!(t.len(), 3);
    }
}
