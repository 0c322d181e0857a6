#!/usr/bin/env python3
"""meson install into a DESTDIR, then what a user does with the tree:
  - every file is where it should be: libdpshim.so, libdpshim_solver.so
    (which needs no MPI), the headers, dpshim.pc and dpshim-solver.pc, the
    tools, dpshim(7) (every variable of the shim's table in it) and a page
    per tool;
  - libdpshim.so exports only dpshim's API (functions its installed
    headers declare) and the MPI entry points it wraps (MPI_*): no
    reference tool's symbol (packload_next, vit_forward, ...);
  - a solver client, built with `pkg-config dpshim-solver` only and run
    against the installed library, gets a plan that lowers the maximum;
  - the adapter example builds with `pkg-config dpshim` only (plus its
    loader's own header) and links the installed libdpshim.so;
  - the installed dpshim-run looks for the installed library, not the
    build tree's, and with --lib prints the command;
  - the Python package is installed, and imports from there (without the
    preload: balancing not available); the installed dpshim-run gives a
    python command the installed start-up hook's directory (holding only
    sitecustomize.py) and the package's.
Prints each file's path and the outputs; exit 1 when a check fails.

    check_install.py BUILD SOURCE PREFIX LIBDIR BINDIR INCLUDEDIR MANDIR
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "include"))
from mpitest import check, outcome  # noqa: E402

TOOLS = ("dpshim-run", "dpshim-report", "dpshim-solve-bench", "dpshim-sim",
         "dpshim-optcheck")


def sh(cmd, env=None, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env,
                       timeout=300, **kw)
    return p.returncode, p.stdout, p.stderr


def check_exports(lib, incdir):
    """The library's defined dynamic symbols: dpshim_* declared in the
    headers, or MPI_*."""
    rc, out, err = sh(["nm", "-D", "--defined-only", lib])
    if not check(rc == 0, "nm -D %s: %s" % (lib, err.strip())):
        return
    declared = set()
    for h in os.listdir(incdir):
        with open(os.path.join(incdir, h)) as f:
            declared |= set(re.findall(r"\b(dpshim_\w+)\s*\(", f.read()))
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    stray = [n for n in names if not (n in declared or
                                      re.fullmatch(r"MPI_[A-Z][a-z_]*", n))]
    check(not stray, "libdpshim.so exports what it should not: %s"
          % " ".join(sorted(stray)[:20]))
    print("libdpshim.so exports %d symbols, %d of them dpshim_*" % (
        len(names), sum(n.startswith("dpshim_") for n in names)))


def main():
    build, source, prefix, libdir, bindir, incdir, mandir = sys.argv[1:8]
    under = lambda d: d if os.path.isabs(d) else os.path.join(prefix, d)
    libdir, bindir, incdir, mandir = map(under, (libdir, bindir, incdir,
                                                 mandir))
    with tempfile.TemporaryDirectory() as dest:
        rc, out, err = sh(["meson", "install", "-C", build, "--destdir", dest,
                           "--no-rebuild", "--quiet"])
        if not check(rc == 0, "meson install: %s" % err.strip()[-500:]):
            return 1
        root = lambda p: dest + p
        files = {
            "lib": [os.path.join(libdir, f) for f in (
                "libdpshim.so", "libdpshim_solver.so", "libdpshim_solver.so.0",
                "pkgconfig/dpshim.pc", "pkgconfig/dpshim-solver.pc")],
            "include": [os.path.join(incdir, "dpshim", h) for h in (
                "dpshim.h", "solver.h", "fit.h", "batch.h", "adapter.h",
                "vlm.h", "encoder.h")],
            "bin": [os.path.join(bindir, t) for t in TOOLS],
            "man": [os.path.join(mandir, "man7", "dpshim.7")] + [
                os.path.join(mandir, "man1", t + ".1") for t in TOOLS]}
        for kind, paths in files.items():
            for p in paths:
                check(os.path.exists(root(p)), "not installed: %s" % p)
                print("installed: %s" % p)
        for p in files["bin"]:
            check(os.access(root(p), os.X_OK), "not executable: %s" % p)
        rc, out, _ = sh(["readelf", "-d", root(os.path.join(
            libdir, "libdpshim_solver.so"))])
        check(rc == 0 and "libmpi" not in out,
              "libdpshim_solver.so needs MPI: %s" % out)
        page = open(root(files["man"][0])).read()
        table = open(os.path.join(source, "shim", "env.h")).read()
        names = [w.strip('"') for w in table.split() if w.startswith('"DPSHIM_')]
        missing = [n for n in names if n.replace("_", "\\_") not in page
                   and n not in page]
        check(names and not missing, "dpshim(7) lacks %s" % missing)

        env = dict(os.environ,
                   PKG_CONFIG_PATH=root(os.path.join(libdir, "pkgconfig")),
                   PKG_CONFIG_SYSROOT_DIR=dest)
        flags = {}
        for pc in ("dpshim", "dpshim-solver"):
            rc, out, err = sh(["pkg-config", "--cflags", "--libs", pc], env=env)
            check(rc == 0 and dest in out, "pkg-config %s: %s%s" % (pc, out,
                                                                     err))
            flags[pc] = shlex.split(out)
            print("pkg-config --cflags --libs %s: %s" % (pc, out.strip()))
        with tempfile.TemporaryDirectory() as tmp:
            client = os.path.join(tmp, "client")
            rc, _, err = sh(["cc", "-std=c11", "-Wall", "-Werror", "-o", client,
                             os.path.join(source, "tests", "install",
                                          "solver_client.c")]
                            + flags["dpshim-solver"])
            if check(rc == 0, "solver client does not build: %s" % err):
                rc, out, err = sh([client], env=dict(
                    os.environ, LD_LIBRARY_PATH=root(libdir)))
                check(rc == 0 and out.startswith("applied"),
                      "solver client: rc %d, %r %r" % (rc, out, err))
                print("solver client: %s" % out.strip())
            adapter = os.path.join(tmp, "libdpshim_myload.so")
            example = os.path.join(source, "tools", "adapter_example")
            rc, _, err = sh(["cc", "-std=c11", "-Wall", "-Werror", "-shared",
                             "-fPIC", "-o", adapter, "-I" + example,
                             os.path.join(example, "dpshim_myload.c")]
                            + flags["dpshim"])
            if check(rc == 0, "adapter does not build: %s" % err):
                rc, out, _ = sh(["readelf", "-d", adapter])
                check("libdpshim.so" in out, "adapter does not link "
                      "libdpshim.so: %s" % out)
                print("adapter example: built, links libdpshim.so")
        pkgs = [d for d, _, fs in os.walk(dest) if "__init__.py" in fs and
                os.path.basename(d) == "dpshim"]
        if check(len(pkgs) == 1, "the Python package: %s" % pkgs):
            print("installed: %s" % pkgs[0][len(dest):])
            rc, out, err = sh(["/usr/bin/python3", "-c", "import dpshim; "
                               "print(dpshim.__file__, dpshim.available())"],
                              env=dict(os.environ, PYTHONPATH=os.path.dirname(
                                  pkgs[0])))
            check(rc == 0 and out.startswith(pkgs[0]) and "False" in out,
                  "import dpshim from the installed tree: %r %r" % (out, err))
        check_exports(root(os.path.join(libdir, "libdpshim.so")),
                      root(os.path.join(incdir, "dpshim")))
        run = root(os.path.join(bindir, "dpshim-run"))
        installed = os.path.join(libdir, "libdpshim.so")
        rc, out, err = sh([run, "--dry-run", "-np", "2", "./trainer"])
        check(rc == 2 and installed in err,
              "installed dpshim-run without --lib: rc %d, %r (expected to "
              "look for %s)" % (rc, err, installed))
        rc, out, err = sh([run, "--lib", root(installed), "--dry-run",
                           "--use-vlm-dp-balance", "-np", "2", "./trainer"])
        check(rc == 0 and "DPSHIM_VLM_BALANCE=1" in out,
              "installed dpshim-run --lib: rc %d, %r %r" % (rc, out, err))
        print("dpshim-run --dry-run: %s" % out.strip())
        rc, out, err = sh([run, "--lib", root(installed), "--dry-run", "--",
                           "python3", "-c", "pass"])
        paths = [w.split("=", 1)[1].split(":") for w in shlex.split(out)
                 if w.startswith("PYTHONPATH=")]
        if check(rc == 0 and paths and len(paths[0]) == 2,
                 "installed dpshim-run, python: rc %d, %r %r"
                 % (rc, out, err)):
            boot, package = paths[0]
            check(os.listdir(root(boot)) == ["sitecustomize.py"] and
                  os.path.exists(root(os.path.join(package, "dpshim",
                                                   "autowrap.py"))),
                  "the start-up hook %s or the package %s not installed"
                  % (boot, package))
            print("installed: %s, %s" % (boot, package))
    return outcome()


if __name__ == "__main__":
    sys.exit(main())
