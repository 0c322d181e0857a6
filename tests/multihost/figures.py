#!/usr/bin/env python3
"""The multi-host figures (a benchmark, not a test): reftrain on H hosts x
R ranks (hosts.py), without the shim and with it, plans told the hosts
and not (DPSHIM_TOPOLOGY=1/0): TGS, whether the digest is the same, the
inter-host and all bytes moved per applied step, the imbalance after,
and the bytes on the hosts' links.

    figures.py H R BUILD [RATE]   e.g. figures.py 4 4 build 200mbit
                                  (as root; RATE shapes the hosts' links)
"""
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mpi"))
from hosts import Hosts  # noqa: E402
from mpitest import read_jsonl, run  # noqa: E402

H, R, BUILD = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
RATE = sys.argv[4] if len(sys.argv) > 4 else None
cmd = [os.path.join(BUILD, "tools", "reftrain", "reftrain"), "--mode",
       "emulate", "--profile", "long", "--time-scale", "0.2", "--seed", "5",
       "--steps", "20"]
shim = os.path.join(BUILD, "shim", "libdpshim.so")
with Hosts(H, tag="fig", rate=RATE) as hosts, \
        tempfile.TemporaryDirectory() as tmp:
    print("%d hosts x %d ranks, %s" % (H, R, hosts.shaped))
    def go(env, preload):
        names = list(env) + (["LD_PRELOAD"] if preload else [])
        rc, out, err = run(hosts.mpirun(R, cmd, env=names), env=env, preload=preload, timeout=600)
        line = [l for l in out.splitlines() if l.startswith("{")]
        return rc, (json.loads(line[-1]) if line else {}), err
    rc, plain, _ = go({}, None)
    print("none: rc %d tgs %s digest %s" % (rc, plain.get("tgs"), plain.get("consumed_digest")))
    for topo in ("1", "0"):
        log = os.path.join(tmp, "l%s.jsonl" % topo)
        env = {"DPSHIM_VLM_BALANCE": "1", "DPSHIM_WARMUP_ITERS": "2-6", "DPSHIM_LOG": log, "DPSHIM_TOPOLOGY": topo}
        sent0 = hosts.bytes_sent()
        rc, res, err = go(env, shim)
        sent = sum(b - a for a, b in zip(sent0, hosts.bytes_sent()))
        e = [x for x in read_jsonl(log) if x.get("decision") == "apply"]
        steps = len(e)
        inter = sum(x.get("bytes_inter_host", 0) for x in e); moved = sum(x.get("bytes_moved", 0) for x in e)
        imb = [x["imbalance_after"] for x in e]
        print("shim topology=%s: rc %d tgs %s digest_same %s applied %d inter-host bytes/step %.0f of moved %.0f; mean imbalance after %.4f; link bytes %d" % (
            topo, rc, res.get("tgs"), res.get("consumed_digest") == plain.get("consumed_digest"), steps,
            inter / max(1, steps), moved / max(1, steps), sum(imb) / max(1, len(imb)), sent))
