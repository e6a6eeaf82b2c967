# Sourced by run.sh and test.sh: makes sure the tools tiermem needs are
# there. Installs missing system packages with apt-get when running as root.
need_pkgs=()
command -v cc >/dev/null 2>&1 || need_pkgs+=(gcc)
command -v c++ >/dev/null 2>&1 || need_pkgs+=(g++)
command -v mkswap >/dev/null 2>&1 || [ -x /usr/sbin/mkswap ] || [ -x /sbin/mkswap ] || need_pkgs+=(util-linux)
if [ ${#need_pkgs[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing ${need_pkgs[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_pkgs[@]}" >/dev/null
    else
        echo "missing: ${need_pkgs[*]} (install them, or run as root for apt-get)" >&2
        exit 1
    fi
fi
if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "cargo (Rust, stable) is needed: https://rustup.rs" >&2
        exit 1
    fi
fi
if [ ! -e /dev/userfaultfd ] && [ "$(cat /proc/sys/vm/unprivileged_userfaultfd 2>/dev/null || echo 0)" != 1 ] && [ "$(id -u)" != 0 ]; then
    echo "warning: userfaultfd looks unavailable to this user (no /dev/userfaultfd, vm.unprivileged_userfaultfd=0)" >&2
fi
