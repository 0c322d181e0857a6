#!/usr/bin/python3
"""Do two builds balance alike? For refactors that must not change
behaviour: reftrain (4 and 8 ranks) and vlmtrain (InternVL and Qwen2-VL,
with and without the ViT-level balance) under each build's libdpshim.so
and adapters, with the cost models given (DPSHIM_COEFS, DPSHIM_VIT_COEFS)
so that plans do not depend on timings. Per run: both exit 0, the digests
are equal, and every step's log line agrees on the decision, the bytes
moved and the loads before and after (and on the encoder calls balanced
and their bytes). A build from before the adapters
were split out (hooks inside libdpshim.so) is run with the shim alone.
Prints one line per run; exit 1 when any differs. About a minute here.

    tools/compare_builds.py OLD_BUILD NEW_BUILD
        e.g. git worktree add /tmp/old REV && meson setup /tmp/old/build
             && ninja -C /tmp/old/build; tools/compare_builds.py
             /tmp/old/build build
"""
import json
import os
import subprocess
import sys
import tempfile

MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to",
       "none", "--mca", "mpi_yield_when_idle", "1"]
KEEP = ("decision", "bytes_moved", "load_before", "load_after",
        "imbalance_after")
ENV = {"DPSHIM_VLM_BALANCE": "1", "DPSHIM_TRIGGER_THRESHOLD": "0.05"}
VLM_COEFS = {"DPSHIM_COEFS": "0.0005,4,78,0.001,2",
             "DPSHIM_VIT_COEFS": "0.003,0,20", "DPSHIM_WARMUP_ITERS": "2-3"}


def kept(entry):
    """What a step's log line says about the plans, not their timings."""
    vit = entry.get("vit") or {}
    return dict({k: entry.get(k) for k in KEEP},
                vit=[vit.get(k) for k in ("calls", "applied", "bytes_moved")])


def preload(build, adapters):
    """The shim, then those of the adapters the build has."""
    libs = [os.path.join(build, "shim", "libdpshim.so")]
    for a in adapters:
        path = os.path.join(build, "tools", a, "libdpshim_%s.so" % a)
        if os.path.exists(path):
            libs.append(path)
    return ":".join(libs)


def run(build, ranks, trainer, args, adapters, env, log):
    e = {k: v for k, v in os.environ.items() if not k.startswith("DPSHIM_")}
    e.update(env, DPSHIM_LOG=log, LD_PRELOAD=preload(build, adapters),
             OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    names = list(env) + ["DPSHIM_LOG", "LD_PRELOAD"]
    cmd = (MPI[:1] + [a for n in names for a in ("-x", n)] + MPI[1:] +
           ["-np", str(ranks), os.path.join(build, "tools", trainer, trainer)]
           + args)
    p = subprocess.run(cmd, env=e, capture_output=True, text=True,
                       timeout=600)
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    digests = {k: v for k, v in (lines[-1] if lines else {}).items()
               if "digest" in k}
    steps = []
    if os.path.exists(log):
        with open(log) as f:
            steps = [kept(json.loads(l)) for l in f]
    return p.returncode, digests, steps


def compare(builds, ranks, trainer, args, adapters, env, what):
    with tempfile.TemporaryDirectory() as tmp:
        old, new = (run(b, ranks, trainer, args, adapters, env,
                        os.path.join(tmp, "%d.jsonl" % i))
                    for i, b in enumerate(builds))
    same = (old[0] == new[0] == 0 and old[1] and old[1] == new[1] and
            old[2] == new[2])
    applied = sum(s["decision"] == "apply" for s in new[2])
    print("%s: %s (rc %d / %d, digests %s, %d steps, %d applied)" % (
        what, "same" if same else "DIFFER", old[0], new[0],
        "equal" if old[1] == new[1] else "differ", len(new[2]), applied))
    return same


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    builds = [os.path.abspath(b) for b in sys.argv[1:]]
    coefs = subprocess.run(
        [os.path.join(builds[1], "tools", "reftrain", "reftrain"),
         "--print-coefs", "--time-scale", "0.02"],
        capture_output=True, text=True).stdout.strip()
    ok = True
    reftrain = ["--mode", "emulate", "--profile", "long", "--time-scale",
                "0.02", "--seed", "5", "--steps", "8", "--check"]
    for ranks in (4, 8):
        ok &= compare(builds, ranks, "reftrain", reftrain, ["packload"],
                      dict(ENV, DPSHIM_COEFS=coefs),
                      "reftrain, %d ranks" % ranks)
    for layout in ("internvl", "qwen2vl"):
        vlmtrain = ["--layout", layout, "--steps", "6", "--time-scale",
                    "0.02", "--seed", "7", "--check"]
        for vit in ("0", "1"):
            ok &= compare(builds, 4, "vlmtrain", vlmtrain, ["vlmload", "vit"],
                          dict(ENV, DPSHIM_VIT_BALANCE=vit, **VLM_COEFS),
                          "vlmtrain %s, ViT balance %s" % (layout, vit))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
