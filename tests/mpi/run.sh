#!/usr/bin/env bash
# `tiermem run` under a real mpirun (issue 33): per-rank budgets that split
# the node's share among its local ranks, one report per rank (%r), the
# rank in each summary, `tiermem report merge` over the reports; on one
# node with -np 2 and -np 4 (oversubscribed), and on two network-namespace
# nodes of scripts/mpi-nodes.sh with two ranks each (root only). Needs
# mpirun and mpicc (scripts/test.sh's MPI step installs Open MPI first);
# without them: "skipped: <why>".
set -euo pipefail
cd "$(dirname "$0")/../.."
T=$PWD/${TIERMEM:-target/release/tiermem}
out=$PWD/target/mpi-run
if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
    echo "skipped: tiermem run under mpirun: no mpirun/mpicc (apt-get install openmpi-bin libopenmpi-dev)"
    exit 0
fi
rm -rf "$out" && mkdir -p "$out"
# A plain C program: mpicc is only a check that Open MPI is whole.
cc -O2 tests/mpi/alloc.c -o "$out/alloc"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mem=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) * 1024 ))
# case NAME NP EXPECT MPIRUN-OPTIONS -- TIERMEM-RUN-OPTIONS
case_() {
    local name=$1 np=$2 expect=$3; shift 3
    local mpi=()
    while [ "$1" != -- ]; do mpi+=("$1"); shift; done
    shift
    local d="$out/$name"
    mkdir -p "$d"
    if ! timeout 300 mpirun -np "$np" --bind-to none "${mpi[@]}" \
        "$T" run "$@" --report "$d/r-%r.json" -- "$out/alloc" 48 >"$d/out" 2>&1; then
        cat "$d/out"; echo "FAIL $name: mpirun"; exit 1
    fi
    python3 tests/mpi/check.py "$d" "$np" "$expect" "$mem" || { cat "$d/out"; echo "FAIL $name"; exit 1; }
    for r in $(seq 0 $((np - 1))); do
        grep -q "^tiermem: [0-9.]* s, rank $r/$np (local [0-9]*/[0-9]*, Open MPI)" "$d/out" ||
            { cat "$d/out"; echo "FAIL $name: no summary names rank $r/$np"; exit 1; }
    done
    grep -q "fault path handler-thread (OMPI_COMM_WORLD_RANK is set: an MPI rank" "$d/out" ||
        { cat "$d/out"; echo "FAIL $name: the summary does not say why the fault path is handler-thread"; exit 1; }
    echo "PASS $name"
}
case_ np2-share 2 share:50 -- --near 50%
case_ np4-share 4 share:50 -- --near 50%
# 64M for the node: 32M (np 2) and 16M (np 4) per rank, below the 48M the
# program writes: evictions, and each rank's near high-water within its own.
case_ np2-node 2 node:67108864 -- --near-node 64M
case_ np4-node 4 node:67108864 -- --near-node 64M
grep -q '"evictions": *[1-9]' "$out/np4-node/r-0.json" || { echo "FAIL np4-node: the budget did not bind"; exit 1; }
case_ np2-abs 2 abs:16777216 -- --near 16M

# tiermem report merge: the table (a row per rank and the total), the JSON
# (the budgets' sum) and the SVG.
d=$out/np4-node
"$T" report merge "$d"/r-*.json --json "$d/merged.json" --plot "$d/merged.svg" >"$d/table"
cat "$d/table"
[ "$(wc -l <"$d/table")" = 6 ] && grep -q '^total  *64M ' "$d/table" && grep -q '^3  *16M ' "$d/table" ||
    { echo "FAIL report merge: table"; exit 1; }
python3 - "$d/merged.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert [r["rank"] for r in m["ranks"]] == [0, 1, 2, 3], m["ranks"]
assert m["total"]["budget_bytes"] == 64 << 20, m["total"]
assert m["total"]["evictions"] == sum(r["evictions"] for r in m["ranks"]) > 0
assert m["total"]["within_budget"] and m["job_size"] == 4
PY
grep -q '<svg' "$d/merged.svg" && grep -q 'rank 3' "$d/merged.svg" || { echo "FAIL report merge: SVG"; exit 1; }
echo "PASS report merge"

# --reserve under 4 ranks: each adds its pages to the 2 MiB pool in turn
# and takes back its own (resetting the pool to what it saw first lost
# pages while other ranks ran, or left some behind).
pool=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
if [ "$(id -u)" = 0 ] && [ -w "$pool" ]; then
    before=$(cat "$pool")
    d=$out/reserve && mkdir -p "$d"
    if ! timeout 300 mpirun -np 4 --bind-to none "$T" run --page-size 2m --near 8M --reserve 16M \
        --report "$d/r-%r.json" -- "$out/alloc" 32 >"$d/out" 2>&1; then
        if grep -q "could not\|more than this machine" "$d/out"; then
            echo "skipped: --reserve under mpirun: the pool could not grow ($(grep -m1 tiermem "$d/out"))"
        else
            cat "$d/out"; echo "FAIL --reserve under mpirun"; exit 1
        fi
    else
        [ "$(grep -c '^tiermem: reserved 8 pages' "$d/out")" = 4 ] && [ "$(cat "$pool")" = "$before" ] ||
            { cat "$d/out"; echo "FAIL --reserve under mpirun: pool $(cat "$pool"), was $before"; exit 1; }
        echo "PASS --reserve under mpirun (pool back at $before)"
    fi
else
    echo "skipped: --reserve under mpirun: needs root and $pool"
fi

# Two network-namespace nodes, two ranks each: each node's ranks split
# that node's share (the nodes share this machine's memory, which each
# counts as its own).
if [ "$(id -u)" != 0 ]; then
    echo "skipped: two namespace nodes: needs root (scripts/mpi-nodes.sh)"
    exit 0
fi
tag=tmr$$
if ! opts=$(bash scripts/mpi-nodes.sh up "$tag" 2 2>"$out/nodes.err"); then
    echo "skipped: two namespace nodes: $(cat "$out/nodes.err")"
    bash scripts/mpi-nodes.sh down "$tag" 2 || true
    exit 0
fi
trap 'bash scripts/mpi-nodes.sh down "$tag" 2 || true' EXIT
# shellcheck disable=SC2086 # the options are words
case_ nodes2x2 4 share:50 $opts -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM -- --near 50%
python3 - "$out/nodes2x2" <<'PY'
import json, sys, glob
rs = [json.load(open(f))["rank"] for f in glob.glob(sys.argv[1] + "/r-*.json")]
assert all(r["local_size"] == 2 for r in rs), rs
assert sorted(r["local_rank"] for r in rs) == [0, 0, 1, 1], rs
PY
echo "PASS two namespace nodes, 2 ranks each"
