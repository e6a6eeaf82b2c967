//! Per-page cost of moving data into and out of a registered region in
//! batches, for mover threads: UFFDIO_COPY of a multi-page run from a far
//! pool (and MADV_DONTNEED to evict), against frame recycling with
//! UFFDIO_MOVE (memcpy far -> staging frame, MOVE in; MOVE out to evict,
//! keeping the frame). `cargo run --release -p tiermem-sys --example install_costs`.

use std::os::fd::AsFd;
use std::time::Instant;
use tiermem_sys::memfd::Memfd;
use tiermem_sys::mm::{MapOptions, Mapping};
use tiermem_sys::uffd::{CopyMode, Features, RegisterMode, Uffd, UffdOptions};

const PAGE: usize = 4096;
const PAGES: usize = 32768; // 128 MiB
const BATCH: usize = 64;

fn main() {
    let far_fd = Memfd::create("far", false).unwrap();
    far_fd.set_len((PAGES * PAGE) as u64).unwrap();
    let (far, _) = Mapping::shared(far_fd.as_fd(), 0, PAGES * PAGE, PAGE, &MapOptions::default()).unwrap();
    far.fill(0, PAGES * PAGE, 0x5a);
    let (region, _) = Mapping::anonymous(PAGES * PAGE, &MapOptions::default()).unwrap();
    let (staging, _) = Mapping::anonymous(PAGES * PAGE, &MapOptions::default()).unwrap();
    let uffd = Uffd::open(&UffdOptions {
        required: Features::MOVE | Features::PAGEFAULT_FLAG_WP,
        ..Default::default()
    })
    .unwrap();
    let reg = uffd
        .register(&region, RegisterMode::MISSING | RegisterMode::WP)
        .unwrap();
    // Populate every staging frame before registering the staging area:
    // MOVE needs its destination registered with the same descriptor, and
    // a touch of a hole in a registered range would block forever (this
    // experiment has no fault handler). From here on staging is only
    // touched where it holds frames.
    staging.fill(0, PAGES * PAGE, 1);
    let sreg = uffd.register(&staging, RegisterMode::MISSING).unwrap();
    let per_page = |t: Instant| t.elapsed().as_secs_f64() * 1e6 / PAGES as f64;
    for round in 0..3 {
        // COPY in batches, then DONTNEED in batches.
        let t = Instant::now();
        for b in (0..PAGES).step_by(BATCH) {
            let off = b * PAGE;
            uffd.copy(
                &reg,
                off,
                far.range(off, BATCH * PAGE),
                CopyMode {
                    write_protect: true,
                    dont_wake: true,
                },
            )
            .unwrap();
        }
        let copy_in = per_page(t);
        let t = Instant::now();
        for b in (0..PAGES).step_by(BATCH) {
            uffd.discard(&reg, &region, b * PAGE, BATCH * PAGE).unwrap();
        }
        let dontneed = per_page(t);
        // Staging holds frames here (populated at start, or moved out by
        // the previous round).
        let t = Instant::now();
        for b in (0..PAGES).step_by(BATCH) {
            let off = b * PAGE;
            staging.copy_in(off, far.range(off, BATCH * PAGE));
        }
        let memcpy_first = per_page(t);
        let t = Instant::now();
        for b in (0..PAGES).step_by(BATCH) {
            let off = b * PAGE;
            uffd.move_in(&reg, off, &staging, off, BATCH * PAGE, false)
                .unwrap();
        }
        let move_in = per_page(t);
        let t = Instant::now();
        for b in (0..PAGES).step_by(BATCH) {
            let off = b * PAGE;
            uffd.move_out(&reg, off, &sreg, off, BATCH * PAGE).unwrap();
        }
        let move_out = per_page(t);
        // Recycled frames: memcpy new data into the frames we got back.
        let t = Instant::now();
        for b in (0..PAGES).step_by(BATCH) {
            let off = b * PAGE;
            staging.copy_in(off, far.range(off, BATCH * PAGE));
        }
        let memcpy_recycled = per_page(t);
        // Leave staging populated but region empty for the next round.
        if round > 0 {
            println!(
                "per page, batches of {BATCH}: COPY in {copy_in:.2} us + DONTNEED {dontneed:.2} us = {:.2} | \
                 memcpy into fresh frame {memcpy_first:.2}, into recycled frame {memcpy_recycled:.2}, MOVE in {move_in:.2}, MOVE out {move_out:.2}: \
                 recycled cycle {:.2} us",
                copy_in + dontneed,
                memcpy_recycled + move_in + move_out
            );
        }
        // Staging now holds frames (moved out); the next round's "first"
        // memcpy therefore also writes into recycled frames.
    }
}
