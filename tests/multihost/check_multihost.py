#!/usr/bin/env python3
"""reftrain and vlmtrain across network-namespace hosts (tools/multihost/hosts.py), OpenMPI
over TCP between them: 2 hosts x 2 ranks, without the shim and with it.

reftrain with the shim: the same digest, every sample intact, plans
applied, bytes really crossing the hosts' links, and the step log and the
summary telling inter-host bytes from intra-host ones (the shim learns the
hosts itself); with DPSHIM_TOPOLOGY=0 too (plans not told the hosts): the
same digest, and both runs' step times and inter-host bytes printed.

vlmtrain (check_vlm.py's runs: --check, patch gradients), InternVL and
Qwen2-VL layouts, with the shim balancing the LLM's packs (check_vlm.py's
SHIM_ENV), then the encoder's calls too (check_vlm_vit.py's VIT_ENV):
every digest of the run without the shim (consumed, images, embeddings,
ViT and patch gradients), plans applied, the log's and the summary's
inter-host bytes as for reftrain; with the ViT balance, encoder calls
balanced in the log (whose "vit" bytes are not told apart by host).

Every applied line of a step log has "hosts" 2 and bytes_inter_host within
its bytes_moved, some of them > 0. Skipped (77), with one line, where
namespaces cannot be made.

    check_multihost.py --reftrain-preload LIST --vlmtrain-preload LIST
                       --reftrain REFTRAIN --vlmtrain VLMTRAIN
"""
import argparse
import json
import os
import signal
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mpi"))
sys.path.insert(0, os.path.join(HERE, "..", "include"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "multihost"))

from check_vlm import SHIM_ENV as VLM_ENV, TRAIN as VLM_TRAIN  # noqa: E402
from check_vlm import encoder_keys, same_digests  # noqa: E402
from check_vlm_vit import VIT_ENV  # noqa: E402
from hosts import Hosts, Unavailable  # noqa: E402
from mpitest import (check, check_plans_applied, intact, outcome,  # noqa
                     read_jsonl, run)

TRAIN = ["--mode", "emulate", "--profile", "long", "--time-scale", "0.02",
         "--seed", "5", "--steps", "10", "--check"]
SHIM_ENV = {"DPSHIM_VLM_BALANCE": "1", "DPSHIM_WARMUP_ITERS": "2-4",
            "DPSHIM_VERIFY": "1"}
VLM_EXTRA = ["--patch-grads"]
VLM_LAYOUTS = ("internvl", "qwen2vl")
# A run takes seconds; past this it is a hang (a failed check, its
# processes killed), and all runs together stay within meson's timeout.
RUN_TIMEOUT = 60


def on_hosts(hosts, args, cmd, what, env=None):
    """cmd on every host, args.ranks_per_host ranks each; with the shim
    and `env` unless env is None. Its JSON result line ({} when there is
    not exactly one, or the run failed: a failed check) and stderr."""
    exports = [] if env is None else list(env) + ["LD_PRELOAD"]
    preload = (args.vlmtrain_preload if cmd[0] == args.vlmtrain
               else args.reftrain_preload)
    rc, out, err = run(hosts.mpirun(args.ranks_per_host, cmd, env=exports),
                       env=env, preload=None if env is None else preload,
                       timeout=RUN_TIMEOUT)
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if not check(rc == 0 and len(lines) == 1, "%s: rc %d, %r"
                 % (what, rc, err[-600:])):
        return {}, err
    return json.loads(lines[0]), err


def check_across_hosts(entries, err, nhosts, what):
    """Plans applied in the step log, each line of them with the hosts and
    its inter-host bytes within its bytes moved, some > 0; the summary's
    "across hosts" line. Returns (plans applied, inter-host bytes, bytes
    moved) over the log."""
    check_plans_applied(entries, 3, what)
    applied = [e for e in entries if e.get("decision") == "apply"]
    for e in applied:
        check(e.get("hosts") == nhosts and
              0 <= e.get("bytes_inter_host", -1) <= e["bytes_moved"],
              "%s, step %s: hosts %s (expected %d), inter-host bytes %s of "
              "%s moved" % (what, e.get("step"), e.get("hosts"), nhosts,
                            e.get("bytes_inter_host"), e.get("bytes_moved")))
    inter = sum(e.get("bytes_inter_host", 0) for e in applied)
    check(inter > 0, "%s: no inter-host bytes in %d applied steps"
          % (what, len(applied)))
    check("across hosts" in err, "%s: summary without the inter-host bytes: "
          "%r" % (what, err[-600:]))
    return len(applied), inter, sum(e.get("bytes_moved", 0) for e in entries)


def balanced(hosts, args, cmd, what, plain, keys, env):
    """cmd with the shim and `env`: every item intact and the digests
    `keys` those of `plain`, the run without the shim. Its result and
    stderr."""
    on, err = on_hosts(hosts, args, cmd, what, env)
    if intact(what, plain, on):
        same_digests(what, on, plain, keys)
    return on, err


def reftrain(hosts, args, tmp):
    cmd, keys = [args.reftrain] + TRAIN, ("consumed_digest",)
    plain, _ = on_hosts(hosts, args, cmd, "reftrain without the shim")
    log = os.path.join(tmp, "reftrain.jsonl")
    sent = hosts.bytes_sent()
    shim, err = balanced(hosts, args, cmd, "reftrain with the shim", plain,
                         keys, dict(SHIM_ENV, DPSHIM_LOG=log))
    sent = [b - a for a, b in zip(sent, hosts.bytes_sent())]
    print("hosts' links sent %s bytes with the shim" % sent)
    check(all(b > 0 for b in sent), "no bytes crossed a host's link: %s"
          % sent)
    applied, inter, moved = check_across_hosts(read_jsonl(log), err,
                                               args.hosts, "reftrain")
    print("reftrain with the shim: %d plans applied, %d inter-host bytes "
          "moved of %d; TGS %s (without the shim %s)"
          % (applied, inter, moved, shim.get("tgs"), plain.get("tgs")))
    log0 = os.path.join(tmp, "reftrain0.jsonl")
    flat, _ = balanced(hosts, args, cmd, "reftrain, DPSHIM_TOPOLOGY=0",
                       plain, keys, dict(SHIM_ENV, DPSHIM_LOG=log0,
                                         DPSHIM_TOPOLOGY="0"))
    e0 = read_jsonl(log0)
    print("DPSHIM_TOPOLOGY=0: %d inter-host bytes moved of %d; TGS %s"
          % (sum(e.get("bytes_inter_host", 0) for e in e0),
             sum(e.get("bytes_moved", 0) for e in e0), flat.get("tgs")))


def vlmtrain(hosts, args, tmp, layout):
    cmd = [args.vlmtrain, "--layout", layout] + VLM_TRAIN + VLM_EXTRA
    keys = ("consumed_digest", "images_digest") + encoder_keys(VLM_EXTRA)
    plain, _ = on_hosts(hosts, args, cmd, layout + " without the shim")
    print("%s without the shim: %s" % (layout, " ".join(
        "%s %s" % (k, plain.get(k)) for k in keys)))
    for vit, env in ((False, VLM_ENV), (True, VIT_ENV)):
        what = "%s, %s" % (layout, "LLM and ViT balance" if vit
                           else "LLM balance")
        log = os.path.join(tmp, "%s-%s.jsonl" % (layout, vit))
        _, err = balanced(hosts, args, cmd, what, plain, keys,
                          dict(env, DPSHIM_LOG=log))
        entries = read_jsonl(log)
        applied, inter, moved = check_across_hosts(entries, err, args.hosts,
                                                   what)
        line = "%s: %d plans applied, %d inter-host bytes moved of %d" % (
            what, applied, inter, moved)
        if vit:
            notes = [e["vit"] for e in entries if "vit" in e]
            calls = sum(v["applied"] for v in notes)
            check(calls > 0, "%s: no encoder call balanced in the log (%d "
                  "calls)" % (what, sum(v["calls"] for v in notes)))
            line += "; ViT: %d encoder calls balanced, %d bytes moved" % (
                calls, sum(v["bytes_moved"] for v in notes))
        print(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reftrain-preload", required=True,
                    help="libdpshim.so and the reference loader's adapter")
    ap.add_argument("--vlmtrain-preload", required=True,
                    help="libdpshim.so and the VLM loader's and encoder's "
                    "adapters")
    ap.add_argument("--reftrain", required=True)
    ap.add_argument("--vlmtrain", required=True)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--ranks-per-host", type=int, default=2)
    args = ap.parse_args()
    # meson's timeout sends SIGTERM: unwind, so that the hosts go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        with Hosts(args.hosts) as hosts, \
                tempfile.TemporaryDirectory() as tmp:
            reftrain(hosts, args, tmp)
            for layout in VLM_LAYOUTS:
                vlmtrain(hosts, args, tmp, layout)
    except Unavailable as e:
        print("SKIP: no network namespaces here (%s)" % e)
        return 77
    return outcome()


if __name__ == "__main__":
    sys.exit(main())
