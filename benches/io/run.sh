#!/usr/bin/env bash
# What read(2) into a tiered buffer costs (issue 30.3: pipes and sockets go
# through a bounce buffer, regular files are pinned), side by side in one
# run: plain, `tiermem run` with the buffer resident (--near above the
# footprint) and mostly evicted (--near 32M), and the same under another
# build of tiermem for a before/after (BEFORE=/path/to/tiermem).
#
#   benches/io/run.sh [MIB] [ROUNDS]        (default 256 MiB, 5 rounds)
#   BEFORE=/other/target/release/tiermem benches/io/run.sh
#
# Prints a table; writes target/io-cost.json. Each source's runs are
# interleaved (plain, tiered, before) so that the machine's drift hits all.
set -euo pipefail
cd "$(dirname "$0")/../.."
mib=${1:-256}
rounds=${2:-5}
T=${TIERMEM:-target/release/tiermem}
out=target/io-cost
mkdir -p "$out"
[ -x "$T" ] || cargo build --release -p tiermem-cli -p tiermem-preload >&2
cc -O2 -Wall -Wextra -Werror benches/io/io_cost.c -lpthread -o "$out/io_cost"
modes=("plain" "resident" "evicted")
[ -n "${BEFORE:-}" ] && modes+=("resident-before" "evicted-before")
rows=()
printf "%-8s %-16s %10s %8s %8s\n" source mode "median s" "GB/s" "reads"
for src in pipe socket file zero; do
  for mode in "${modes[@]}"; do
    bin=$T
    case $mode in *-before) bin=$BEFORE ;; esac
    case $mode in
    plain) cmd=("$out/io_cost") ;;
    resident*) cmd=("$bin" run --near $((mib * 2 + 64))M --quiet -- "$out/io_cost") ;;
    evicted*) cmd=("$bin" run --near 32M --quiet -- "$out/io_cost") ;;
    esac
    line=$(timeout -k 10 600 "${cmd[@]}" "$src" "$mib" "$rounds")
    med=$(sed -E 's/.*"median_s": ([0-9.]+).*/\1/' <<<"$line")
    gbs=$(sed -E 's/.*"gb_per_s": ([0-9.]+).*/\1/' <<<"$line")
    reads=$(sed -E 's/.*"reads_per_round": ([0-9]+).*/\1/' <<<"$line")
    printf "%-8s %-16s %10s %8s %8s\n" "$src" "$mode" "$med" "$gbs" "$reads"
    rows+=("$(sed -E "s/^\{/{\"mode\": \"$mode\", /" <<<"$line")")
  done
done
(IFS=,; echo "[${rows[*]}]") >"$out/../io-cost.json"
echo "wrote target/io-cost.json"
