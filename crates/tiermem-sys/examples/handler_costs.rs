//! Fault latency with a classic handler thread: pinned to the faulting
//! CPU, to the other CPU, or unpinned. `cargo run --release -p tiermem-sys --example handler_costs`.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;
use tiermem_sys::mm::{MapOptions, Mapping, MemRange};
use tiermem_sys::uffd::{CopyMode, FaultEvent, Features, RegisterMode, Uffd, UffdOptions};

const PAGE: usize = 4096;
const N: usize = 20000;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p) as usize]
}

fn run_policy(handler_cpu: Option<usize>, spin: bool, idle: bool) -> Vec<f64> {
    let (map, _) = Mapping::anonymous(N * PAGE, &MapOptions::default()).unwrap();
    let uffd = Uffd::open(&UffdOptions {
        required: Features::THREAD_ID,
        nonblocking: true,
        ..Default::default()
    })
    .unwrap();
    let reg = uffd.register(&map, RegisterMode::MISSING).unwrap();
    let data = vec![7u8; PAGE];
    let stop = AtomicBool::new(false);
    let mut lat = Vec::with_capacity(N);
    std::thread::scope(|s| {
        s.spawn(|| {
            if let Some(c) = handler_cpu {
                tiermem_sys::thread::set_affinity(&[c]).unwrap();
            }
            if idle {
                let param = libc::sched_param { sched_priority: 0 };
                // SAFETY: test code; sched_setscheduler on the calling thread
                // with a valid, initialised parameter block.
                let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
                assert_eq!(r, 0, "SCHED_IDLE");
            }
            let mut ev = [FaultEvent::default(); 16];
            while !stop.load(Ordering::Relaxed) {
                if !spin {
                    let mut pfd = libc::pollfd {
                        fd: uffd.as_fd().as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: test code; one pollfd we own.
                    unsafe { libc::poll(&mut pfd, 1, 100) };
                }
                let n = uffd.read_faults(&mut ev).unwrap();
                for e in &ev[..n] {
                    let off = (e.address - map.addr()) & !(PAGE - 1);
                    uffd.copy(&reg, off, MemRange::from_bytes(&data), CopyMode::default())
                        .unwrap();
                }
            }
        });
        tiermem_sys::thread::set_affinity(&[0]).unwrap();
        for i in 0..N {
            // SAFETY: test code; aligned word in our mapping.
            let w = unsafe { &*(map.as_ptr().add(i * PAGE).cast::<AtomicU64>()) };
            let t = Instant::now();
            std::hint::black_box(w.load(Ordering::Relaxed));
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        stop.store(true, Ordering::Relaxed);
    });
    lat
}

fn main() {
    for round in 0..2 {
        for (name, cpu, spin, idle) in [
            ("handler pinned to same CPU (poll)", Some(0), false, false),
            ("handler pinned to other CPU (poll)", Some(1), false, false),
            ("handler unpinned (poll)", None, false, false),
            ("handler spinning on other CPU", Some(1), true, false),
            // A busy-polling handler under SCHED_IDLE on the faulting CPU:
            // it runs exactly while the application thread sleeps in its
            // fault, so no wake-up is needed for it.
            ("SCHED_IDLE spinner on same CPU", Some(0), true, true),
        ] {
            let mut v = run_policy(cpu, spin, idle);
            if round == 1 {
                println!(
                    "{name:<40} p50 {:7.2} us p90 {:7.2} p99 {:7.2}",
                    pct(&mut v, 0.5),
                    pct(&mut v, 0.9),
                    pct(&mut v, 0.99)
                );
            }
        }
    }
}
