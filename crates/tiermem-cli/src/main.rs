//! The `tiermem` command: what this machine offers tiermem, and the
//! benchmarks (`tiermem bench faults`, `tiermem bench stencil`).
//!
//! One module per subcommand (`info`, `env`, `hugepages`, `generate`
//! (completions and man pages from this very definition), and `bench/` with
//! one module per workload or family); this file holds only the top-level
//! [`Cmd`] and its dispatch, and `common` the helpers they share. Adding a
//! subcommand (say `run` or `stress`) takes one module with its arguments
//! and a `run` function, and one variant in [`Cmd`] with its one-line arm
//! in `main`.

use clap::{CommandFactory, Parser, Subcommand};

/// `eprintln!` in one `write(2)`: the ranks of an MPI job share one stderr,
/// and a line written in pieces interleaves with theirs.
macro_rules! say {
    ($($arg:tt)*) => {{
        let line = format!("{}\n", format_args!($($arg)*));
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }};
}

mod bench;
mod common;
mod env;
mod generate;
mod hugepages;
mod info;
mod report;
mod run;
mod stress;
mod top;

#[derive(Parser)]
#[command(
    name = "tiermem",
    version,
    about = "Application-transparent hierarchical memory for HPC"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Kernel, userfaultfd features, huge page pools, CPUs.
    Info {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The TIERMEM_* environment variables (Markdown table).
    Env,
    /// Huge page pools: show the 2 MiB and 1 GiB pools (default), or
    /// reserve and release pages (as root), reporting what the kernel gave.
    Hugepages {
        #[command(subcommand)]
        action: Option<hugepages::HugeAction>,
    },
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::Bench),
    /// Runs an unmodified program with its heap tiered over a near budget
    /// (--near 8G) or on huge pages (--page-size 2m|1g).
    Run(Box<run::RunArgs>),
    /// Random configurations and operations with every byte checked
    /// against a shadow copy; exits 1 on any mismatch.
    Stress(stress::StressArgs),
    /// The tiered processes of this node, live: near use against the
    /// budget, faults, fills, evictions and far-store traffic per second.
    Top(top::TopArgs),
    /// What `tiermem run --report` wrote: merge a job's per-rank
    /// reports, draw a run's time series.
    #[command(subcommand)]
    Report(report::ReportCmd),
    /// Shell completion script for bash, zsh, fish, elvish or powershell,
    /// on stdout (`tiermem completions bash > /etc/bash_completion.d/tiermem`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// What scripts/install.sh generates from this command's definition
    /// (hidden: not a user command).
    #[command(subcommand, hide = true)]
    Generate(generate::Generate),
}

fn main() {
    // A closed stdout ends the command quietly (`tiermem info | head -1`),
    // except `run`: it must outlive its program to pass its exit status on
    // and remove its far file, and prints nothing on stdout.
    if std::env::args().nth(1).as_deref() != Some("run") {
        tiermem_sys::process::default_sigpipe();
    }
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Info { json } => info::run(json),
        Cmd::Env => env::run(),
        Cmd::Hugepages { action } => hugepages::run(action),
        Cmd::Bench(b) => bench::run(b),
        Cmd::Run(a) => run::run(*a),
        Cmd::Stress(a) => stress::run(a),
        Cmd::Report(c) => report::run(c),
        Cmd::Completions { shell } => generate::completions(Cli::command(), shell),
        Cmd::Generate(g) => generate::run(Cli::command(), g),
        Cmd::Top(a) => top::run(a),
    };
    if let Err(e) = r {
        eprintln!("tiermem: {e}");
        std::process::exit(1);
    }
}
