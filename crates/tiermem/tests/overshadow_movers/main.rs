//! Overshadow with two mover threads (a process of its own: the mover pool
//! is configured once, before the first overshadow starts it).

use std::sync::atomic::Ordering::Relaxed;
use tiermem::far::FarMemory;
use tiermem::overshadow::{configure_movers, mover_config, LinkEmulation, MoverConfig, Options, Overshadow};
use tiermem::Error;

#[test]
fn two_movers_share_the_chunks_of_several_overshadows() {
    let cpus = tiermem_sys::thread::online_cpus();
    assert!(matches!(
        configure_movers(MoverConfig {
            movers: 0,
            cpus: vec![]
        }),
        Err(Error::Usage(_))
    ));
    assert!(matches!(
        configure_movers(MoverConfig {
            movers: 1,
            cpus: vec![cpus]
        }),
        Err(Error::Usage(_))
    ));
    let config = MoverConfig {
        movers: 2,
        cpus: (0..cpus).collect(),
    };
    configure_movers(config.clone()).unwrap();
    let fars: Vec<FarMemory> = (0..3).map(|_| FarMemory::alloc(6 << 20).unwrap()).collect();
    for (k, f) in fars.iter().enumerate() {
        for (i, w) in f.as_atomic_u64().iter().enumerate() {
            w.store((i * 3 + k) as u64, Relaxed);
        }
    }
    let opts = Options {
        link: Some(LinkEmulation {
            bandwidth_bytes_per_s: 200e6,
            latency_us: 20.0,
        }),
        ..Default::default()
    };
    let oss: Vec<Overshadow> = fars
        .iter()
        .map(|f| Overshadow::create(f.addr(), f.len(), &opts).unwrap())
        .collect();
    assert_eq!(mover_config(), config, "started as configured");
    assert!(
        matches!(configure_movers(config), Err(Error::Usage(_))),
        "too late once started"
    );
    for (k, os) in oss.iter().enumerate() {
        os.as_atomic_u64()[5000].store(7, Relaxed);
        os.wait().unwrap();
        for (i, w) in os.as_atomic_u64().iter().enumerate() {
            let want = if i == 5000 { 7 } else { (i * 3 + k) as u64 };
            assert_eq!(w.load(Relaxed), want, "overshadow {k} word {i}");
        }
    }
}
