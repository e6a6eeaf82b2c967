#!/usr/bin/env bash
# Sets tiermem up on a fresh machine and runs the whole test suite: format
# and lint checks, the Rust unit and integration tests (kernel interface,
# regions, stress, errors, fork, huge pages, benchmarks' own tests), and the
# C API tests (C example, C tests, C++ header check). Tests that need root
# (mounting a full tmpfs, reserving huge pages, kernel-swap setup) set up
# what they need and restore the machine, or print "skipped: <why>".
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

step() { echo; echo "== $*"; }

step "cargo fmt --check"
if cargo fmt --version >/dev/null 2>&1; then cargo fmt --all -- --check; else echo "skipped: rustfmt not installed"; fi

step "cargo clippy -D warnings"
if cargo clippy --version >/dev/null 2>&1; then
    cargo clippy --locked --workspace --all-targets -- -D warnings
else
    echo "skipped: clippy not installed"
fi

step "cargo test (workspace)"
# Test binaries run one after another; tests inside a binary in parallel.
TIERMEM_STRESS_SECS="${TIERMEM_STRESS_SECS:-2}" cargo test --locked --workspace

step "C API: example, C tests, C++ header"
bash scripts/ctest.sh

step "tiermem command smoke test"
cargo build --locked --release -p tiermem-cli
target/release/tiermem info >/dev/null
target/release/tiermem bench faults --pages 256 --rounds 1 --json target/smoke-faults.json >/dev/null
target/release/tiermem bench stencil --virt 64M --near 32M --iters 2 --modes none,sync \
    --json target/smoke-stencil.json >/dev/null
target/release/tiermem bench stencil --virt 16M --near 8M --threads 2 --iters 2 --evict-batch 1 \
    --modes team-none,regular,pspt+sharer --json target/smoke-team.json --plot target/smoke-team.svg >/dev/null
target/release/tiermem bench team-evict --evict-batch 64 --json target/smoke-team-evict.json >/dev/null
target/release/tiermem bench overshadow --sizes 1M --rounds-small 1 --fars memory,link \
    --json target/smoke-overshadow.json --plot target/smoke-overshadow.svg >/dev/null
target/release/tiermem bench svm --keys 65536 --records 65536 --sites 1024 --scale 10 --roots 1 \
    --black-list 512 --procs 1,2 --json target/smoke-svm.json --plot target/smoke-svm.svg >/dev/null
echo
echo "all tests passed"
