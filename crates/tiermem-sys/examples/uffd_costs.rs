//! Measures the primitive costs that shape tiermem's fault path on this
//! machine: in-context SIGBUS faults resolved by different ioctls, WP
//! faults, discards, PAGEMAP_SCAN and mprotect. Run with
//! `cargo run --release -p tiermem-sys --example uffd_costs`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Instant;
use tiermem_sys::mm::{MapOptions, Mapping, MemRange};
use tiermem_sys::pagemap::{Categories, PageRegion, PagemapScanner, ScanRequest};
use tiermem_sys::signal::{self, Disposition, FaultSignalKind, SignalFault};
use tiermem_sys::uffd::{CopyMode, Features, RegisterMode, Registration, Uffd, UffdOptions};

const PAGE: usize = 4096;
const N: usize = 20000;

struct Ctx {
    uffd: Uffd,
    reg: Registration,
    base: usize,
    zero: Vec<u8>,
    data: Vec<u8>,
}
static CTX: OnceLock<Ctx> = OnceLock::new();
static STRATEGY: AtomicUsize = AtomicUsize::new(0);

fn handler(f: &SignalFault) -> Disposition {
    let c = CTX.get().unwrap();
    if f.addr < c.base || f.addr >= c.base + c.reg.len() {
        return Disposition::Forward;
    }
    let off = (f.addr - c.base) & !(PAGE - 1);
    let wp = CopyMode {
        write_protect: true,
        dont_wake: true,
    };
    let nowp = CopyMode {
        write_protect: false,
        dont_wake: true,
    };
    match STRATEGY.load(Ordering::Relaxed) {
        0 => {
            c.uffd
                .copy(&c.reg, off, MemRange::from_bytes(&c.data), nowp)
                .unwrap();
        }
        1 => {
            c.uffd.zeropage(&c.reg, off, PAGE, true).unwrap();
        }
        2 => {
            c.uffd
                .copy(&c.reg, off, MemRange::from_bytes(&c.zero), nowp)
                .unwrap();
        }
        3 => {
            c.uffd.zeropage(&c.reg, off, PAGE, true).unwrap();
            c.uffd.writeprotect(&c.reg, off, PAGE, true, true).unwrap();
        }
        4 => {
            c.uffd
                .copy(&c.reg, off, MemRange::from_bytes(&c.zero), wp)
                .unwrap();
        }
        5 => {
            // WP fault: clear protection.
            c.uffd.writeprotect(&c.reg, off, PAGE, false, true).unwrap();
        }
        6 => {
            c.uffd
                .copy(&c.reg, off, MemRange::from_bytes(&c.data), wp)
                .unwrap();
        }
        _ => unreachable!(),
    }
    Disposition::Retry
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p) as usize]
}

fn report(name: &str, mut v: Vec<f64>) {
    let p50 = pct(&mut v, 0.5);
    let p90 = pct(&mut v, 0.9);
    let p99 = pct(&mut v, 0.99);
    println!("{name:<44} p50 {p50:7.2} us  p90 {p90:7.2}  p99 {p99:7.2}");
}

fn touch(map: &Mapping, write: bool) -> Vec<f64> {
    let mut out = Vec::with_capacity(N);
    for i in 0..N {
        // SAFETY: test code; in-bounds aligned word of our mapping.
        let w = unsafe { &*(map.as_ptr().add(i * PAGE).cast::<AtomicU64>()) };
        let t = Instant::now();
        if write {
            w.store(1, Ordering::Relaxed);
        } else {
            std::hint::black_box(w.load(Ordering::Relaxed));
        }
        out.push(t.elapsed().as_secs_f64() * 1e6);
    }
    out
}

fn main() {
    tiermem_sys::thread::set_affinity(&[0]).unwrap();
    let (map, _) = Mapping::anonymous(N * PAGE, &MapOptions::default()).unwrap();
    let uffd = Uffd::open(&UffdOptions {
        required: Features::SIGBUS | Features::PAGEFAULT_FLAG_WP,
        ..Default::default()
    })
    .unwrap();
    let reg = uffd
        .register(&map, RegisterMode::MISSING | RegisterMode::WP)
        .unwrap();
    let _ = CTX.set(Ctx {
        uffd,
        reg,
        base: map.addr(),
        zero: vec![0; PAGE],
        data: vec![7; PAGE],
    });
    signal::install(FaultSignalKind::Bus, handler, false).unwrap();
    let c = CTX.get().unwrap();
    let reset = || c.uffd.discard(&c.reg, &map, 0, N * PAGE).unwrap();

    // Warm the memory so the host has it resident.
    for round in 0..2 {
        let (plain, _) = Mapping::anonymous(N * PAGE, &MapOptions::default()).unwrap();
        let v = touch(&plain, true);
        if round == 1 {
            report("kernel first-touch write fault", v);
        }
    }
    let (plain, _) = Mapping::anonymous(N * PAGE, &MapOptions::default()).unwrap();
    report("kernel first-touch read fault (zero page)", touch(&plain, false));

    let cases: [(&str, usize, bool); 7] = [
        ("sigbus read  -> COPY 4K", 0, false),
        ("sigbus read  -> COPY 4K MODE_WP", 6, false),
        ("sigbus read  -> ZEROPAGE", 1, false),
        ("sigbus read  -> ZEROPAGE + WRITEPROTECT", 3, false),
        ("sigbus read  -> COPY zeros MODE_WP", 4, false),
        ("sigbus write -> ZEROPAGE (+kernel COW)", 1, true),
        ("sigbus write -> COPY zeros", 2, true),
    ];
    for round in 0..2 {
        for (name, s, write) in cases {
            STRATEGY.store(s, Ordering::Relaxed);
            reset();
            let v = touch(&map, write);
            if round == 1 {
                report(name, v);
            }
        }
    }
    // WP fault: install all WP'd, then write.
    reset();
    STRATEGY.store(6, Ordering::Relaxed);
    touch(&map, false);
    STRATEGY.store(5, Ordering::Relaxed);
    report("sigbus WP write fault -> WRITEPROTECT clear", touch(&map, true));

    // Discard costs, single page vs 64-page runs (single thread: no IPI).
    let t = Instant::now();
    for i in 0..N {
        c.uffd.discard(&c.reg, &map, i * PAGE, PAGE).unwrap();
    }
    println!(
        "discard 1 page (present)                     {:7.2} us",
        t.elapsed().as_secs_f64() * 1e6 / N as f64
    );
    STRATEGY.store(0, Ordering::Relaxed);
    touch(&map, true);
    let t = Instant::now();
    for i in (0..N).step_by(64) {
        c.uffd
            .discard(&c.reg, &map, i * PAGE, 64.min(N - i) * PAGE)
            .unwrap();
    }
    println!(
        "discard 64-page run, per page                {:7.2} us",
        t.elapsed().as_secs_f64() * 1e6 / N as f64
    );
    touch(&map, true);
    let t = Instant::now();
    for i in (0..N).step_by(64) {
        c.uffd
            .writeprotect(&c.reg, i * PAGE, 64.min(N - i) * PAGE, true, true)
            .unwrap();
    }
    println!(
        "writeprotect 64-page run, per page           {:7.2} us",
        t.elapsed().as_secs_f64() * 1e6 / N as f64
    );
    let s = PagemapScanner::open().unwrap();
    let mut out = [PageRegion::default(); 64];
    let t = Instant::now();
    for i in (0..N - 64).step_by(64) {
        let a = map.addr() + i * PAGE;
        s.scan(
            &ScanRequest::new(a, a + 64 * PAGE).require(Categories::WRITTEN),
            &mut out,
        )
        .unwrap();
    }
    println!(
        "PAGEMAP_SCAN 64 pages, per page              {:7.3} us",
        t.elapsed().as_secs_f64() * 1e6 / N as f64
    );
    let t = Instant::now();
    for i in (0..N - 64).step_by(64) {
        map.protect(i * PAGE, 64 * PAGE, tiermem_sys::mm::Protection::Read)
            .unwrap();
        map.protect(i * PAGE, 64 * PAGE, tiermem_sys::mm::Protection::ReadWrite)
            .unwrap();
    }
    println!(
        "mprotect RO+RW 64 pages, per page            {:7.3} us",
        t.elapsed().as_secs_f64() * 1e6 / N as f64
    );
    let t = Instant::now();
    let buf = vec![1u8; PAGE];
    let (far, _) = Mapping::anonymous(N * PAGE, &MapOptions::default()).unwrap();
    far.fill(0, N * PAGE, 1);
    for i in 0..N {
        far.copy_in(i * PAGE, MemRange::from_bytes(&buf));
    }
    println!(
        "memcpy 4 KiB                                 {:7.3} us",
        t.elapsed().as_secs_f64() * 1e6 / N as f64
    );
}
