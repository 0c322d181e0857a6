"""What the integration tests share: mpirun as root on an oversubscribed
machine, running a command with variables exported to the ranks, checks that
record their failures, and the shim's JSON lines."""
import json
import os
import subprocess

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe",
          "--mca", "mpi_yield_when_idle", "1", "--bind-to", "none"]

failures = []


def check(ok, what):
    """Records a failed check and prints it on one line; returns ok."""
    if not ok:
        failures.append(what)
        print("FAIL: " + what)
    return ok


def run(cmd, env=None, preload=None):
    """Runs cmd; returns (rc, stdout, stderr). env entries and LD_PRELOAD
    are exported to the ranks with -x when cmd is an mpirun."""
    full_env = dict(os.environ)
    full_env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1",
                     "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    full_env.update(env or {})
    if preload:
        full_env["LD_PRELOAD"] = preload
    if cmd[0] == "mpirun":
        names = list((env or {}).keys()) + (["LD_PRELOAD"] if preload else [])
        cmd = cmd[:1] + [a for n in names for a in ("-x", n)] + cmd[1:]
    p = subprocess.run(cmd, env=full_env, capture_output=True, text=True,
                       timeout=600)
    return p.returncode, p.stdout, p.stderr


def read_jsonl(path):
    """The JSON lines of a file; [] when it does not exist."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def check_plans_applied(entries, at_least, what):
    """At least `at_least` steps of a DPSHIM_LOG applied a plan, and none of
    them raised the imbalance or the maximum load."""
    applied = [e for e in entries if e.get("decision") == "apply"]
    check(len(applied) >= at_least, "%s: only %d of %d steps applied a plan"
          % (what, len(applied), len(entries)))
    for e in applied:
        check(e["imbalance_after"] <= e["imbalance_before"],
              "%s, step %d: imbalance after %g > before %g" % (
                  what, e["step"], e["imbalance_after"], e["imbalance_before"]))
        check(max(e["load_after"]) <= max(e["load_before"]),
              "%s, step %d: max load rose" % (what, e["step"]))
