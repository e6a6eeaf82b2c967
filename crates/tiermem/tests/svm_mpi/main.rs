//! The SVM inside MPI jobs (cargo feature `mpi`): the litmus tests of scope
//! and release consistency, a byte-verifying stress test, failures and bad
//! use, each run by `mpirun` with this test binary as the program:
//!
//! - one node: `mpirun -np 2` and `-np 4` (oversubscribed on 2 CPUs);
//! - two nodes: network namespaces on a bridge (`scripts/mpi-nodes.sh`,
//!   set up and torn down by the test, as root): one Open MPI daemon per
//!   node, TCP between them, no shared memory across them; 2 ranks (1 + 1)
//!   and 4 ranks (2 + 2). Without root or `ip`, the test says so and runs
//!   two *simulated* nodes on one namespace instead
//!   (`TIERMEM_SVM_RANKS_PER_NODE`: same code paths in tiermem, MPI over
//!   shared memory underneath).
//!
//! Each `#[test]` launches `mpirun`; inside it every rank runs this binary
//! again with `--exact <test>` and `TIERMEM_MPI_TEST_BODY` set, and the
//! test function runs the body (a panic fails the rank, and mpirun then
//! ends the job). Modes per rank, as in `tests/svm`: `spm` (SPM everywhere;
//! pages homed on another node are release-consistent cached copies),
//! `dsm`, and `mixed` (DSM in even ranks, SPM in odd ones); on one node
//! also the noncoherent flavours.
//!
//! Skipped with a message when `mpirun` is missing.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/svm_litmus.rs"]
mod litmus;

use common::mix;
use litmus::{check, refused, Kind, PAGE};
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};
use tiermem::svm::{Distribution, SpmFlavour, Svm, SvmConfig, SvmMode, SvmProc};
use tiermem::Error;

const BODY: &str = "TIERMEM_MPI_TEST_BODY";
/// Nodes the launcher made (the bodies' expectations depend on it).
const NODES: &str = "TIERMEM_MPI_TEST_NODES";

// ---------------------------------------------------------------- launcher

/// How the ranks are spread.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    OneNode,
    /// Two network namespaces.
    TwoNodes,
    /// Two groups of ranks on one namespace (`TIERMEM_SVM_RANKS_PER_NODE`).
    TwoSimulated,
}

struct Run {
    ok: bool,
    output: String,
    seconds: f64,
}

fn have_mpirun() -> bool {
    Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn nodes_script() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/mpi-nodes.sh").to_string()
}

/// Two namespace nodes for the life of the value.
struct NetNodes {
    tag: String,
    options: Vec<String>,
}

impl NetNodes {
    fn up() -> Result<NetNodes, String> {
        let tag = format!("tm{}", std::process::id() % 100_000);
        let out = Command::new(nodes_script())
            .args(["up", &tag, "2"])
            .output()
            .map_err(|e| format!("cannot run {}: {e}", nodes_script()))?;
        if !out.status.success() {
            let _ = Command::new(nodes_script()).args(["down", &tag, "2"]).output();
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        let options = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(String::from)
            .collect();
        Ok(NetNodes { tag, options })
    }
}

impl Drop for NetNodes {
    fn drop(&mut self) {
        let _ = Command::new(nodes_script())
            .args(["down", &self.tag, "2"])
            .output();
    }
}

/// Runs `body` of test `test` on `np` ranks; kills the job after `limit`.
fn mpirun(test: &str, body: &str, np: usize, layout: Layout, net: Option<&NetNodes>, limit: Duration) -> Run {
    let exe = std::env::current_exe().unwrap();
    let nodes = if layout == Layout::OneNode { 1 } else { 2 };
    let mut c = Command::new("mpirun");
    c.args(["-np", &np.to_string(), "--oversubscribe"])
        .args(["--mca", "osc", "ucx"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env(BODY, body)
        .env(NODES, nodes.to_string())
        .args(["-x", BODY, "-x", NODES, "-x", "RUST_BACKTRACE"]);
    match layout {
        Layout::OneNode => {
            c.args(["--bind-to", "none"]);
        }
        Layout::TwoSimulated => {
            c.args(["--bind-to", "none", "--map-by", "slot"])
                .env("TIERMEM_SVM_RANKS_PER_NODE", (np / 2).to_string())
                .args(["-x", "TIERMEM_SVM_RANKS_PER_NODE"]);
        }
        Layout::TwoNodes => {
            c.args(&net.expect("namespace nodes").options);
        }
    }
    c.arg(&exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = c.spawn().expect("starting mpirun");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let readers = (
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        }),
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        }),
    );
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = format!(
        "{}{}",
        readers.0.join().unwrap_or_default(),
        readers.1.join().unwrap_or_default()
    );
    let ok = status.is_some_and(|s| s.success());
    let seconds = t0.elapsed().as_secs_f64();
    if status.is_none() {
        return Run {
            ok: false,
            output: format!("{output}\n(killed after {limit:?}: hung)"),
            seconds,
        };
    }
    Run { ok, output, seconds }
}

/// One job at a time: the tests of this binary run in parallel threads,
/// and two jobs on 2 CPUs would only slow each other down.
static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `body` on every layout and rank count of `cases`; panics with the
/// job's output on failure.
fn launch(test: &str, body: &str, cases: &[(usize, Layout)]) {
    let _one = ONE_JOB.lock().unwrap_or_else(|p| p.into_inner());
    if !have_mpirun() {
        eprintln!("skipped: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)");
        return;
    }
    let needs_net = cases.iter().any(|c| c.1 == Layout::TwoNodes);
    let net = if needs_net {
        match NetNodes::up() {
            Ok(n) => Some(n),
            Err(e) => {
                eprintln!(
                    "skipped two namespace nodes ({e}): running two simulated nodes in one namespace instead"
                );
                None
            }
        }
    } else {
        None
    };
    for &(np, layout) in cases {
        let layout = if layout == Layout::TwoNodes && net.is_none() {
            Layout::TwoSimulated
        } else {
            layout
        };
        let r = mpirun(test, body, np, layout, net.as_ref(), Duration::from_secs(120));
        eprintln!("{body}: {np} ranks, {layout:?}: {:.1} s", r.seconds);
        assert!(r.ok, "{body}: {np} ranks, {layout:?} failed:\n{}", r.output);
    }
}

/// Inside a rank: the body to run, if this process is one.
fn body() -> Option<String> {
    std::env::var(BODY).ok()
}

fn nodes() -> usize {
    std::env::var(NODES)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

// ---------------------------------------------------------------- bodies

/// The kinds a job runs: the noncoherent flavours only on one node.
fn kinds() -> Vec<Kind> {
    let mut k = vec![Kind::SpmCoherent, Kind::Dsm, Kind::Mixed];
    if nodes() == 1 {
        k.extend([Kind::SpmNoncoherent, Kind::MixedNc]);
    }
    k
}

fn svm(kind: Kind, heap: usize) -> Svm {
    let mut cfg = SvmConfig::new(heap, 0);
    cfg.flavour = kind.flavour();
    let s = Svm::new(cfg).unwrap();
    assert_eq!(s.nodes(), nodes(), "tiermem sees the launcher's nodes");
    s
}

fn alloc(p: &SvmProc<'_>, kind: Kind, pages: usize) -> Result<usize, Error> {
    litmus::alloc(p, kind.mode(p.rank()), pages)
}

/// Runs `f` in every kind; a failure names the kind.
fn each(name: &str, f: impl Fn(&SvmProc<'_>, Kind) -> Result<(), Error> + Sync) {
    for kind in kinds() {
        let s = svm(kind, 4 << 20);
        if let Err(e) = s.run(|p| f(p, kind)) {
            panic!("{name}: {kind:?}: {e}");
        }
    }
}

// Litmus 1, message passing under one lock (the last rank writes): a
// reader that sees the flag sees the data, in every mode.
fn message_passing() {
    each("message passing", |p, kind| {
        litmus::message_passing(p, kind.mode(p.rank()), p.procs() - 1, Duration::from_secs(20))
    });
}

// Litmus 2, scope: x written under lock 1, y under lock 2; a process that
// cached x's page and acquires only lock 2 sees y = 1 and then x:
// - SPM reader: x = 1 (release consistency; across nodes SPM is a cached
//   copy validated at every acquire);
// - DSM reader: stale x allowed by scope consistency and produced here
//   (x = 0), except in `mixed` with 3+ ranks where an SPM-coherent writer
//   of y reports conservatively (x = 0 or 1).
// With 3+ ranks the chain is transitive over ranks 0, 1, 2 (on two nodes
// ranks 0 and 2 share a node, 1 is on the other).
fn scope() {
    each("scope", |p, kind| {
        let lenient = matches!(kind, Kind::Mixed | Kind::MixedNc) && p.procs() > 2;
        litmus::scope(p, kind.mode(p.rank()), kind, lenient, |p| {
            // Everyone past the barrier's validation before x is written.
            p.allreduce_sum(0)?;
            Ok(Instant::now() + Duration::from_secs(20))
        })
    });
}

// Litmus 3, barriers, over three pages.
fn barriers() {
    each("barriers", |p, kind| litmus::barriers(p, kind.mode(p.rank()), 3));
}

fn false_sharing() {
    each("false sharing", |p, kind| {
        litmus::false_sharing(p, kind.mode(p.rank()))
    });
}

fn adjacent_bytes() {
    each("adjacent bytes", |p, kind| {
        litmus::adjacent_bytes(p, kind.mode(p.rank()))
    });
}

// Mode switches while dirty, between barriers (on two nodes, pages homed
// on the other node switch between a release-consistent copy and DSM).
fn mode_switches() {
    each("mode switches", |p, kind| {
        litmus::mode_switches(p, kind.mode(p.rank()))
    });
}

/// Every thread tiermem started in this rank (named `tiermem-*`; the MPI
/// progress thread across nodes) blocks the application's asynchronous
/// signals: a timer or a process-directed signal never runs a handler on
/// it.
fn runtime_threads_block_async_signals() {
    let s = svm(Kind::Dsm, 1 << 20);
    // (name, SigBlk) of this process's threads named tiermem-*. A thread
    // names itself once it runs: wait for the progress thread's name.
    let tiermem_threads = || {
        let mut seen = Vec::new();
        for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let dir = t.path();
            let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
                continue;
            };
            let comm = comm.trim().to_string();
            if !comm.starts_with("tiermem") {
                continue;
            }
            let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
            let blocked = status
                .lines()
                .find_map(|l| l.strip_prefix("SigBlk:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .unwrap_or(0);
            seen.push((comm, blocked));
        }
        seen
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = tiermem_threads();
    while nodes() > 1 && !seen.iter().any(|(c, _)| c.starts_with("tiermem-mpi-pro")) {
        assert!(
            Instant::now() < deadline,
            "no MPI progress thread found among {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
        seen = tiermem_threads();
    }
    for (comm, blocked) in &seen {
        for sig in [libc::SIGALRM, libc::SIGPROF, libc::SIGUSR1, libc::SIGTERM] {
            assert!(
                blocked & (1 << (sig - 1)) != 0,
                "thread {comm} leaves signal {sig} open: SigBlk {blocked:#x}"
            );
        }
    }
    drop(s);
}

fn litmus() {
    runtime_threads_block_async_signals();
    message_passing();
    scope();
    barriers();
    false_sharing();
    adjacent_bytes();
    mode_switches();
}

/// Stress: lock and barrier churn over a multi-page array (homes cyclic
/// and block), every byte verified. Each round a seeded random plan
/// assigns every byte to a rank and a lock (or none); ranks write their
/// bytes (under the lock, if any); after a barrier every rank checks every
/// byte. Plus lock counters on one page, incremented by everybody.
fn stress() {
    const ROUNDS: u64 = 8;
    let configs = [
        (Kind::Dsm, Distribution::Block),
        (Kind::Mixed, Distribution::Cyclic),
        (Kind::SpmCoherent, Distribution::Cyclic),
    ];
    for (kind, dist) in configs {
        {
            let t0 = Instant::now();
            let s = svm(kind, 4 << 20);
            let r = s.run(|p| {
                let (me, n) = (p.rank(), p.procs());
                let pages = 6;
                let a = p.malloc_distributed(pages * PAGE, dist)?;
                p.set_mode(a, pages * PAGE, kind.mode(me))?;
                let c = alloc(p, kind, 1)?;
                let b = p.bytes(a, pages * PAGE)?;
                let counters = p.u64s(c, 8)?;
                let mut want = vec![0u8; pages * PAGE];
                for round in 0..ROUNDS {
                    // Owner and lock of every byte this round (same plan in
                    // every rank): owners per byte (false sharing
                    // everywhere), locks per 1 KiB chunk.
                    let plan = |k: usize| {
                        let owner = (mix(round << 32 | k as u64) % n as u64) as usize;
                        (owner, mix(round << 40 | (k / 1024) as u64) % 5)
                    };
                    let mut held = None;
                    for (k, x) in b.iter().enumerate() {
                        let (owner, lock) = plan(k);
                        if owner != me {
                            continue;
                        }
                        let lock = (lock < 4).then_some(lock as usize);
                        if held != lock {
                            if let Some(l) = held {
                                p.unlock(20 + l)?;
                            }
                            if let Some(l) = lock {
                                p.lock(20 + l)?;
                            }
                            held = lock;
                        }
                        x.store(mix(round ^ (k as u64) << 8) as u8, Relaxed);
                    }
                    if let Some(l) = held {
                        p.unlock(20 + l)?;
                    }
                    for i in 0..10usize {
                        let id = (i + me + round as usize) % 8;
                        p.lock(id)?;
                        counters[id].store(counters[id].load(Relaxed) + 1, Relaxed);
                        p.unlock(id)?;
                    }
                    p.barrier()?;
                    for (k, w) in want.iter_mut().enumerate() {
                        *w = mix(round ^ (k as u64) << 8) as u8;
                    }
                    for (k, x) in b.iter().enumerate() {
                        let v = x.load(Relaxed);
                        check(v == want[k], || {
                            format!("round {round} byte {k}: {v:#x}, want {:#x}", want[k])
                        })?;
                    }
                    let total: u64 = counters.iter().map(|x| x.load(Relaxed)).sum();
                    check(total == 10 * n as u64 * (round + 1), || {
                        format!("round {round}: counters {total}")
                    })?;
                    p.barrier()?;
                }
                Ok(())
            });
            if let Err(e) = r {
                panic!("stress {kind:?} {dist:?}: {e}");
            }
            // The home copies after the run, read from rank 0.
            let mut home = vec![0u8; 6 * PAGE];
            s.read_home(s.base(), &mut home).unwrap();
            for (k, &v) in home.iter().enumerate() {
                assert_eq!(
                    v,
                    mix((ROUNDS - 1) ^ (k as u64) << 8) as u8,
                    "home byte {k} after the run"
                );
            }
            if s.mpi_rank() == Some(0) {
                eprintln!("stress {kind:?} {dist:?}: {:.1} s", t0.elapsed().as_secs_f64());
            }
        }
    }
}

/// A rank whose run fails stops the others at their next wait, with an
/// error naming it; every rank returns an error.
fn failing_rank() {
    let s = svm(Kind::Dsm, 1 << 20);
    let t0 = Instant::now();
    let r = s.run(|p| {
        litmus::rank_1_takes_lock(p, SvmMode::Dsm, 5)?;
        if p.rank() == 1 {
            return Err(Error::Usage("rank 1 gives up".into()));
        }
        p.barrier()
    });
    let e = r.expect_err("the run fails").to_string();
    if s.mpi_rank() == Some(1) {
        assert!(e.contains("gives up"), "{e}");
    } else {
        assert!(e.contains("rank 1 failed"), "{e}");
    }
    assert!(t0.elapsed() < Duration::from_secs(20), "took {:?}", t0.elapsed());
}

/// A rank that dies holding a lock: the others do not wait for ever.
/// Ranks of its node see that its pid is gone and fail with an error
/// naming it (printed here as `told: ...`); on other nodes, Open MPI's
/// launcher ends the job when the rank dies.
fn dying_rank() {
    let s = svm(Kind::Dsm, 1 << 20);
    let r = s.run(|p| {
        litmus::rank_1_takes_lock(p, SvmMode::Dsm, 5)?;
        p.allreduce_sum(0)?; // rank 1 holds the lock now
        if p.rank() == 1 {
            std::process::abort();
        }
        p.lock(5)?;
        Err(Error::Usage("took a lock held by a dead rank".into()))
    });
    match r {
        Err(e) if e.to_string().contains("died") => eprintln!("told: {e}"),
        other => panic!(
            "rank {:?} went on after a dead lock holder: {other:?}",
            s.mpi_rank()
        ),
    }
}

/// Bad use inside an MPI job gets the errors it gets on one node.
fn bad_use() {
    let mut cfg = SvmConfig::new(1 << 20, 3);
    cfg.flavour = SpmFlavour::Coherent;
    let e = Svm::new(cfg)
        .err()
        .expect("procs 3 in a job of 2 ranks")
        .to_string();
    assert!(e.contains("pass 0 or 2"), "{e}");
    if nodes() > 1 {
        let mut cfg = SvmConfig::new(1 << 20, 0);
        cfg.flavour = SpmFlavour::Noncoherent;
        assert!(Svm::new(cfg).is_err(), "noncoherent flavour across nodes");
    }
    let s = svm(Kind::Dsm, 64 * PAGE);
    s.run(|p| {
        let a = litmus::refuses_bad_arguments(p)?;
        refused(p.unlock(4), "unlock of a lock homed on rank 0 or 1, not held")?;
        // An unbalanced collective malloc is refused in every rank.
        let size = if p.rank() == 0 { PAGE } else { 3 * PAGE };
        let e = p.malloc(size).err();
        check(
            e.as_ref()
                .is_some_and(|e| e.to_string().contains("calls must match")),
            || format!("mismatched collective malloc: {e:?}"),
        )?;
        let b = p.malloc(2 * PAGE)?;
        check(b == a + PAGE, || format!("the next malloc continues: {b:#x}"))?;
        let full = p.malloc(62 * PAGE);
        check(matches!(full, Err(Error::GlobalHeapFull(_))), || {
            "heap exhausted".into()
        })?;
        p.free(b)?;
        p.free(a)?;
        let c = p.malloc(PAGE)?;
        check(c == a, || "freed block reused".into())?;
        Ok(())
    })
    .unwrap();
}

/// Not a test: prints the cost of the protocol's operations (run it by
/// hand with `TIERMEM_MPI_TEST_BODY=ops`).
fn ops() {
    let s = svm(Kind::Dsm, 16 << 20);
    s.run(|p| {
        let a = p.malloc_distributed(256 * PAGE, Distribution::Cyclic)?;
        p.set_mode(a, 256 * PAGE, SvmMode::Dsm)?;
        p.barrier()?;
        let me = p.rank();
        let t = Instant::now();
        let n = 200;
        for _ in 0..n {
            p.lock(me)?;
            p.unlock(me)?;
        }
        let own = t.elapsed().as_secs_f64() / n as f64;
        let other = (me + 1) % p.procs();
        let t = Instant::now();
        for _ in 0..n {
            p.lock(other)?;
            p.unlock(other)?;
        }
        let far = t.elapsed().as_secs_f64() / n as f64;
        p.barrier()?;
        let w = p.u64s(a, 256 * PAGE / 8)?;
        let t = Instant::now();
        let mut sum = 0u64;
        for pg in (0..256).step_by(p.procs()) {
            sum = sum.wrapping_add(w[(pg + other) * PAGE / 8].load(Relaxed));
        }
        let fetch = t.elapsed().as_secs_f64() / (256 / p.procs()) as f64;
        std::hint::black_box(sum);
        let t = Instant::now();
        for _ in 0..50 {
            p.barrier()?;
        }
        let bar = t.elapsed().as_secs_f64() / 50.0;
        let st = p.stats();
        eprintln!(
            "rank {me}: lock+unlock of own lock {:.1} us, of rank {other}'s {:.1} us; fault on a page of rank {other} {:.1} us; barrier {:.1} us; {st:?}",
            own * 1e6, far * 1e6, fetch * 1e6, bar * 1e6
        );
        Ok(())
    })
    .unwrap();
}

fn run_body(name: &str) {
    match name {
        "ops" => ops(),
        "litmus" => litmus(),
        "stress" => stress(),
        "failing" => failing_rank(),
        "dying" => dying_rank(),
        "bad" => bad_use(),
        other => panic!("unknown body {other}"),
    }
}

// ---------------------------------------------------------------- tests

/// A test that launches `mpirun` on `body` in each of `cases` (ranks,
/// layout); inside the job (`TIERMEM_MPI_TEST_BODY` set) it runs the body.
macro_rules! mpi_test {
    ($name:ident, $body:literal, $cases:expr) => {
        #[test]
        fn $name() {
            if let Some(b) = body() {
                return run_body(&b);
            }
            launch(stringify!($name), $body, $cases);
        }
    };
}

mpi_test!(
    litmus_one_node,
    "litmus",
    &[(2, Layout::OneNode), (4, Layout::OneNode)]
);

mpi_test!(
    litmus_two_nodes,
    "litmus",
    &[(2, Layout::TwoNodes), (4, Layout::TwoNodes)]
);

mpi_test!(
    stress_every_byte_verified,
    "stress",
    &[(3, Layout::OneNode), (4, Layout::TwoNodes)]
);

mpi_test!(
    a_failing_rank_stops_the_others,
    "failing",
    &[(3, Layout::TwoNodes)]
);

mpi_test!(bad_use_is_refused_in_an_mpi_job, "bad", &[(2, Layout::TwoNodes)]);

#[test]
fn a_dying_rank_ends_the_job_instead_of_hanging() {
    if let Some(b) = body() {
        return run_body(&b);
    }
    let _one = ONE_JOB.lock().unwrap_or_else(|p| p.into_inner());
    if !have_mpirun() {
        eprintln!("skipped: mpirun not found");
        return;
    }
    let net = NetNodes::up()
        .map_err(|e| eprintln!("skipped two namespace nodes: {e}"))
        .ok();
    let mut layouts = vec![Layout::OneNode];
    if net.is_some() {
        layouts.push(Layout::TwoNodes);
    }
    for layout in layouts {
        let name = "a_dying_rank_ends_the_job_instead_of_hanging";
        let r = mpirun(name, "dying", 3, layout, net.as_ref(), Duration::from_secs(60));
        eprintln!("dying: 3 ranks, {layout:?}: {:.1} s", r.seconds);
        let out = &r.output;
        assert!(!r.ok, "{layout:?}: the job must fail:\n{out}");
        assert!(
            !out.contains("hung") && !out.contains("went on"),
            "{layout:?}:\n{out}"
        );
        assert!(r.seconds < 30.0, "{layout:?}: took {:.1} s", r.seconds);
        if layout == Layout::OneNode {
            // Ranks 0 and 2 share rank 1's node: both are told.
            assert_eq!(out.matches("told: ").count(), 2, "{out}");
            assert!(out.contains("rank 1") && out.contains("died"), "{out}");
        } else {
            assert!(out.contains("rank 1") || out.contains("told: "), "{out}");
        }
    }
}
