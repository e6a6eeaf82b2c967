#!/usr/bin/env bash
# Sets tiermem up on a fresh machine and runs the main job on its built-in
# defaults: what the machine offers, the fault-latency benchmark, and paper
# 1's stencil (1 GiB over a 512 MiB budget, 2 threads, 25 iterations) with
# no data movement, tiermem, and Linux swap on zram under a memory cgroup.
# Results (tables, JSON, SVG plots) go to results/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

cargo build --release --locked -p tiermem-cli -p tiermem-capi
bin=target/release/tiermem
mkdir -p results

echo "== tiermem info"
"$bin" info | tee results/info.txt

echo "== tiermem bench faults"
"$bin" bench faults --json results/faults.json --plot results/faults.svg | tee results/faults.txt

echo "== tiermem bench stencil"
"$bin" bench stencil --virt 1G --near 512M --threads 2 --iters 25 \
    --modes none,sync,kernel-swap \
    --json results/stencil.json --plot results/stencil.svg | tee results/stencil.txt

echo "Results are in results/ (JSON, tables, SVG plots)."
