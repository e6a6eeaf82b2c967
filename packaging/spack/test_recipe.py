"""Runs the Spack recipe (tiermem/package.py) without Spack: stubs of the
spack.package names the recipe uses record its directives, then its
install() runs scripts/install.sh into the prefix given on the command line.

    python3 packaging/spack/test_recipe.py PREFIX

Checks the directives (variants, build dependencies) and the arguments
install() passes; what it does not test is said in package.py.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

directives = []


def _directive(name):
    def record(*args, **kwargs):
        directives.append((name, args, kwargs))

    return record


class Executable:
    def __init__(self, path):
        self.path = path

    def __call__(self, *args):
        subprocess.run([self.path, *map(str, args)], check=True)


def which(name, required=False):
    path = shutil.which(name)
    if path is None and required:
        raise RuntimeError(f"{name} not found")
    return Executable(path) if path else None


class Package:
    def __init__(self, spec, source_path):
        self.spec = spec
        self.stage = types.SimpleNamespace(source_path=source_path)


class Spec:
    """Only what the recipe asks a spec: satisfies('+variant')."""

    def __init__(self, variants):
        self.variants = variants

    def satisfies(self, constraint):
        assert constraint.startswith("+"), constraint
        return self.variants.get(constraint[1:], False)


def stub_spack():
    m = types.ModuleType("spack.package")
    for name in ("version", "variant", "depends_on", "requires", "conflicts", "license"):
        setattr(m, name, _directive(name))
    m.Package, m.which, m.Executable = Package, which, Executable
    m.join_path = os.path.join
    m.__all__ = [n for n in vars(m) if not n.startswith("_")]
    spack = types.ModuleType("spack")
    spack.package = m
    sys.modules["spack"], sys.modules["spack.package"] = spack, m


def main():
    prefix = sys.argv[1]
    stub_spack()
    spec_ = importlib.util.spec_from_file_location("tiermem_recipe", os.path.join(HERE, "tiermem", "package.py"))
    recipe = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(recipe)

    names = {(d[0], d[1][0]) for d in directives}
    for want in [("variant", "fortran"), ("variant", "mpi"), ("depends_on", "rust@1.86:"),
                 ("depends_on", "patchelf"), ("depends_on", "mpi"), ("requires", "platform=linux")]:
        assert want in names, f"the recipe lacks {want}"
    mpi_dep = [d for d in directives if d[0] == "depends_on" and d[1][0] == "mpi"][0]
    assert mpi_dep[2].get("when") == "+mpi", mpi_dep

    # The arguments for each variant combination.
    pkg = recipe.Tiermem(Spec({}), ROOT)
    assert pkg.install_args(Spec({"fortran": True, "mpi": True}), "/p") == \
        ["--prefix", "/p", "--fortran", "yes", "--mpi"]
    assert pkg.install_args(Spec({}), "/p") == ["--prefix", "/p", "--fortran", "no"]

    # install() for real: +fortran where this tree and machine can build it.
    fortran = os.path.exists(os.path.join(ROOT, "include", "tiermem.f90")) and shutil.which("gfortran")
    spec = Spec({"fortran": bool(fortran)})
    with tempfile.TemporaryDirectory() as stage_cwd:
        os.chdir(stage_cwd)  # Spack runs install() in the stage, not the tree
        recipe.Tiermem(spec, ROOT).install(spec, prefix)
    print(f"installed {'+' if fortran else '~'}fortran~mpi into {prefix}")


if __name__ == "__main__":
    main()
