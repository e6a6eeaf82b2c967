#!/usr/bin/env bash
# Tests scripts/install.sh (docs/install.md) from outside the source tree:
# installs into a temporary prefix, then builds and runs the C example
# through pkg-config and through CMake (shared and static targets), the
# Fortran example against the installed module (when the tree has one),
# reads `man tiermem-run`, completes `tiermem ru` with the bash
# completion, runs a real program under the installed `tiermem run` with
# no TIERMEM_PRELOAD and the source tree on no path, checks the message of
# a `tiermem` installed alone (cargo install), runs the Spack recipe's
# install() against stubbed Spack names, and uninstalls: nothing may be
# left. Installs pkg-config, cmake, gfortran and man-db when missing (as
# root), else skips what needs them with "skipped: <why>".
#
#   scripts/install-test.sh    # uses target/release when built, else builds it
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target=$root/$target ;; esac
rel=$target/release

fail() { echo "FAIL $*"; exit 1; }
pass() { echo "PASS $*"; }

# Tools the checks use, installed when missing (root) or their checks skipped.
need=()
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v make >/dev/null 2>&1 || need+=(make)
command -v cc >/dev/null 2>&1 || need+=(gcc)
# A minimized system's man is a script that says so.
if ! command -v man >/dev/null 2>&1 || grep -q minimized "$(command -v man)" 2>/dev/null; then need+=(man-db); fi
if [ -f "$root/include/tiermem.f90" ] && ! command -v gfortran >/dev/null 2>&1; then need+=(gfortran); fi
command -v patchelf >/dev/null 2>&1 || need+=(patchelf)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null 2>&1 ||
        { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null; } ||
        echo "could not install ${need[*]}: the checks that need them are skipped"
fi
command -v patchelf >/dev/null 2>&1 || { echo "skipped: install test: no patchelf (install.sh needs it; run as root or install it)"; exit 0; }
command -v cc >/dev/null 2>&1 || { echo "skipped: install test: no C compiler"; exit 0; }

built=1
for f in tiermem libtiermem.so libtiermem.a libtiermem_preload.so; do [ -f "$rel/$f" ] || built=0; done
build_arg=()
[ "$built" = 1 ] && build_arg=(--no-build)

base=$(mktemp -d /tmp/tiermem-install-test.XXXXXX)
trap 'rm -rf -- "$base"' EXIT
P=$base/prefix # created by the install: the uninstall removes it
work=$base/work
mkdir -p "$work"
cd "$work" # outside the source tree from here on

"$root/scripts/install.sh" --prefix "$P" "${build_arg[@]}"
# Again over itself: the previous install is replaced, the manifest the same.
cp "$P/share/tiermem/install-manifest" "$base/manifest.1"
"$root/scripts/install.sh" --prefix "$P" --no-build >/dev/null
diff "$base/manifest.1" "$P/share/tiermem/install-manifest" >/dev/null || fail "reinstall changed the manifest"

# The layout.
for f in bin/tiermem lib/libtiermem.so lib/libtiermem.so.0 lib/libtiermem.a lib/libtiermem_preload.so \
    include/tiermem.h lib/pkgconfig/tiermem.pc lib/cmake/tiermem/tiermemConfig.cmake \
    lib/cmake/tiermem/tiermemConfigVersion.cmake share/man/man1/tiermem.1 share/man/man1/tiermem-run.1 \
    share/bash-completion/completions/tiermem share/zsh/site-functions/_tiermem \
    share/fish/vendor_completions.d/tiermem.fish share/doc/tiermem/README.md; do
    [ -e "$P/$f" ] || fail "layout: $P/$f is missing"
done
soname=$(readelf -d "$P/lib/libtiermem.so" 2>/dev/null | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libtiermem.so.0 ] || fail "layout: soname of lib/libtiermem.so is '$soname', not libtiermem.so.0"
[ "$(readlink "$P/lib/libtiermem.so")" = libtiermem.so.0 ] || fail "layout: libtiermem.so -> $(readlink "$P/lib/libtiermem.so")"
pass "layout (soname $soname)"

# Environments with no trace of the source tree.
clean_env=(env -u TIERMEM_PRELOAD -u LD_LIBRARY_PATH -u LD_PRELOAD -u CARGO_TARGET_DIR
    PATH=/usr/local/bin:/usr/bin:/bin)
# check_example BINARY NAME: the C example's data check and that it loads
# the installed library.
check_example() {
    "${clean_env[@]}" "$1" >"$work/$2.out" 2>&1 || { cat "$work/$2.out"; fail "$2: example failed"; }
    grep -q "evictions [1-9]" "$work/$2.out" || { cat "$work/$2.out"; fail "$2: no evictions"; }
}

# C through pkg-config.
if command -v pkg-config >/dev/null 2>&1; then
    export PKG_CONFIG_PATH=$P/lib/pkgconfig
    # shellcheck disable=SC2046 # pkg-config's words are meant to split
    cc -std=c11 -Wall -Werror $(pkg-config --cflags tiermem) "$root/examples/c/example.c" \
        $(pkg-config --libs tiermem) -Wl,-rpath,"$P/lib" -o "$work/example-pc"
    ldd "$work/example-pc" | grep "libtiermem.so.0 => $P/lib/libtiermem.so.0" >/dev/null ||
        { ldd "$work/example-pc"; fail "pkg-config: the program does not load $P/lib/libtiermem.so.0"; }
    check_example "$work/example-pc" example-pc
    [ "$(pkg-config --modversion tiermem)" = "$("$P/bin/tiermem" --version | awk '{print $2}')" ] ||
        fail "pkg-config: --modversion"
    unset PKG_CONFIG_PATH
    pass "C example built with pkg-config --cflags --libs tiermem"
else
    echo "skipped: pkg-config check: no pkg-config"
fi

# cmake_build DIR WHAT: configures and builds, against the installed
# prefix, the CMake project in $work/DIR whose CMakeLists.txt is read from
# stdin; if either fails, prints cmake's output and fails "cmake: WHAT".
cmake_build() {
    mkdir -p "$work/$1"
    cat >"$work/$1/CMakeLists.txt"
    if ! { cmake -S "$work/$1" -B "$work/$1/build" -DCMAKE_PREFIX_PATH="$P" &&
        cmake --build "$work/$1/build"; } >"$work/$1.log" 2>&1; then
        cat "$work/$1.log"
        fail "cmake: $2"
    fi
}

# C through CMake: the shared and the static imported targets.
if command -v cmake >/dev/null 2>&1 && command -v make >/dev/null 2>&1; then
    cmake_build cm build <<EOF
cmake_minimum_required(VERSION 3.16)
project(tiermem_consumer C)
find_package(tiermem 0.1 REQUIRED)
add_executable(example_shared "$root/examples/c/example.c")
target_link_libraries(example_shared PRIVATE tiermem::tiermem)
add_executable(example_static "$root/examples/c/example.c")
target_link_libraries(example_static PRIVATE tiermem::tiermem_static)
EOF
    check_example "$work/cm/build/example_shared" cmake-shared
    check_example "$work/cm/build/example_static" cmake-static
    if readelf -d "$work/cm/build/example_static" | grep "libtiermem" >/dev/null; then fail "cmake: the static target loads libtiermem.so"; fi
    # A version above this one must be refused.
    sed -i 's/find_package(tiermem 0.1 REQUIRED)/find_package(tiermem 9.0 REQUIRED)/' "$work/cm/CMakeLists.txt"
    if cmake -S "$work/cm" -B "$work/cm/build9" -DCMAKE_PREFIX_PATH="$P" >/dev/null 2>&1; then
        fail "cmake: find_package(tiermem 9.0) accepted version $("$P/bin/tiermem" --version)"
    fi
    pass "CMake find_package(tiermem) with tiermem::tiermem and tiermem::tiermem_static"
else
    echo "skipped: CMake check: no cmake or make"
fi

# Fortran against the installed module.
if [ -f "$root/include/tiermem.f90" ] && [ -f "$root/examples/fortran/example.f90" ]; then
    if command -v gfortran >/dev/null 2>&1; then
        [ -f "$P/include/tiermem.mod" ] || fail "fortran: $P/include/tiermem.mod was not installed"
        [ -f "$P/include/tiermem.f90" ] || fail "fortran: $P/include/tiermem.f90 was not installed"
        [ -f "$P/lib/libtiermem_fortran.a" ] || fail "fortran: $P/lib/libtiermem_fortran.a was not installed"
        if find "$P" -name '*.o' | grep . >/dev/null; then fail "fortran: an object file was left in $P"; fi
        # By hand, through pkg-config, and through CMake's tiermem::fortran.
        gfortran -I"$P/include" "$root/examples/fortran/example.f90" -L"$P/lib" -ltiermem_fortran -ltiermem \
            -Wl,-rpath,"$P/lib" -o "$work/example-f"
        check_fortran() {
            "${clean_env[@]}" "$1" >"$work/$2.out" 2>&1 || { cat "$work/$2.out"; fail "$2: example failed"; }
        }
        check_fortran "$work/example-f" fortran
        if command -v pkg-config >/dev/null 2>&1; then
            # shellcheck disable=SC2046 # pkg-config's words are meant to split
            gfortran $(PKG_CONFIG_PATH=$P/lib/pkgconfig pkg-config --cflags tiermem-fortran) \
                "$root/examples/fortran/example.f90" \
                $(PKG_CONFIG_PATH=$P/lib/pkgconfig pkg-config --libs tiermem-fortran) \
                -Wl,-rpath,"$P/lib" -o "$work/example-f-pc"
            check_fortran "$work/example-f-pc" fortran-pc
        fi
        if command -v cmake >/dev/null 2>&1 && command -v make >/dev/null 2>&1; then
            cmake_build cmf "Fortran build with tiermem::fortran" <<EOF
cmake_minimum_required(VERSION 3.16)
project(tiermem_fortran_consumer Fortran)
find_package(tiermem 0.1 REQUIRED)
add_executable(example_f "$root/examples/fortran/example.f90")
target_link_libraries(example_f PRIVATE tiermem::fortran)
EOF
            check_fortran "$work/cmf/build/example_f" fortran-cmake
        fi
        pass "Fortran example built with -ltiermem_fortran -ltiermem, pkg-config tiermem-fortran and CMake tiermem::fortran"
    else
        echo "skipped: Fortran check: no gfortran"
    fi
else
    echo "skipped: no Fortran module in this tree"
fi

# The man page of `tiermem run` lists every option `tiermem run --help` has.
page=$work/tiermem-run.man
if MANPATH=$P/share/man LC_ALL=C MANWIDTH=200 man -P cat tiermem-run >"$page" 2>/dev/null && grep -q -- --near "$page"; then
    how="MANPATH=$P/share/man man tiermem-run"
elif LC_ALL=C MANWIDTH=200 man -l "$P/share/man/man1/tiermem-run.1" >"$page" 2>/dev/null; then
    how="man -l (this man has no MANPATH lookup)"
else
    how=""
fi
if [ -n "$how" ]; then
    opts=$("$P/bin/tiermem" run --help | grep -o -- '--[a-z][a-z-]*' | sort -u)
    [ -n "$opts" ] || fail "man: no options in tiermem run --help"
    for o in $opts; do grep -q -- "$o" "$page" || fail "man: tiermem-run.1 lacks $o"; done
    pass "man page tiermem-run ($how): $(echo "$opts" | wc -l) options"
else
    echo "skipped: man check: no working man (apt-get install man-db)"
fi

# The bash completion completes `tiermem ru` to run.
got=$(bash -c '
    source "$1"
    COMP_WORDS=(tiermem ru); COMP_CWORD=1; COMP_LINE="tiermem ru"; COMP_POINT=${#COMP_LINE}
    _tiermem tiermem ru tiermem
    echo "${COMPREPLY[*]}"' _ "$P/share/bash-completion/completions/tiermem")
[ "$got" = run ] || fail "bash completion: 'tiermem ru' completed to '$got', not 'run'"
zsh_fish_ok=""
command -v zsh >/dev/null 2>&1 && { zsh -n "$P/share/zsh/site-functions/_tiermem" || fail "zsh completion: syntax"; zsh_fish_ok+=" zsh"; }
command -v fish >/dev/null 2>&1 && { fish -n "$P/share/fish/vendor_completions.d/tiermem.fish" || fail "fish completion: syntax"; zsh_fish_ok+=" fish"; }
pass "bash completion: tiermem ru -> run${zsh_fish_ok:+ (syntax checked:$zsh_fish_ok)}"

# A real program under the installed `tiermem run`: the preload is found
# in $P/lib, nothing else points at it, and the budget binds.
"${clean_env[@]}" "$P/bin/tiermem" run --near 8M --quiet --report "$work/run.json" -- \
    python3 -c '
b = bytearray(64 << 20)
for i in range(0, len(b), 4096): b[i] = i // 4096 % 251
assert all(b[i] == i // 4096 % 251 for i in range(0, len(b), 4096))' ||
    fail "tiermem run: python3 under the installed tiermem run"
grep -q '"evictions": *[1-9]' "$work/run.json" || { cat "$work/run.json"; fail "tiermem run: no evictions at --near 8M"; }
pass "installed tiermem run --near 8M -- python3 (64 MiB): $(grep -o '"evictions": *[0-9]*' "$work/run.json" | sort -t: -k2 -n | tail -1)"

# `cargo install` installs the command alone: `tiermem run` must say where
# it looked for the preload library and how to get it.
mkdir -p "$work/lone/bin"
cp "$P/bin/tiermem" "$work/lone/bin/"
if "${clean_env[@]}" "$work/lone/bin/tiermem" run -- true 2>"$work/lone.err"; then
    fail "a lone tiermem ran without a preload library"
fi
for part in "$work/lone/bin/libtiermem_preload.so" "$work/lone/lib/libtiermem_preload.so" \
    "scripts/install.sh --prefix" TIERMEM_PRELOAD; do
    grep -qF -- "$part" "$work/lone.err" || { cat "$work/lone.err"; fail "lone tiermem: the message lacks $part"; }
done
pass "tiermem installed alone names where it looked and how to get the preload library"

# The Spack recipe's install() into a prefix that exists already, with a
# file of its own: the uninstall must leave exactly that.
if command -v python3 >/dev/null 2>&1; then
    # py_compile's check without its __pycache__ in the source tree.
    python3 -c 'import sys; compile(open(sys.argv[1]).read(), sys.argv[1], "exec")' \
        "$root/packaging/spack/tiermem/package.py"
    mkdir -p "$base/spack-prefix"
    echo mine >"$base/spack-prefix/keep"
    PYTHONDONTWRITEBYTECODE=1 python3 "$root/packaging/spack/test_recipe.py" "$base/spack-prefix" >"$work/spack.log" 2>&1 ||
        { cat "$work/spack.log"; fail "spack recipe"; }
    [ -x "$base/spack-prefix/bin/tiermem" ] || fail "spack recipe: no bin/tiermem"
    "$root/scripts/install.sh" --uninstall --prefix "$base/spack-prefix" >/dev/null
    left=$(cd "$base/spack-prefix" && find . -mindepth 1)
    [ "$left" = ./keep ] || fail "uninstall from an existing prefix left: $left"
    pass "spack recipe install() (stubbed Spack): $(tail -1 "$work/spack.log")"
else
    echo "skipped: spack recipe check: no python3"
fi

# A moved prefix (module trees, Spack views, a copied /opt) still works:
# pkg-config and CMake take their paths from their files' places, tiermem
# run finds its preload beside it, and the uninstall follows the move.
M=$base/moved
mv "$P" "$M"
if command -v pkg-config >/dev/null 2>&1; then
    # shellcheck disable=SC2046 # pkg-config's words are meant to split
    cc -std=c11 $(PKG_CONFIG_PATH=$M/lib/pkgconfig pkg-config --cflags tiermem) "$root/examples/c/example.c" \
        $(PKG_CONFIG_PATH=$M/lib/pkgconfig pkg-config --libs tiermem) -Wl,-rpath,"$M/lib" -o "$work/example-moved"
    check_example "$work/example-moved" example-moved
fi
(cd "$work" && "${clean_env[@]}" "$M/bin/tiermem" run --quiet --near 8M -- python3 -c 'bytearray(32 << 20)') ||
    fail "moved prefix: tiermem run"
"$root/scripts/install.sh" --uninstall --prefix "$M" >/dev/null
[ ! -e "$M" ] || fail "uninstall of the moved prefix left: $(find "$M")"
pass "a moved prefix: pkg-config, tiermem run and the uninstall follow it"
"$root/scripts/install.sh" --prefix "$P" --no-build >/dev/null

# Uninstall leaves nothing: the prefix was created by the install.
"$root/scripts/install.sh" --uninstall --prefix "$P"
[ ! -e "$P" ] || fail "uninstall left: $(find "$P")"
if "$root/scripts/install.sh" --uninstall --prefix "$P" 2>/dev/null; then fail "a second uninstall did not fail"; fi
pass "uninstall removed everything, $P included"
