//! Workloads and harnesses behind `tiermem bench`.
//!
//! - [`dirty`]: the two dirty-tracking designs on read, write and
//!   read-then-write sweeps;
//! - [`faults`]: latency of one page fault by kind and fault-serving design;
//! - [`stencil`]: paper 1's 2D 9-point heat-diffusion stencil;
//! - [`modes`]: running the stencil in each mode (`none`, `sync`,
//!   `kernel-swap`) and reporting it;
//! - [`kernel_swap`]: the Linux baseline: a memory cgroup limited to the
//!   near budget with swap on zram or a swap file, set up and removed again,
//!   and [`kernel_swap::LimitedRun`], which runs any command line under it;
//! - [`overshadow`]: paper 2's experiment: reading far memory with naive
//!   access, copy-then-access, and overshadow (whole-region and per-page
//!   switch) over memory, a cold file, and an emulated slow link;
//! - [`random`]: random read-modify-write updates, where prefetch and
//!   policies cannot help;
//! - [`memory`]: the memory under the translation-overhead workloads:
//!   backings (4k, thp, 2m, 1g) and providers (by hand, tiered, segment);
//! - [`graph500`]: Graph500 BFS (generator, CSR, BFS, validation);
//! - [`gups`]: HPCC RandomAccess;
//! - [`cg`]: NPB-style conjugate gradient;
//! - [`chase`]: pointer chasing (ns per dependent access);
//! - [`translation`]: running those over backings and providers, tables
//!   normalized to 1 GiB pages and speedups over 4 KiB;
//! - [`rng`]: the workloads' deterministic random numbers;
//! - [`router`]: the fault router's lookup cost by number of ranges;
//! - [`svm`]: paper 5's workloads (bucket sort, Malstone, BFS with a black
//!   list) on the shared virtual memory in SPM and hybrid page modes;
//! - [`report`]: machine description, tables, JSON;
//! - [`plot`]: SVG charts.

pub mod cg;
pub mod chase;
pub mod dirty;
pub mod faults;
pub mod graph500;
pub mod gups;
pub mod kernel_swap;
pub mod memory;
pub mod modes;
pub mod npb;
pub mod overshadow;
pub mod plot;
pub mod pspt_model;
pub mod random;
pub mod report;
pub mod rng;
pub mod router;
pub mod stencil;
pub mod stress;
pub mod svm;
pub mod team_stencil;
pub mod translation;
