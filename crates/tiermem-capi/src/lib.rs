//! tiermem's C ABI: `libtiermem.so` and `libtiermem.a`, declared by
//! `include/tiermem.h`.
//!
//! This crate is a thin, defensive translation layer over the [`tiermem`]
//! core crate and the only place in the workspace where pointers handed in
//! by C code are dereferenced. Every exported function
//!
//! - checks its pointers and enumerations (NULL or an unknown value is
//!   `TM_EINVAL`, never undefined behaviour),
//! - catches panics (`TM_EINTERNAL`, or NULL for functions that return a
//!   pointer): no unwind ever crosses `extern "C"`,
//! - reports failures as the stable negative codes of
//!   [`tiermem::ErrorCode`] and leaves the detailed message in a
//!   thread-local string read with [`tm_last_error`].
//!
//! Versioned structs (`struct tm_config`, `struct tm_stats`) start with a
//! `struct_size` field so that they can grow: a config smaller than the
//! version-1 size is refused, bytes a newer caller passes beyond what this
//! library knows must be zero; stats are filled as far as the caller's
//! struct reaches.
//!
//! ```c
//! #include <tiermem.h>
//!
//! struct tm_config cfg;
//! tm_config_init(&cfg, 64u << 20, 16u << 20);   /* 64 MiB over 16 MiB */
//! tm_region *r;
//! int rc = tm_region_create(&cfg, &r);
//! if (rc != TM_OK) {
//!     fprintf(stderr, "%s: %s\n", tm_strerror(rc), tm_last_error());
//!     return 1;
//! }
//! double *a = tm_region_base(r);
//! for (size_t i = 0; i < tm_region_size(r) / sizeof *a; i++) a[i] = i;
//! struct tm_stats st = { .struct_size = sizeof st };
//! tm_region_stats(r, &st);
//! printf("%llu evictions\n", (unsigned long long)st.evictions);
//! tm_region_destroy(r);
//! ```
//!
//! Rust programs should use the [`tiermem`] crate directly; the `rlib` of
//! this crate exists for its own tests and for linking it into Rust
//! binaries that also expose the C API.
//!
//! # Modules
//!
//! One module per API family, each re-exported here (the exported symbols
//! are the same wherever their functions are defined):
//!
//! - `config`: version, error codes, `tm_strerror` and `tm_last_error`,
//!   `struct tm_config` and its conversion to [`tiermem::Config`];
//! - `region`: `tm_region_*` and `struct tm_stats`;
//! - `global`: the process-wide heap, `tm_malloc_global`/`tm_free_global`;
//! - `advice`: `tm_prefetch` and `tm_advise`;
//! - `far`: far memory (`tm_far_*`) and overshadows (`tm_overshadow_*`);
//! - `segment`: segments (`tm_segment_*`) and huge page pools
//!   (`tm_hugepages_reserve`);
//! - `team`: team regions (`tm_team_*`);
//! - `svm`: shared virtual memory (`tm_svm_*`);
//! - `ffi`: the conventions above, in one place for all of them (pointer
//!   checks, panic catching, error codes, the thread's last error message);
//! - `tests`: the crate's tests, which call the exported functions as C does.

// The ABI's types keep their C names (`tm_config`, `tm_region`, ...).
#![allow(non_camel_case_types)]

// The signal-mask interposers (pthread_sigmask, sigaction, ...) live in
// their own crate; this links them into libtiermem.
extern crate tiermem_interpose;

mod advice;
mod codes;
mod config;
mod far;
mod ffi;
mod global;
mod region;
mod segment;
mod svm;
mod team;
#[cfg(test)]
mod tests;

pub use advice::*;
pub use codes::*;
pub use config::*;
pub use far::*;
pub use global::*;
pub use region::*;
pub use segment::*;
pub use svm::*;
pub use team::*;
