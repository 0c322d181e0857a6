#!/usr/bin/env python3
"""dpshim.ahead's thread on its own, one process, no MPI and no preload:
the library's calls are stood in for (a hand-off is dpshim.ahead's
handing_off(), as dpshim.balance() makes it; dpshim_batch_taken() a
recorder) and the process is told it balances ahead.

  order     batches in the inner iterator's order, each once; every one
            balanced on a thread other than the main one, the first
            included; one take a hand-off, in order, none for a batch that
            made none; a take that waited says so, one that did not says 0;
  errors    the inner iterator's exception reaches the trainer at the batch
            where it was raised, and iteration goes on after it; the end
            (StopIteration) again at every later next(); the thread ends;
  loader    BalancedLoader(ahead=...): an error of its balance ends the
            iteration, as inline; ahead=0 is its generator, no thread;
            ahead=-1 and ahead=True are refused;
  dropped   an iterator dropped half-way: its thread ends, the hand-offs it
            made ahead are told as taken (waited 0) at the next take, and
            a second iterator's hand-offs wait for the first's permissions;
  pair      two iterators taken by turns: their hand-offs in the order of
            the permissions the trainer handed out, whatever the timing;
  gate      whether a batch passes untouched is asked when its permission
            is handed out, on the trainer's thread;
  env       DPSHIM_AHEAD: unset 1, 3 is 3, 'x' and '-1' said once and 0.

Prints one JSON line {"name": [failures...]}; check_python.py judges it.
"""
import gc
import json
import os
import subprocess
import sys
import threading
import time

import dpshim
from dpshim import ahead

MAIN = threading.main_thread()
takes = []
dpshim._TAKEN = lambda waited: takes.append(waited) or 0
ahead._decision = True  # as if MPI were up with DPSHIM_LOADER_THREAD=1
handed = []  # (what, on the main thread), in the order of the hand-offs


def handoff(what, delay=0.0):
    ahead.handing_off()
    handed.append((what, threading.current_thread() is MAIN))
    time.sleep(delay)


def threads():
    return sum(t.name == "dpshim-ahead" for t in threading.enumerate())


def settle_threads(want=0, wait_s=5.0):
    end = time.monotonic() + wait_s
    while threads() != want and time.monotonic() < end:
        time.sleep(0.01)
    return threads()


def order(fail):
    del handed[:], takes[:]

    def work(b):
        if b % 3 != 2:  # every third batch is no packed one: no hand-off
            handoff(b, 0.02 if b == 4 else 0.0)
        return ("out", b)

    it = ahead.Iterator(iter(range(8)), work, 1)
    got = []
    for k in range(8):
        got.append(next(it))
        time.sleep(0.05 if k < 3 else 0.0)  # the trainer computes
    try:
        next(it)
        fail("no StopIteration at the end")
    except StopIteration:
        pass
    if got != [("out", b) for b in range(8)]:
        fail("batches %s" % got)
    made = [b for b in range(8) if b % 3 != 2]
    if [w for w, _ in handed] != made:
        fail("hand-offs %s, expected %s" % (handed, made))
    if any(m for _, m in handed):
        fail("hand-offs on the main thread: %s" % handed)
    if len(takes) != len(made):
        fail("%d takes for %d hand-offs ahead" % (len(takes), len(made)))
    elif takes[1:3] != [0.0, 0.0] or not takes[3] > 0:
        fail("the waits: %s (1 and 3 ready: 0; 4 waited)" % takes)
    if settle_threads() != 0:
        fail("the thread outlived the iterator's end")


def errors(fail):
    del handed[:], takes[:]

    def source():
        yield 0
        yield 1
        raise KeyError("at 2")

    class Flaky:
        """An iterator that raises at 2 and goes on after it."""
        def __init__(self):
            self.k = 0

        def __iter__(self):
            return self

        def __next__(self):
            self.k += 1
            if self.k == 3:
                raise KeyError("at 2")
            if self.k > 5:
                raise StopIteration
            return self.k - 1

    for name, inner, want in (
            ("generator", source(), [0, 1, "KeyError", "stop", "stop"]),
            ("flaky", Flaky(), [0, 1, "KeyError", 3, 4, "stop", "stop"])):
        it = ahead.Iterator(inner, lambda b: handoff(b) or b, 1)
        got = []
        for _ in range(len(want)):
            try:
                got.append(next(it))
            except StopIteration:
                got.append("stop")
            except KeyError:
                got.append("KeyError")
        if got != want:
            fail("%s: %s, expected %s" % (name, got, want))
    if settle_threads() != 0:
        fail("a thread outlived its iterator's end")


def loader(fail):
    del handed[:], takes[:]

    class Balanced(dpshim.BalancedLoader):
        def balance(self, batch):
            handoff(batch)
            if batch == 2:
                raise ValueError("cannot balance 2")
            return batch

    for k in (1, 0):
        got = []
        it = iter(Balanced(range(5), ("x",), ahead=k))
        if (k == 0) != (type(it).__name__ == "generator"):
            fail("ahead=%d: %s" % (k, type(it).__name__))
        while True:
            try:
                got.append(next(it))
            except StopIteration:
                got.append("stop")
                break
            except ValueError:
                got.append("ValueError")
        if got != [0, 1, "ValueError", "stop"]:
            fail("ahead=%d: %s" % (k, got))
    for bad in (-1, True, 1.5, "1"):
        try:
            dpshim.BalancedLoader(range(3), ("x",), ahead=bad)
            fail("ahead=%r accepted" % (bad,))
        except ValueError as e:
            if "DPSHIM_AHEAD" not in str(e):
                fail("ahead=%r: %s" % (bad, e))
    dpshim.autowrap._stood_down = False
    if settle_threads() != 0:
        fail("a thread outlived its iterator")


def dropped(fail):
    del handed[:], takes[:]
    it = ahead.Iterator(iter(range(100)), lambda b: handoff(("a", b)) or b, 3)
    got = [next(it) for _ in range(4)]
    time.sleep(0.2)  # the thread balances 4-6, three ahead
    del it
    gc.collect()
    if settle_threads() != 0:
        fail("the thread outlived its dropped iterator")
    if got != [0, 1, 2, 3] or [w for w, _ in handed] != [
            ("a", b) for b in range(7)]:
        fail("before the drop: %s, %s" % (got, handed))
    it = ahead.Iterator(iter(range(3)), lambda b: handoff(("b", b)) or b, 1)
    got = list(it)
    # 4 taken from the first thread, its 3 not taken told as taken (0) at
    # the second's first take, then the second's 3.
    if got != [0, 1, 2] or len(takes) != 4 + 3 + 3 or takes[4:7] != [0.0] * 3:
        fail("after the drop: %s, takes %s" % (got, takes))
    if [w for w, _ in handed][7:] != [("b", 0), ("b", 1), ("b", 2)]:
        fail("the second iterator's hand-offs: %s" % handed)


def pair(fail):
    del handed[:], takes[:]
    # Each thread 2 ahead; A's are slow, B's quick: by timing B would
    # overtake A.
    a = ahead.Iterator(iter(range(6)), lambda b: handoff(("a", b), 0.03), 2)
    b = ahead.Iterator(iter(range(6)), lambda x: handoff(("b", x)), 2)
    for _ in range(6):
        next(a)
        next(b)
    # a's two permissions at its start, one more at its first take; b's
    # two and one; then one at each take, by turns.
    want = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)]
    for k in range(3, 6):
        want += [("a", k), ("b", k)]
    if [w for w, _ in handed] != want:
        fail("hand-offs %s, expected %s" % ([w for w, _ in handed], want))
    del a, b
    gc.collect()
    if settle_threads() != 0:
        fail("threads outlived their iterators")


def gate(fail):
    """What passes untouched (the hook's exclude(), stand_down()) is asked
    as each permission is handed out, not when the thread gets to it."""
    del handed[:], takes[:]
    flag = []
    it = ahead.Iterator(iter(range(6)), lambda b: handoff(b) or b, 2,
                        gate=lambda: bool(flag))
    got = [next(it), next(it)]  # permissions for 0, 1; then 2 and 3
    flag.append(1)
    time.sleep(0.1)
    got += list(it)  # the take of 2 hands out 4's: gated from then on
    if got != list(range(6)) or [w for w, _ in handed] != [0, 1, 2, 3]:
        fail("batches %s, hand-offs %s: expected 0-5, 0-3" % (got, handed))


def env(fail):
    code = ("import dpshim.ahead as a, json; print(json.dumps(a.depth()))")
    for value, want, said in ((None, 1, False), ("3", 3, False),
                              ("0", 0, False), ("x", 0, True),
                              ("-1", 0, True), (" 1", 0, True)):
        e = dict(os.environ)
        e.pop("DPSHIM_AHEAD", None)
        if value is not None:
            e["DPSHIM_AHEAD"] = value
        p = subprocess.run([sys.executable, "-c", code], env=e,
                           capture_output=True, text=True)
        lines = [l for l in p.stderr.splitlines() if l.startswith("dpshim:")]
        ok = (p.returncode == 0 and p.stdout.strip() == str(want) and
              len(lines) == (1 if said else 0) and
              (not said or "DPSHIM_AHEAD" in lines[0] and
               "integer >= 0" in lines[0]))
        if not ok:
            fail("DPSHIM_AHEAD=%r: %r %r" % (value, p.stdout, p.stderr))


def main():
    out = {}
    for case in (order, errors, loader, dropped, pair, gate, env):
        failures = out.setdefault(case.__name__, [])
        try:
            case(failures.append)
        except Exception as e:
            failures.append("%s: %s" % (type(e).__name__, e))
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
