# Spack recipe for tiermem (docs/install.md): builds with cargo from a
# source tree and installs through the tree's own scripts/install.sh, so
# that Spack's prefix has the same layout as any other install (command,
# libtiermem.so with its soname, libtiermem.a, the preload library,
# tiermem.h, the Fortran module, pkg-config, CMake package, man pages,
# completions).
#
# Tested here: py_compile, and install() run against stubs of the
# spack.package names it uses (packaging/spack/test_recipe.py, from
# scripts/install-test.sh). Not tested: a real Spack (concretization,
# the rust, patchelf and mpi packages, fetching).

from spack.package import *


class Tiermem(Package):
    """User-space tiered memory for HPC over userfaultfd: a C/Fortran
    library, an LD_PRELOAD library and the `tiermem run` launcher that
    tier the heap of unmodified programs over a near-memory budget."""

    homepage = "https://example.invalid/tiermem"
    git = "https://example.invalid/tiermem.git"

    license("MIT OR Apache-2.0")

    # No release is published yet: `spack develop --path <tree> tiermem@main`
    # builds a local source tree.
    version("main", branch="main")

    variant("fortran", default=True, description="Install the Fortran module (tiermem.mod)")
    variant(
        "mpi",
        default=False,
        description="tiermem's shared virtual memory across MPI ranks (cargo feature mpi)",
    )

    # userfaultfd: Linux only; the library is 64-bit only.
    requires("platform=linux", msg="tiermem needs Linux (userfaultfd)")

    depends_on("c", type="build")
    depends_on("fortran", type="build", when="+fortran")
    depends_on("rust@1.86:", type="build")
    # install.sh gives the installed libtiermem.so its soname with patchelf.
    depends_on("patchelf", type="build")
    depends_on("mpi", when="+mpi")
    # rsmpi generates its bindings with bindgen, which needs libclang.
    depends_on("llvm", type="build", when="+mpi")

    def install_args(self, spec, prefix):
        """The arguments of scripts/install.sh for this spec."""
        args = ["--prefix", str(prefix)]
        args += ["--fortran", "yes" if spec.satisfies("+fortran") else "no"]
        if spec.satisfies("+mpi"):
            args.append("--mpi")
        return args

    def install(self, spec, prefix):
        bash = which("bash", required=True)
        script = join_path(self.stage.source_path, "scripts", "install.sh")
        bash(script, *self.install_args(spec, prefix))
