#!/usr/bin/env python3
"""reftrain across network-namespace hosts (hosts.py), OpenMPI over TCP
between them: 2 hosts x 2 ranks, without the shim and with it. With the
shim: the same digest, every sample intact, plans applied, bytes really
crossing the hosts' links, and the step log and the summary telling
inter-host bytes from intra-host ones (the shim learns the hosts itself);
with DPSHIM_TOPOLOGY=0 too (plans not told the hosts): the same digest,
and both runs' step times and inter-host bytes printed. Skipped (77),
with one line, where namespaces cannot be made.

    check_multihost.py --shim LIBDPSHIM --reftrain REFTRAIN
"""
import argparse
import json
import os
import signal
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mpi"))

from hosts import Hosts, Unavailable  # noqa: E402
from mpitest import check, check_plans_applied, failures, read_jsonl, run  # noqa: E402

TRAIN = ["--mode", "emulate", "--profile", "long", "--time-scale", "0.02",
         "--seed", "5", "--steps", "10", "--check"]
SHIM_ENV = {"DPSHIM_VLM_BALANCE": "1", "DPSHIM_WARMUP_ITERS": "2-4",
            "DPSHIM_VERIFY": "1"}


def result(what, rc, out, err):
    lines = [l for l in out.splitlines() if l.startswith("{")]
    check(rc == 0 and len(lines) == 1, "%s: rc %d, %r" % (what, rc,
                                                         err[-600:]))
    return json.loads(lines[-1]) if lines else {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", required=True)
    ap.add_argument("--reftrain", required=True)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--ranks-per-host", type=int, default=2)
    args = ap.parse_args()
    # meson's timeout sends SIGTERM: unwind, so that the hosts go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        with Hosts(args.hosts) as hosts, \
                tempfile.TemporaryDirectory() as tmp:
            cmd = [args.reftrain] + TRAIN
            plain = result("without the shim", *run(
                hosts.mpirun(args.ranks_per_host, cmd), timeout=300))
            log = os.path.join(tmp, "log.jsonl")
            env = dict(SHIM_ENV, DPSHIM_LOG=log)
            sent = hosts.bytes_sent()
            rc, out, err = run(hosts.mpirun(args.ranks_per_host, cmd,
                                            env=list(env) + ["LD_PRELOAD"]),
                               env=env, preload=args.shim, timeout=300)
            shim = result("with the shim", rc, out, err)
            sent = [b - a for a, b in zip(sent, hosts.bytes_sent())]
            print("hosts' links sent %s bytes with the shim" % sent)
            check(all(b > 0 for b in sent), "no bytes crossed a host's "
                  "link: %s" % sent)
            if plain and shim:
                check(shim.get("check_errors") == 0 and
                      shim.get("consumed_digest") == plain.get(
                          "consumed_digest"),
                      "digest %s (check_errors %s) != without the shim %s" % (
                          shim.get("consumed_digest"),
                          shim.get("check_errors"),
                          plain.get("consumed_digest")))
            entries = read_jsonl(log)
            check_plans_applied(entries, 3, "across hosts")
            inter = [e.get("bytes_inter_host") for e in entries
                     if e.get("decision") == "apply"]
            check(inter and all(x is not None for x in inter) and
                  all(x <= e["bytes_moved"] for x, e in zip(
                      inter, [e for e in entries
                              if e.get("decision") == "apply"])) and
                  sum(inter) > 0,
                  "log: inter-host bytes %s" % inter)
            check(entries and entries[0].get("hosts") == args.hosts,
                  "log: hosts %s, expected %d" % (
                      entries[0].get("hosts") if entries else None,
                      args.hosts))
            check("across hosts" in err, "summary without the inter-host "
                  "bytes: %r" % err[-600:])
            print("with the shim: %d plans applied, %d inter-host bytes "
                  "moved of %d; TGS %s (without the shim %s)" % (
                      len(inter), sum(inter or [0]), sum(
                          e.get("bytes_moved", 0) for e in entries),
                      shim.get("tgs"), plain.get("tgs")))
            env["DPSHIM_TOPOLOGY"] = "0"
            log0 = os.path.join(tmp, "log0.jsonl")
            env["DPSHIM_LOG"] = log0
            rc, out, err = run(hosts.mpirun(args.ranks_per_host, cmd,
                                            env=list(env) + ["LD_PRELOAD"]),
                               env=env, preload=args.shim, timeout=300)
            flat = result("with the shim, DPSHIM_TOPOLOGY=0", rc, out, err)
            check(not flat or flat.get("consumed_digest") == plain.get(
                "consumed_digest"), "DPSHIM_TOPOLOGY=0: digest %s" % (
                    flat.get("consumed_digest")))
            e0 = read_jsonl(log0)
            print("DPSHIM_TOPOLOGY=0: %d inter-host bytes moved of %d; TGS %s"
                  % (sum(e.get("bytes_inter_host", 0) for e in e0),
                     sum(e.get("bytes_moved", 0) for e in e0),
                     flat.get("tgs")))
    except Unavailable as e:
        print("SKIP: no network namespaces here (%s)" % e)
        return 77
    print("%d failures" % len(failures) if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
