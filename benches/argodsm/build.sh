#!/usr/bin/env bash
# Builds ArgoDSM from the external tree (by path, never copied into this
# repository) and benches/argodsm/svm_argo.cpp against it.
#   benches/argodsm/build.sh [ARGO_SRC] [BUILD_DIR]
# ARGO_SRC: the ArgoDSM tree with its build script one level up
# (default ../shared/external/argodsm from the repository root); BUILD_DIR:
# where ArgoDSM is built (default target/argodsm). Prints the binary's path;
# also builds BUILD_DIR/libprogress_shim.so (an MPI progress thread to
# LD_PRELOAD, for the "argodsm+progress" runs) and BUILD_DIR/libcount_shim.so
# (counts of one-sided MPI calls and their time, printed per rank at exit).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
src=${1:-$root/../shared/external/argodsm}
[ -d "$src/src" ] || [ -n "${1:-}" ] || src=$root/../../shared/external/argodsm
build=${2:-$root/target/argodsm}
[ -d "$src/src" ] || { echo "build.sh: no ArgoDSM tree at $src" >&2; exit 2; }
src=$(cd "$src" && pwd)
if [ ! -e "$build/lib/libargobackend-mpi.so" ]; then
  bash "$src/../build-argodsm.sh" "$build" >&2
fi
out=$build/svm_argo
if [ ! -e "$out" ] || [ "$root/benches/argodsm/svm_argo.cpp" -nt "$out" ]; then
  # The build copy's sources, its generated config.hpp, the qd locks.
  mpicxx -std=c++17 -O2 -g -I"$build/src/src" -I"$build/config" -I"$build/src/submodules/qd" \
    "$root/benches/argodsm/svm_argo.cpp" -o "$out" \
    -L"$build/lib" -Wl,-rpath,"$build/lib" -largo -largobackend-mpi -lnuma >&2
fi
shim=$build/libprogress_shim.so
if [ ! -e "$shim" ] || [ "$root/benches/argodsm/progress_shim.c" -nt "$shim" ]; then
  mpicc -std=c11 -O2 -shared -fPIC "$root/benches/argodsm/progress_shim.c" -o "$shim" -lpthread >&2
fi
for name in count_shim; do
  lib=$build/lib$name.so
  if [ ! -e "$lib" ] || [ "$root/benches/argodsm/$name.c" -nt "$lib" ]; then
    mpicc -std=c11 -O2 -shared -fPIC "$root/benches/argodsm/$name.c" -o "$lib" >&2
  fi
done
echo "$out"
