#!/usr/bin/env python3
"""The multi-host figures (a benchmark, not a test): reftrain on H hosts x
R ranks (hosts.py), without the shim and with it, plans told the hosts
and not (DPSHIM_TOPOLOGY=1/0): TGS, whether the digest is the same, the
inter-host and all bytes moved per applied step, the imbalance after,
and the bytes on the hosts' links.

    figures.py H R BUILD [RATE] [--calibration OUT.json]
        e.g. figures.py 4 4 build 200mbit   (as root; RATE shapes the
                                             hosts' links, tc's units)

--calibration OUT.json also writes the runs as dpshim-sim --calibrate
replays them: the workload below (the one place it is set, for the runs
and the file alike), and per run dp, variant, step_ms_balanced (the mean
step time over the steps after the shim's warm-up, as
tools/demo_report.py computes it), ranks_per_host, topology and, when the
links were shaped, link_gbs.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

from hosts import Hosts

# The workload: reftrain's and the shim's settings, and what the simulator
# replays. DPSHIM_WARMUP_ITERS is steps 2..WARMUP_LAST (1-based).
PROFILE, TIME_SCALE, SEED, STEPS = "long", 0.2, 5, 20
WARMUP_LAST, GRAD_BYTES, MICRO_BATCHES = 6, 1 << 20, 1

# tc's rate units (tc(8)): bits or bytes per second, decimal or binary.
RATE_UNITS = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8,
              "gbit": 1e9 / 8, "tbit": 1e12 / 8, "kibit": 1024 / 8,
              "mibit": 1024 ** 2 / 8, "gibit": 1024 ** 3 / 8,
              "tibit": 1024 ** 4 / 8, "bps": 1, "kbps": 1e3, "mbps": 1e6,
              "gbps": 1e9, "tbps": 1e12, "kibps": 1024, "mibps": 1024 ** 2,
              "gibps": 1024 ** 3, "tibps": 1024 ** 4}


def run(cmd, env, preload, timeout):
    """(rc, stdout, stderr) of cmd with env and LD_PRELOAD (when preload)
    set; the caller's own DPSHIM_* and LD_PRELOAD do not reach the ranks.
    Past `timeout` seconds the run is killed whole and rc is 124."""
    full = {k: v for k, v in os.environ.items()
            if not k.startswith("DPSHIM_") and k != "LD_PRELOAD"}
    full.update(env, OMPI_ALLOW_RUN_AS_ROOT="1",
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if preload:
        full["LD_PRELOAD"] = preload
    p = subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return 124, out, err + "\nkilled after %d s" % timeout


def read_jsonl(path):
    """The JSON lines of a file; [] when it does not exist."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def rate_gbs(rate):
    """A tc rate ("200mbit") in GB/s; a bare number is bits/s, as tc's."""
    m = re.fullmatch(r"([0-9.]+)([a-z]*)", rate.strip().lower())
    if not m or (m.group(2) or "bit") not in RATE_UNITS:
        raise ValueError("rate %r: expected a number and one of %s" % (
            rate, ", ".join(sorted(RATE_UNITS))))
    return float(m.group(1)) * RATE_UNITS[m.group(2) or "bit"] / 1e9


def step_ms_balanced(stats_path):
    """The mean step time over the steps after the warm-up (0-based steps
    WARMUP_LAST..), as demo_report.py's run_figures."""
    stats = [s for s in read_jsonl(stats_path) if s["step"] >= WARMUP_LAST]
    return sum(s["step_ms"] for s in stats) / len(stats) if stats else None


def calibration_doc(runs):
    """The file dpshim-sim --calibrate reads (tools/demo_report.py's
    config, plus the hosts of each run)."""
    return {"profile": PROFILE, "seed": SEED, "time_scale": TIME_SCALE,
            "steps": STEPS, "warmup_last": WARMUP_LAST,
            "grad_bytes": GRAD_BYTES, "micro_batches": MICRO_BATCHES,
            "runs": runs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hosts", type=int)
    ap.add_argument("ranks_per_host", type=int)
    ap.add_argument("build")
    ap.add_argument("rate", nargs="?")
    ap.add_argument("--calibration", metavar="OUT.json")
    args = ap.parse_args()
    H, R = args.hosts, args.ranks_per_host
    link = rate_gbs(args.rate) if args.rate else None
    cmd = [os.path.join(args.build, "tools", "reftrain", "reftrain"),
           "--mode", "emulate", "--profile", PROFILE,
           "--time-scale", str(TIME_SCALE), "--seed", str(SEED),
           "--steps", str(STEPS), "--grad-bytes", str(GRAD_BYTES),
           "--micro-batches", str(MICRO_BATCHES)]
    shim = ":".join(os.path.join(args.build, *p) for p in (
        ("shim", "libdpshim.so"),
        ("tools", "packload", "libdpshim_packload.so")))
    runs = []
    with Hosts(H, tag="fig", rate=args.rate) as hosts, \
            tempfile.TemporaryDirectory() as tmp:
        print("%d hosts x %d ranks, %s" % (H, R, hosts.shaped))
        shaped = hosts.shaped.startswith("links shaped")

        def go(name, env, preload, topology):
            names = list(env) + (["LD_PRELOAD"] if preload else [])
            stats = os.path.join(tmp, name + ".stats.jsonl")
            rc, out, err = run(hosts.mpirun(R, cmd + ["--stats-out", stats],
                                            env=names),
                               env=env, preload=preload, timeout=600)
            line = [l for l in out.splitlines() if l.startswith("{")]
            ms = step_ms_balanced(stats) if rc == 0 else None
            if ms:
                r = {"dp": H * R, "variant": "default" if preload else "none",
                     "step_ms_balanced": ms, "ranks_per_host": R,
                     "topology": topology}
                if shaped:
                    r["link_gbs"] = link
                runs.append(r)
            return rc, (json.loads(line[-1]) if line else {}), err

        rc, plain, _ = go("none", {}, None, 1)
        print("none: rc %d tgs %s digest %s" % (
            rc, plain.get("tgs"), plain.get("consumed_digest")))
        for topo in ("1", "0"):
            log = os.path.join(tmp, "l%s.jsonl" % topo)
            env = {"DPSHIM_VLM_BALANCE": "1",
                   "DPSHIM_WARMUP_ITERS": "2-%d" % WARMUP_LAST,
                   "DPSHIM_LOG": log, "DPSHIM_TOPOLOGY": topo}
            sent0 = hosts.bytes_sent()
            rc, res, err = go("topo" + topo, env, shim, int(topo))
            sent = sum(b - a for a, b in zip(sent0, hosts.bytes_sent()))
            e = [x for x in read_jsonl(log) if x.get("decision") == "apply"]
            steps = len(e)
            inter = sum(x.get("bytes_inter_host", 0) for x in e)
            moved = sum(x.get("bytes_moved", 0) for x in e)
            imb = [x["imbalance_after"] for x in e]
            print("shim topology=%s: rc %d tgs %s digest_same %s applied %d "
                  "inter-host bytes/step %.0f of moved %.0f; mean imbalance "
                  "after %.4f; link bytes %d" % (
                      topo, rc, res.get("tgs"),
                      res.get("consumed_digest") == plain.get(
                          "consumed_digest"), steps,
                      inter / max(1, steps), moved / max(1, steps),
                      sum(imb) / max(1, len(imb)), sent))
    if args.calibration:
        with open(args.calibration, "w") as f:
            json.dump(calibration_doc(runs), f, indent=1)
        print("wrote %s (%d runs): dpshim-sim --calibrate %s" % (
            args.calibration, len(runs), args.calibration))
    return 0


if __name__ == "__main__":
    sys.exit(main())
