# Sourced by run.sh and test.sh: makes sure the tools tiermem needs are
# there. Installs missing system packages with apt-get when running as root.
# install_needed PKG...: installs those system packages with apt-get when
# running as root; otherwise says they are missing and exits.
install_needed() {
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing $*"
        # A fresh machine may have empty package lists.
        DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
    else
        echo "missing: $* (install them, or run as root for apt-get)" >&2
        exit 1
    fi
}
need_pkgs=()
command -v cc >/dev/null 2>&1 || need_pkgs+=(gcc)
command -v c++ >/dev/null 2>&1 || need_pkgs+=(g++)
# NPB's own Makefiles (the NPB smoke test and `tiermem bench npb`).
command -v make >/dev/null 2>&1 || need_pkgs+=(make)
# The kernel-swap baseline and its tests: mkswap (util-linux), swapon,
# swapoff, mount, umount (mount); they live in sbin, not always on PATH.
have_tool() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
have_tool mkswap || need_pkgs+=(util-linux)
{ have_tool swapon && have_tool swapoff && have_tool mount && have_tool umount; } || need_pkgs+=(mount)
if [ ${#need_pkgs[@]} -gt 0 ]; then
    install_needed "${need_pkgs[@]}"
fi
if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "cargo (Rust, stable) is needed: https://rustup.rs" >&2
        exit 1
    fi
fi
# The format and lint checks need rustfmt and clippy: add them where
# rustup manages the toolchain (the minimal profile lacks them).
if command -v rustup >/dev/null 2>&1; then
    for component in rustfmt clippy; do
        if ! rustup component list --installed 2>/dev/null | grep "^$component" >/dev/null; then
            echo "installing the $component component"
            rustup component add "$component" >/dev/null 2>&1 || echo "warning: could not add $component" >&2
        fi
    done
fi
if [ ! -e /dev/userfaultfd ] && [ "$(cat /proc/sys/vm/unprivileged_userfaultfd 2>/dev/null || echo 0)" != 1 ] && [ "$(id -u)" != 0 ]; then
    echo "warning: userfaultfd looks unavailable to this user (no /dev/userfaultfd, vm.unprivileged_userfaultfd=0)" >&2
fi
