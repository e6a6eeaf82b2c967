#!/usr/bin/env bash
# tiermem's SVM over MPI against ArgoDSM, and against tiermem's own forked
# team (LocalShm), on the same three workloads (bucket sort, Malstone-A, BFS
# with a black list), inputs and checksums (docs/svm.md):
#
#   - 1 node: 1, 2 and 4 ranks; 2 nodes (network namespaces, TCP between
#     them, scripts/mpi-nodes.sh): 2 and 4 ranks;
#   - the workloads: bucket, malstone, bfs and locks (a histogram under
#     locks, so that lock time is measured);
#   - tiermem in spm-coherent, dsm and hybrid modes (one mpirun per
#     configuration runs every workload and mode), ArgoDSM (one mpirun per
#     configuration), tiermem's forked team at 2 processes (LocalShm);
#   - REPS repetitions, systems interleaved within each repetition, the order
#     of the two systems alternating between repetitions;
#   - every run verified against the one-rank checksum.
#
#   scripts/bench-svm-mpi.sh [OUT_DIR]      (as root; OUT_DIR default results/svm-mpi)
#   REPS=3 RANKS1="1 2 4" RANKS2="2 4" ARGO_SRC=../shared/external/argodsm
#   VS_LOCAL_REPS=7: then the MPI transport against LocalShm alone, at 2
#   processes on one node, both pinned (the team to CPUs 0 and 1, the ranks
#   with --bind-to core), alternating, into OUT_DIR/vs-local.*;
#   ONLY_VS_LOCAL=1 skips everything else.
#
# ArgoDSM runs in the configuration of docs/svm.md ("ArgoDSM's
# configuration"), found on this machine (issue 34): in the shape its
# documentation prescribes, one ArgoDSM node (process) per machine with the
# workers as threads inside it (svm_argo --threads: N workers on K nodes are
# K processes of N/K threads; the lock workload then takes ArgoDSM's
# cohort lock), ARGO_WRITE_BUFFER_SIZE=16384 (its default of 512 blocks
# made bucket sort take 108 s at 2 ranks: the write buffer thrashes),
# ARGO_ALLOCATION_POLICY=1 (cyclic, 16-page blocks: the default "naive"
# policy homes every allocation of this bench on rank 0, so every other
# rank's writes go remote; first-touch did not finish across the two
# nodes), ARGO_PRINT_STATISTICS=0, Open MPI's osc/ucx (the transport
# ArgoDSM's documentation names, and the only one-sided component that runs
# its MPI_THREAD_MULTIPLE windows over TCP here). ARGO_SHAPE=ranks runs it
# the way earlier rounds did instead, one process per worker (for the lock
# workload on one node then osc/rdma: under osc/ucx it does not finish),
# recorded as mode "argo-ranks" where a node has more than one process.
# ARGO_TUNED=0: ArgoDSM's defaults, all under osc/ucx. Both systems: the
# same CPUs (no binding on one node; the same namespace nodes across two),
# mpi_yield_when_idle=1 (Open MPI yields when idle), locks waiting with the
# same backoff (one thread per process; the cohort lock waits its own way).
# ARGO_TIMEOUT (default 300 s) bounds each ArgoDSM run, ARGO_LOCK_TIMEOUT
# (60 s) its lock runs (across nodes they do not finish under osc/ucx).
# ARGO_PROGRESS=1 adds runs of ArgoDSM with an MPI progress thread
# preloaded (benches/argodsm/progress_shim.c), as tiermem has one.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${1:-results/svm-mpi}
mkdir -p "$out"
out=$(cd "$out" && pwd)
REPS=${REPS:-3}
RANKS1=${RANKS1:-1 2 4}
RANKS2=${RANKS2:-2 4}
# The external tree: ../shared/external from the project root (a checkout),
# or ../../shared/external (a worktree under a shared directory).
if [ -z "${ARGO_SRC:-}" ]; then
  for d in "$root/../shared/external/argodsm" "$root/../../shared/external/argodsm"; do
    if [ -d "$d/src" ]; then ARGO_SRC=$d; break; fi
  done
fi
ARGO_SRC=${ARGO_SRC:-$root/../shared/external/argodsm}
records=$out/records.jsonl
: >"$records"
log=$out/log.txt
: >"$log"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ARGO_PRINT_STATISTICS=0
if [ "${ARGO_TUNED:-1}" = 1 ]; then
  export ARGO_WRITE_BUFFER_SIZE=16384 ARGO_ALLOCATION_POLICY=1
fi
ARGO_TIMEOUT=${ARGO_TIMEOUT:-300}
ARGO_LOCK_TIMEOUT=${ARGO_LOCK_TIMEOUT:-60}
ARGO_SHAPE=${ARGO_SHAPE:-threads}
argo_mode=argo
[ "${ARGO_TUNED:-1}" = 1 ] || argo_mode=argo-defaults

echo "== building tiermem (release, feature mpi)"
cargo build --release -p tiermem-cli --features mpi
T=$root/target/release/tiermem
echo "== building ArgoDSM and its benchmark"
argo=""
if argo=$(benches/argodsm/build.sh "$ARGO_SRC" "$root/target/argodsm"); then
  echo "ArgoDSM benchmark: $argo"
else
  echo "skipped ArgoDSM: it did not build (see above)"
  argo=""
fi
graph=$out/graph-s17.bin
$T bench svm --export-graph "$graph" --scale 17

tag="tb$$"
nodes_opts=""
if [ "${ONLY_VS_LOCAL:-0}" = 1 ]; then
  RANKS2=""
elif nodes_opts=$(scripts/mpi-nodes.sh up "$tag" 2); then
  trap 'scripts/mpi-nodes.sh down "$tag" 2' EXIT
else
  echo "skipped 2-node runs: network namespaces could not be made (root and ip needed)"
  nodes_opts=""
  RANKS2=""
fi

common=(--oversubscribe --mca mpi_yield_when_idle 1 -x ARGO_PRINT_STATISTICS)
[ -n "${ARGO_WRITE_BUFFER_SIZE:-}" ] && common+=(-x ARGO_WRITE_BUFFER_SIZE)
[ -n "${ARGO_ALLOCATION_POLICY:-}" ] && common+=(-x ARGO_ALLOCATION_POLICY)

run() { # run LABEL mpirun-args...
  echo "-- $1 (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$log"
  shift
  local t0=$SECONDS
  ${RUN_TIMEOUT:-timeout 1200} "$@" >>"$log" 2>&1 || echo "   FAILED (exit $?): see $log" | tee -a "$log"
  echo "   $((SECONDS - t0)) s" >>"$log"
}

[ "${ONLY_VS_LOCAL:-0}" = 1 ] && REPS=0
for rep in $(seq 1 "$REPS"); do
  echo "== repetition $rep of $REPS"
  configs=()
  for n in $RANKS1; do configs+=("1:$n"); done
  for n in $RANKS2; do configs+=("2:$n"); done
  for cfg in "${configs[@]}"; do
    nodes=${cfg%%:*} np=${cfg##*:}
    if [ "$nodes" = 1 ]; then place=(--bind-to none); else place=($nodes_opts); fi
    tm=(mpirun -np "$np" "${common[@]}" --mca osc ucx "${place[@]}" "$T" bench svm --mpi --record-file "$records")
    # ArgoDSM's shape: one process per node, the workers its threads
    # (ARGO_SHAPE=threads), or one process per worker (ranks).
    aprocs=$np threads=1 lock_osc=ucx amode=$argo_mode
    if [ "$ARGO_SHAPE" = threads ]; then
      aprocs=$nodes threads=$((np / nodes))
    else
      [ "$np" -gt "$nodes" ] && amode=$argo_mode-ranks
    fi
    if [ "$ARGO_SHAPE" != threads ] && [ "${ARGO_TUNED:-1}" = 1 ] && [ "$nodes" = 1 ] && [ "$np" -gt 1 ]; then
      # osc/rdma needs a second rank on the node (btl/vader) to make windows.
      lock_osc=rdma
    fi
    ar=(mpirun -np "$aprocs" "${common[@]}" --mca osc ucx "${place[@]}" "$argo" --graph "$graph" --records "$records"
      --mode "$amode" --threads "$threads" --workloads bucket,malstone,bfs)
    al=(mpirun -np "$aprocs" "${common[@]}" --mca osc "$lock_osc" "${place[@]}" "$argo" --records "$records"
      --mode "$amode" --threads "$threads" --workloads locks)
    argo_runs() {
      RUN_TIMEOUT="timeout $ARGO_TIMEOUT" run "argodsm $nodes node(s) $np workers ($aprocs x $threads)" "${ar[@]}"
      RUN_TIMEOUT="timeout $ARGO_LOCK_TIMEOUT" run "argodsm locks (osc $lock_osc) $nodes node(s) $np workers ($aprocs x $threads)" "${al[@]}"
    }
    if [ $((rep % 2)) = 1 ]; then
      RUN_TIMEOUT="timeout 1200" run "tiermem $nodes node(s) $np ranks" "${tm[@]}"
      [ -n "$argo" ] && argo_runs
    else
      [ -n "$argo" ] && argo_runs
      RUN_TIMEOUT="timeout 1200" run "tiermem $nodes node(s) $np ranks" "${tm[@]}"
    fi
    if [ -n "$argo" ] && [ "${ARGO_PROGRESS:-0}" = 1 ] && [ "$nodes" = 2 ]; then
      run "argodsm+progress $nodes node(s) $np ranks" mpirun -np "$np" "${common[@]}" "${place[@]}" \
        -x LD_PRELOAD="$(dirname "$argo")/libprogress_shim.so" "$argo" --graph "$graph" \
        --records "$records" --mode "$argo_mode+progress"
    fi
    if [ "$nodes" = 1 ] && [ "$np" = 2 ]; then
      run "tiermem forked team (LocalShm) 2 processes" \
        "$T" bench svm --procs 2 --modes spm-coherent,dsm,hybrid --record-file "$records"
    fi
  done
done

if [ "$REPS" -gt 0 ]; then
  echo "== comparison"
  $T bench svm-compare "$records" --json "$out/svm-mpi.json" --plot "$out/svm-mpi.svg" | tee "$out/svm-mpi.txt"
fi

vs=${VS_LOCAL_REPS:-7}
if [ "$vs" -gt 0 ]; then
  echo "== MPI transport against LocalShm, 2 processes, one node, $vs repetitions"
  vrec=$out/vs-local.jsonl
  : >"$vrec"
  $T bench svm --procs 1 --modes spm-coherent --reps 1 --record-file "$vrec" >/dev/null 2>&1
  for rep in $(seq 1 "$vs"); do
    tm=(mpirun -np 2 --oversubscribe --mca osc ucx --bind-to core "$T" bench svm --mpi --record-file "$vrec")
    lo=("$T" bench svm --procs 2 --modes spm-coherent,dsm,hybrid --record-file "$vrec")
    if [ $((rep % 2)) = 1 ]; then run "vs-local $rep: MPI" "${tm[@]}"; run "vs-local $rep: LocalShm" "${lo[@]}"
    else run "vs-local $rep: LocalShm" "${lo[@]}"; run "vs-local $rep: MPI" "${tm[@]}"; fi
  done
  $T bench svm-compare "$vrec" --json "$out/vs-local.json" | tee "$out/vs-local.txt"
fi
{
  echo "command: $0 $*"
  echo "REPS=$REPS RANKS1=$RANKS1 RANKS2=$RANKS2 ARGO_SHAPE=$ARGO_SHAPE ARGO_WRITE_BUFFER_SIZE=${ARGO_WRITE_BUFFER_SIZE:-default} ARGO_ALLOCATION_POLICY=${ARGO_ALLOCATION_POLICY:-default}"
  echo "machine: $(nproc) CPUs, $(uname -r), load before the run: see log"
} >"$out/README.txt"
