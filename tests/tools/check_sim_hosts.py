#!/usr/bin/env python3
"""dpshim-sim with hosts (--ranks-per-host), end to end on small sweeps:
  - every line says its hosts; the bytes moved across hosts are within
    the bytes moved, none for `none`, some for `default`; the summary
    says the hosts and the bytes across them;
  - --no-topology (plans not told the hosts): `default` moves at least as
    many bytes across hosts as when told, more at some DP size;
    --inter-host-cost 1 sends other bytes across hosts than the default;
  - without --ranks-per-host the lines are what they were (no hosts
    fields); all ranks on one host: one host, nothing across it, the
    all-reduce priced as without hosts, and the same plans (the solver
    plans one host as none: the shim always passes the hosts it learnt);
  - a slower --inter-gbs makes a step with bytes across hosts longer; a
    longer --inter-latency-us lengthens the all-reduce by 2(H-1) x it (a
    ring between H hosts);
  - --calibrate on a made-up multi-host file (step times the simulator
    priced at known parameters, some runs on shaped links): the table
    shows hosts, topology and link, the fit comes within 5 % and --json
    has the inter-host parameters and each run's hosts; with every link
    shaped the inter-host bandwidth is not fitted; a single-host file's
    table is as before, and a default@handoff run in it (the demo's
    hand-off row) is left out with a note;
  - bad values, on the command line and in the file: exit 2, one line
    naming the option or the key.
    check_sim_hosts.py DPSHIM_SIM
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "include"))
from mpitest import check, outcome  # noqa: E402

SIM = sys.argv[1]
SMALL = ["--profile", "long", "--seed", "5", "--time-scale", "0.2",
         "--warmup-last", "6", "--steps", "4"]


def sim(*args):
    p = subprocess.run([SIM] + list(args), capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stdout, p.stderr


def sweep(*args):
    """The JSON lines of a sweep, by (ranks, algo); and the summary."""
    rc, out, err = sim(*(SMALL + list(args)))
    check(rc == 0, "sweep %s: rc %d, %s" % (" ".join(args), rc, err[-400:]))
    lines = [json.loads(l) for l in out.splitlines() if l.strip()]
    return {(d["ranks"], d["algo"]): d for d in lines}, err


def check_lines_say_hosts():
    res, summary = sweep("--ranks", "8,32", "--ranks-per-host", "4",
                         "--algos", "none,seed,default")
    for (ranks, algo), d in sorted(res.items()):
        what = "DP %d %s" % (ranks, algo)
        check(d.get("ranks_per_host") == 4 and d.get("hosts") ==
              (ranks + 3) // 4 and d.get("topology") == 1,
              "%s: hosts fields %s" % (what, {k: d.get(k) for k in (
                  "ranks_per_host", "hosts", "topology")}))
        inter = d.get("bytes_inter_host_per_step", -1)
        check(0 <= inter <= d["bytes_moved_per_step"],
              "%s: %s bytes across hosts of %s moved" % (
                  what, inter, d["bytes_moved_per_step"]))
        if algo == "none":
            check(inter == 0, "%s: %s bytes across hosts" % (what, inter))
        if algo == "default":
            check(inter > 0, "%s: no bytes across hosts" % what)
    check("hosts of 4 ranks" in summary and "cross hosts" in summary,
          "summary without the hosts: %r" % summary[-600:])
    return res


def check_no_topology(told):
    res, summary = sweep("--ranks", "8,32", "--ranks-per-host", "4",
                         "--algos", "none,seed,default", "--no-topology")
    more = 0
    for ranks in (8, 32):
        a = told[(ranks, "default")]["bytes_inter_host_per_step"]
        b = res[(ranks, "default")]["bytes_inter_host_per_step"]
        check(b >= a, "DP %d: not told the hosts %s bytes across them, "
              "told %s" % (ranks, b, a))
        more += b > a
        check(res[(ranks, "default")]["topology"] == 0,
              "DP %d: --no-topology's line says topology %s" % (
                  ranks, res[(ranks, "default")]["topology"]))
    check(more > 0, "--no-topology moved no more bytes across hosts")
    check("plans not told the hosts" in summary,
          "--no-topology's summary: %r" % summary[-400:])


def check_inter_host_cost(told):
    """--inter-host-cost reaches the plans: at 1 (a byte across hosts as
    dear as one within) they send other bytes across hosts than at the
    default 10."""
    res, _ = sweep("--ranks", "32", "--ranks-per-host", "4", "--algos",
                   "default", "--inter-host-cost", "1")
    a = told[(32, "default")]["bytes_inter_host_per_step"]
    b = res[(32, "default")]["bytes_inter_host_per_step"]
    check(a != b, "--inter-host-cost 1: %s bytes across hosts, as at 10" % b)


def check_one_host():
    plain, _ = sweep("--ranks", "32", "--algos", "none,default")
    whole, _ = sweep("--ranks", "32", "--algos", "none,default",
                     "--ranks-per-host", "32")
    for key, d in plain.items():
        check(not any(k in d for k in ("ranks_per_host", "hosts",
                                       "bytes_inter_host_per_step")),
              "no --ranks-per-host, yet hosts fields: %s" % d)
        w = whole[key]
        check(w["allreduce_ms"] == d["allreduce_ms"],
              "%s on one host: all-reduce %s ms, without hosts %s" % (
                  key, w["allreduce_ms"], d["allreduce_ms"]))
        if key[1] == "none":
            check(w["step_ms"] == d["step_ms"],
                  "none on one host: step %s ms, without hosts %s" % (
                      w["step_ms"], d["step_ms"]))
        for f in ("bytes_moved_per_step", "imbalance_after"):
            check(w[f] == d[f], "%s on one host: %s %s, without hosts %s" % (
                key, f, w[f], d[f]))
        check(w["hosts"] == 1 and w["bytes_inter_host_per_step"] == 0,
              "%s on one host: %s hosts, %s bytes across" % (
                  key, w["hosts"], w["bytes_inter_host_per_step"]))


def check_pricing():
    base = ["--ranks", "8", "--ranks-per-host", "4", "--algos",
            "none,default"]
    fast, _ = sweep(*base)
    slow, _ = sweep(*(base + ["--inter-gbs", "0.001"]))
    far, _ = sweep(*(base + ["--inter-latency-us", "1010"]))
    d = fast[(8, "default")]
    check(d["bytes_inter_host_per_step"] > 1e5,
          "too few bytes across hosts to tell: %s" % d)
    # At 1 MB/s, the bytes across hosts alone take seconds.
    check(slow[(8, "default")]["step_ms"] > d["step_ms"] + 100,
          "--inter-gbs 0.001: step %s ms, at 50 GB/s %s ms" % (
              slow[(8, "default")]["step_ms"], d["step_ms"]))
    check(slow[(8, "none")]["allreduce_ms"] > fast[(8, "none")]["allreduce_ms"],
          "--inter-gbs 0.001: all-reduce %s ms, at 50 GB/s %s ms" % (
              slow[(8, "none")]["allreduce_ms"],
              fast[(8, "none")]["allreduce_ms"]))
    # 2 hosts: a ring between them takes 2(H-1) = 2 latency steps.
    grown = far[(8, "none")]["allreduce_ms"] - fast[(8, "none")]["allreduce_ms"]
    check(abs(grown - 2 * 1.0) < 2e-3,
          "--inter-latency-us 1010 (from 10): all-reduce %.4f ms longer, "
          "expected 2" % grown)


# ---- --calibrate ------------------------------------------------------------

CONFIG = {"profile": "long", "seed": 5, "time_scale": 0.2, "steps": 10,
          "warmup_last": 6, "grad_bytes": 1 << 20, "micro_batches": 1}
TRUE = ["--latency-us", "50", "--bandwidth-gbps", "8",
        "--inter-latency-us", "300"]


def made_up_runs(per_host, topology, inter_gbs, link_gbs=None):
    """Runs at DP 8 'measured' as the simulator prices them at TRUE."""
    args = ["--ranks", "8", "--ranks-per-host", str(per_host), "--algos",
            "none,default", "--inter-gbs", str(inter_gbs)] + TRUE
    if not topology:
        args.append("--no-topology")
    res, _ = sweep(*args)
    runs = []
    for (_, algo), d in sorted(res.items()):
        if algo == "none" and not topology:
            continue
        r = {"dp": 8, "variant": algo, "step_ms_balanced": d["step_ms"],
             "ranks_per_host": per_host, "topology": topology}
        if link_gbs:
            r["link_gbs"] = link_gbs
        runs.append(r)
    return runs


def calibrate(tmp, doc, *extra):
    path = os.path.join(tmp, "runs.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    out_json = os.path.join(tmp, "fit.json")
    if os.path.exists(out_json):
        os.remove(out_json)
    rc, out, err = sim("--calibrate", path, "--cores", "0", "--json",
                       out_json, *extra)
    fit = None
    if os.path.exists(out_json):
        with open(out_json) as f:
            fit = json.load(f)
    return rc, out, err, fit


def check_calibrate(tmp):
    runs = (made_up_runs(4, 1, 0.03) + made_up_runs(4, 0, 0.03) +
            made_up_runs(2, 1, 0.03) + made_up_runs(4, 1, 0.01, 0.01))
    rc, out, err, fit = calibrate(tmp, dict(CONFIG, runs=runs))
    print(out)
    check(rc == 0, "calibrate: rc %d, %s" % (rc, err[-400:]))
    check("between hosts: latency" in out and
          "hosts topo link_gbs" in out and " 2x4 " in out and
          " 4x2 " in out and "0.01" in out,
          "calibrate: the table without hosts, topology and link")
    check(out.strip().splitlines()[-1].startswith("  all within 5%: yes"),
          "calibrate: the fit is not within 5%")
    if check(fit is not None, "calibrate: no --json"):
        f = fit["fitted"]
        check("inter_latency_us" in f and "inter_bandwidth_gbs" in f,
              "--json: fitted %s" % f)
        r = fit["runs"]
        check(all("ranks_per_host" in x and "topology" in x for x in r) and
              [x.get("link_gbs") for x in r][-1] == 0.01,
              "--json: runs' hosts %s" % r)
    # Under the given parameters (50 GB/s between hosts), the shaped runs
    # (10 MB/s) must be the slower.
    given = [l for l in out.splitlines() if l.startswith("      8  default")]
    ms = [float(l.split()[-2]) for l in given[:4]]
    check(len(ms) == 4 and ms[3] > ms[0], "shaped run not slower: %s" % given)
    # Every link shaped: the inter-host bandwidth is known, not fitted.
    shaped = made_up_runs(4, 1, 0.01, 0.01) + made_up_runs(2, 1, 0.01, 0.01)
    rc, out, err, fit = calibrate(tmp, dict(CONFIG, runs=shaped))
    check(rc in (0, 1) and "unused: every run's link shaped" in out and
          fit and fit["fitted"]["inter_bandwidth_gbs"] == 50,
          "all shaped: %s %s" % (out[-800:], fit and fit["fitted"]))
    # The file's ranks_per_host is each run's default.
    top = [dict(r) for r in made_up_runs(4, 1, 0.03)]
    for r in top:
        del r["ranks_per_host"]
    rc, out, err, fit = calibrate(tmp, dict(CONFIG, ranks_per_host=4,
                                            runs=top))
    check(rc in (0, 1) and " 2x4 " in out,
          "top-level ranks_per_host: rc %d %s" % (rc, out[-600:]))
    # One host: the table and --json as they always were.
    single = [{"dp": 4, "variant": v, "step_ms_balanced": ms} for v, ms in
              (("none", 620.0), ("default", 560.0))]
    rc, out, err, fit = calibrate(tmp, dict(CONFIG, runs=single))
    header = "     dp  variant   measured_ms simulated_ms     diff"
    check(rc in (0, 1) and header in out.splitlines() and
          "between hosts" not in out and fit and
          "inter_latency_us" not in fit["fitted"] and
          "ranks_per_host" not in fit["runs"][0],
          "single host: %s %s" % (out[-600:], fit))
    # A run of the demo's hand-off row (default@handoff) is left out, said.
    rc2, out2, err2, fit2 = calibrate(tmp, dict(CONFIG, runs=single + [
        {"dp": 4, "variant": "default@handoff", "step_ms_balanced": 570.0}]))
    check(rc2 == rc and fit2 and len(fit2["runs"]) == 2 and
          "default@handoff at DP 4 left out" in err2 and
          "default@handoff" not in out2,
          "a default@handoff run: rc %d (%d without), %s %s" % (
              rc2, rc, err2[-400:], fit2 and fit2["runs"]))


def check_bad_values(tmp):
    bad = [
        (["--ranks-per-host", "-1"], "--ranks-per-host"),
        (["--ranks-per-host", "four"], "--ranks-per-host"),
        (["--ranks-per-host", "70000"], "--ranks-per-host"),
        (["--inter-latency-us", "-2"], "--inter-latency-us"),
        (["--inter-latency-us", "x"], "--inter-latency-us"),
        (["--inter-gbs", "0"], "--inter-gbs"),
        (["--inter-gbs", "fast"], "--inter-gbs"),
        (["--no-topology"], "--no-topology"),
        (["--ranks-per-host", "0", "--no-topology"], "--no-topology"),
        (["--inter-gbs", "10"], "--inter-gbs"),
        (["--inter-latency-us", "3", "--ranks-per-host", "0"],
         "--inter-latency-us"),
        (["--calibrate", "x.json", "--ranks-per-host", "4"],
         "--ranks-per-host"),
        (["--inter-host-cost", "0.5", "--ranks-per-host", "4"],
         "--inter-host-cost"),
        (["--inter-host-cost", "1001", "--ranks-per-host", "4"],
         "--inter-host-cost"),
        (["--inter-host-cost", "5"], "--inter-host-cost"),
    ]
    for args, name in bad:
        rc, out, err = sim(*args)
        check(rc == 2 and len(err.splitlines()) == 1 and name in err and
              not out, "%s: rc %d, %r" % (" ".join(args), rc, err))
    run = {"dp": 8, "variant": "default", "step_ms_balanced": 500.0,
           "ranks_per_host": 4}
    for key, value in (("topology", 2), ("ranks_per_host", -1),
                       ("ranks_per_host", 2.5), ("link_gbs", 0),
                       ("topology", "yes")):
        rc, out, err, _ = calibrate(tmp, dict(CONFIG, runs=[dict(
            run, **{key: value})]))
        check(rc == 2 and len(err.splitlines()) == 1 and
              '"%s"' % key in err,
              "file with %s %r: rc %d, %r" % (key, value, rc, err))


def main():
    told = check_lines_say_hosts()
    check_no_topology(told)
    check_inter_host_cost(told)
    check_one_host()
    check_pricing()
    with tempfile.TemporaryDirectory() as tmp:
        check_calibrate(tmp)
        check_bad_values(tmp)
    return outcome()


if __name__ == "__main__":
    sys.exit(main())
