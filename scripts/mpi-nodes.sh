#!/usr/bin/env bash
# Emulated cluster nodes on one machine for MPI runs (root): each "node" is a
# network namespace on a bridge, with its own hostname, IPC and PID namespaces
# and its own /dev/shm,
# so Open MPI starts one daemon per node (through this script as its rsh agent),
# talks TCP between nodes, and neither Open MPI nor UCX can use shared memory
# across them. Ranks of one node share memory as on a real node.
#
#   mpi-nodes.sh up TAG N        create nodes TAG1..TAGN (TAG: a short name, e.g. tm$$);
#                                prints the mpirun options to use them
#   mpi-nodes.sh down TAG N      remove them (safe to repeat)
#   mpi-nodes.sh options TAG N   print the mpirun options again
#   mpi-nodes.sh rsh HOST CMD..  Open MPI's plm_rsh_agent: run CMD on node HOST
#
# The subnet is 10.(100 + hash(TAG) % 100).0.0/24; the bridge is TAG"br".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
self="$here/$(basename "$0")"

subnet() { # TAG -> 10.X.0
  local h; h=$(printf '%s' "$1" | cksum | cut -d' ' -f1)
  echo "10.$((100 + h % 100)).0"
}

options() { # TAG N
  local tag=$1 n=$2 net; net=$(subnet "$tag")
  local hf="/tmp/$tag.hosts" agent="/tmp/$tag.rsh"
  : >"$hf"
  for i in $(seq 1 "$n"); do echo "$tag$i slots=64" >>"$hf"; done
  printf '#!/bin/sh\nexec %s rsh "$@"\n' "$self" >"$agent"
  chmod +x "$agent"
  # --bind-to none: each node's daemon would bind its first rank to core 0, and
  # two "nodes" on one machine would then share a core.
  echo "--hostfile $hf --map-by node --bind-to none --mca plm_rsh_agent $agent" \
       "--mca oob_tcp_if_include $net.0/24 --mca btl_tcp_if_include $net.0/24"
}

case "${1:-}" in
up)
  tag=$2 n=$3 net=$(subnet "$tag") br="${2}br"
  [ "$(id -u)" = 0 ] || { echo "mpi-nodes: needs root" >&2; exit 2; }
  command -v ip >/dev/null && command -v unshare >/dev/null || { echo "mpi-nodes: needs ip and unshare" >&2; exit 2; }
  "$self" down "$tag" "$n" 2>/dev/null || true
  ip link add "$br" type bridge
  ip addr add "$net.1/24" dev "$br"
  ip link set "$br" up
  for i in $(seq 1 "$n"); do
    ns="$tag$i"
    ip netns add "$ns"
    ip link add "${tag}v$i" type veth peer name eth0 netns "$ns"
    ip link set "${tag}v$i" master "$br" up
    ip -n "$ns" addr add "$net.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
  options "$tag" "$n"
  ;;
down)
  tag=$2 n=$3
  for i in $(seq 1 "$n"); do
    ip netns pids "$tag$i" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$tag$i" 2>/dev/null || true
    ip link del "${tag}v$i" 2>/dev/null || true
  done
  ip link del "${tag}br" 2>/dev/null || true
  rm -f "/tmp/$tag.hosts" "/tmp/$tag.rsh"
  ;;
options)
  options "$2" "$3"
  ;;
rsh)
  # Open MPI calls "agent [options] HOST COMMAND..."; the command is a shell
  # line meant for a remote shell.
  shift
  while [ "${1:-}" != "" ] && [ "${1#-}" != "$1" ]; do shift; done
  host=$1; shift
  # A node's own /dev/shm too: programs name their shared memory after
  # their pid, and pids repeat across PID namespaces.
  exec ip netns exec "$host" unshare --uts --ipc --pid --fork --mount-proc \
    sh -c "mount -t tmpfs -o mode=1777 tmpfs /dev/shm && hostname $host; $*"
  ;;
*)
  sed -n '2,17p' "$0" >&2
  exit 2
  ;;
esac
