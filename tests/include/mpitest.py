"""What the integration tests share: mpirun as root on an oversubscribed
machine, running a command with variables exported to the ranks, checks that
record their failures, and the shim's JSON lines."""
import json
import os
import signal
import subprocess
import time

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe",
          "--mca", "mpi_yield_when_idle", "1", "--bind-to", "none"]

failures = []

# run()'s exit status for a run it killed as hung (as timeout(1) says).
HANG_RC = 124


def check(ok, what):
    """Records a failed check and prints it on one line; returns ok."""
    if not ok:
        failures.append(what)
        print("FAIL: " + what)
    return ok


def outcome():
    """Prints how many checks failed (or ok); the exit status: 1 if any."""
    print("%d failures" % len(failures) if failures else "ok")
    return 1 if failures else 0


def kill_session(sid):
    """SIGKILL to every process of session sid, until none is left. mpirun
    puts each rank in a process group of its own, so killing mpirun's group
    would leave the ranks running; they all stay in the session run()
    started."""
    for _ in range(20):
        if not signal_session(sid):
            return
        time.sleep(0.1)


def signal_session(sid):
    """SIGKILL to each process of session sid; returns how many."""
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                # The fields after the parenthesised name: state ppid pgrp
                # session ...
                fields = f.read().rsplit(")", 1)[1].split()
            # A zombie (Z) is dead already: its parent reaps it.
            if int(fields[3]) == sid and fields[0] != "Z":
                os.kill(int(pid), signal.SIGKILL)
                n += 1
        except (OSError, IndexError, ValueError):
            pass  # gone meanwhile
    return n


def run(cmd, env=None, preload=None, timeout=600):
    """Runs cmd; returns (rc, stdout, stderr). env entries and LD_PRELOAD
    are exported to the ranks with -x when cmd is an mpirun. Past `timeout`
    seconds the run is a hang: one failed check says so, every process it
    started is killed, and rc is 124 with what it had printed."""
    # The caller's own DPSHIM_* (DPSHIM_COEFS above all) and LD_PRELOAD
    # would change what is tested: only env and preload reach the ranks.
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("DPSHIM_") and k != "LD_PRELOAD"}
    full_env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1",
                     "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    full_env.update(env or {})
    if preload:
        full_env["LD_PRELOAD"] = preload
    if cmd[0] == "mpirun":
        names = list((env or {}).keys()) + (["LD_PRELOAD"] if preload else [])
        cmd = cmd[:1] + [a for n in names for a in ("-x", n)] + cmd[1:]
    # A session of its own, so that a hang can be killed whole.
    p = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        kill_session(p.pid)
        out, err = p.communicate(timeout=30)
        check(False, "hang: no exit within %d s, killed: %s"
              % (timeout, " ".join(cmd)[-300:]))
        return HANG_RC, out, err


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


def intact(what, *results):
    """Every run gave a result with check_errors 0 (its items re-derived
    cleanly); False when a run gave none."""
    if not all(results):
        return False
    for res in results:
        check(res["check_errors"] == 0, "%s: check_errors %d"
              % (what, res["check_errors"]))
    return True
