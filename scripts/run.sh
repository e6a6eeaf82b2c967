#!/usr/bin/env bash
# Sets tiermem up on a fresh machine and runs the main job on its built-in
# defaults: what the machine offers, the fault-latency benchmark, paper 1's
# stencil (1 GiB over a 512 MiB budget, 1 application thread and a mover
# thread, 25 iterations) with no data movement, synchronous tiermem,
# tiermem with movers and prefetch (FIFO and scan-resistant replacement),
# and Linux swap on zram under a memory cgroup, a short random-update run
# per replacement policy, and an unmodified program (examples/c/heat.c,
# 1 GiB of malloc'd grids) run plain and under `tiermem run` over a 512 MiB
# budget. Results (tables, JSON, SVG plots) go to results/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

cargo build --release --locked -p tiermem-cli -p tiermem-capi -p tiermem-preload
bin=target/release/tiermem
mkdir -p results

echo "== tiermem info"
"$bin" info | tee results/info.txt

echo "== tiermem bench faults"
"$bin" bench faults --json results/faults.json --plot results/faults.svg | tee results/faults.txt

echo "== tiermem bench stencil"
"$bin" bench stencil --virt 1G --near 512M --threads 1 --iters 25 \
    --modes none,sync,prefetch,kernel-swap --policy fifo,scan \
    --json results/stencil.json --plot results/stencil.svg | tee results/stencil.txt

echo "== tiermem bench random"
"$bin" bench random --virt 256M --near 128M --updates 200000 --rounds 3 \
    --json results/random.json --plot results/random.svg | tee results/random.txt

echo "== an unmodified program under tiermem run (examples/c/heat.c, 1 GiB over 512 MiB)"
cc -O2 -fopenmp examples/c/heat.c -o target/release/heat
export OMP_NUM_THREADS=1
{
    echo "plain:"
    target/release/heat 8192 10
    echo "tiermem run, synchronous:"
    "$bin" run --near 512M --report results/heat-sync.json -- target/release/heat 8192 10
    echo "tiermem run, a mover thread on CPU 1, scan-resistant policy:"
    "$bin" run --near 512M --movers 1 --mover-cpus 1 --policy scan \
        --report results/heat-movers.json -- target/release/heat 8192 10
} 2>&1 | tee results/heat.txt

echo "Results are in results/ (JSON, tables, SVG plots)."
