"""Balancing ahead: the next batches are fetched and balanced on a thread
of the iterator's own while the trainer computes the current one, so that
the shim's gather, solve and exchange leave the step's path.

dpshim-run's start-up hook (dpshim.autowrap) and dpshim.BalancedLoader
iterate through Iterator. DPSHIM_AHEAD=K (an integer >= 0, default 1)
batches are balanced ahead of the trainer; 0 balances each batch inline,
in the trainer's next(), as before. A bad value is said once and means 0.

How a wrapped iterator runs:
  - Start. Batches are fetched in the trainer's next() until one would be
    handed off (the hook: a packed one). There, on the trainer's thread,
    the hook starts MPI where the trainer has not (MPI_Init's thread must
    be the trainer's), and it is decided, once for the process, whether
    batches can be balanced ahead: the preloaded libdpshim.so exports
    dpshim_batch_taken(), MPI is initialised, and it was initialised with
    DPSHIM_LOADER_THREAD=1 (the hook sets it at start-up, before the
    trainer can start MPI; a BalancedLoader made before MPI_Init sets it
    too). Where one is missing it is said once and every batch is balanced
    inline. Else a daemon thread takes that batch and the inner iterator:
    it balances them, and only it calls next() on the inner iterator from
    then on (a torch DataLoader iterator, workers or not, allows that). So
    every hand-off of an iterator that goes ahead is the thread's, its
    first included (the trainer waits for that one).
  - Order. The trainer's thread hands out every permission to fetch a
    batch: K when the thread starts, one more at each batch it takes. All
    such permissions in the process form one sequence, executed in turn by
    whichever iterator's thread holds each, and a hand-off on the
    trainer's thread (dpshim.balance() of a batch of its own) first waits
    for those handed out before it. The trainer's calls being the same on
    every rank, so are the hand-offs and their order, whatever the
    threads' timing: two wrapped loaders iterated by turns pair as inline.
    For the same reason whether a batch passes untouched (the hook's
    exclude(), stand_down()) is asked when its permission is handed out,
    not when the thread gets to it. A loader's __iter__ runs once no
    thread fetches, and a thread still on the iterator it returns (a
    DataLoader with persistent workers gives its one iterator again) is
    stopped.
  - The take. The trainer's next() returns the batches in the inner
    iterator's order, each sample once. For each hand-off made on the
    thread (a batch that went through dpshim_balance_batch or
    dpshim_balance_fail) it calls dpshim_batch_taken(waited) on the
    trainer's thread when it takes that batch, with the seconds it waited
    for it (0 when it was ready).
  - Errors. An exception of the inner iterator (StopIteration included)
    reaches the trainer at the batch where it was raised; after
    StopIteration the thread ends and every later next() raises it again.
    BalancedLoader ends after an error of its own balance, as inline.
  - Stop. The thread ends at the inner iterator's end, or when the wrapper
    is dropped (it holds no reference to the wrapper), once the
    permissions handed out are executed: those are the same on every rank,
    so no rank is left in a collective. The hand-offs of batches fetched
    but never taken are told to the shim as taken (waited 0) at the next
    take or at exit, so its count of takes stays in step. At exit (before
    mpi4py finalises MPI) the process waits for every permission handed
    out and joins the threads (at most EXIT_WAIT_S), and rank 0 says how
    many hand-offs went ahead and how long the trainer waited for them.
"""
import atexit
import collections
import os
import re
import threading
import time

ENV = "DPSHIM_AHEAD"
DEFAULT = 1
LOADER_THREAD = "DPSHIM_LOADER_THREAD"
ON = ("1", "true", "yes", "on")
EXIT_WAIT_S = 60.0  # at exit, at most this for the permissions handed out

_cv = threading.Condition()  # guards everything below and the Prefetchers
_issued = 0     # permissions handed out (on the trainer's thread)
_next = 0       # the one whose turn it is
_skipped = set()  # handed out, never to be executed (their iterator ended)
_live = set()     # Prefetchers whose thread runs
_owed = []        # closed Prefetchers whose batches were never taken
_threads = []     # every Prefetcher's thread not yet seen ended
_local = threading.local()  # .worker: a Prefetcher's thread; .handoffs
_stats = {"ahead": 0, "inline": 0, "takes": 0, "waited_s": 0.0,
          "threads": 0}
_depth = None
_decision = None  # True / False once decided for the process
_at_exit_set = False


def _say(line):
    from .autowrap import say
    say(line)


def depth():
    """DPSHIM_AHEAD: how many batches are balanced ahead (default 1; a bad
    value is said once and means 0)."""
    global _depth
    if _depth is None:
        raw = os.environ.get(ENV, "")
        if raw == "":
            _depth = DEFAULT
        elif re.fullmatch(r"[0-9]+", raw):
            _depth = int(raw)
        else:
            _say("%s='%s': expected an integer >= 0 (batches balanced ahead "
                 "of the trainer on a thread; 0: inline): batches are "
                 "balanced inline" % (ENV, raw))
            _depth = 0
    return _depth


def checked(ahead):
    """BalancedLoader's ahead=: None (the environment's DPSHIM_AHEAD) or an
    integer >= 0."""
    if ahead is None:
        return depth()
    if isinstance(ahead, bool) or not isinstance(ahead, int) or ahead < 0:
        raise ValueError("ahead=%r: expected None (%s) or an integer >= 0"
                         % (ahead, ENV))
    return ahead


def _loader_thread_on():
    return os.environ.get(LOADER_THREAD, "").lower() in ON


def prepare(k):
    """Before MPI_Init, where batches are to be balanced ahead (k > 0) by a
    shim that can: DPSHIM_LOADER_THREAD=1 in the environment, which the
    shim reads at MPI_Init. A value already set is left as it is."""
    from . import _LIB, _TAKEN
    from .autowrap import _mpi_initialised
    if (k and _LIB is not None and _TAKEN is not None and
            os.environ.get(LOADER_THREAD, "") == "" and
            not _mpi_initialised()):
        os.environ[LOADER_THREAD] = "1"


def decide(k):
    """On the trainer's thread, after a hand-off made there: whether this
    process balances ahead (decided once, the reason said once where not).
    None while MPI is not initialised."""
    global _decision
    if not k:
        return False
    if _decision is not None:
        return _decision
    from . import _LIB, _TAKEN
    from .autowrap import _mpi_initialised
    if _LIB is None:
        _decision = False
    elif _TAKEN is None:
        _say("%s=%d, but the preloaded libdpshim.so has no "
             "dpshim_batch_taken(): batches are balanced inline" % (ENV, k))
        _decision = False
    elif not _mpi_initialised():
        return None
    elif not _loader_thread_on():
        _say("%s=%d, but MPI was initialised without %s=1 (before dpshim "
             "could set it; the trainer started MPI itself): batches are "
             "balanced inline" % (ENV, k, LOADER_THREAD))
        _decision = False
    else:
        _decision = True
    return _decision


def handoffs():
    """Hand-offs this thread has made (dpshim.balance() and fail())."""
    return getattr(_local, "handoffs", 0)


def handing_off():
    """Called by dpshim.balance() and fail() before the library's call: the
    hand-off is counted, and one on a thread that is no Prefetcher's (the
    trainer's) first waits for every permission handed out before it."""
    _local.handoffs = handoffs() + 1
    worker = getattr(_local, "worker", False)
    with _cv:
        _stats["ahead" if worker else "inline"] += 1
        if not worker:
            while _next < _issued:
                _cv.wait()


def stats():
    """This process's counts: hand-offs made ahead (on a prefetch thread)
    and inline, batches taken from threads, the seconds the trainer waited
    for them, threads started."""
    with _cv:
        return dict(_stats)


# ---- the sequence of permissions --------------------------------------------

def _advance():
    global _next
    while _next in _skipped:
        _skipped.discard(_next)
        _next += 1


def _finish(ticket):
    global _next
    _next = ticket + 1
    _advance()
    _cv.notify_all()


def _settle():
    """On the trainer's thread: the hand-offs of closed Prefetchers'
    batches that were fetched and will never be taken are told as taken
    (waited 0), so that the shim's takes follow its hand-offs."""
    from . import _TAKEN
    told = 0
    with _cv:
        for p in list(_owed):
            while p._items:
                told += p._items.popleft()[2]
            if p._ended:
                _owed.remove(p)
    for _ in range(told if _TAKEN is not None else 0):
        _TAKEN(0.0)


def _at_exit():
    """Before MPI is finalised (mpi4py's own exit function comes after
    Python's): the permissions handed out are executed, every thread told
    to end and joined, and rank 0 says what went ahead."""
    deadline = time.monotonic() + EXIT_WAIT_S
    with _cv:
        for p in list(_live):
            p._closed = True
            if p not in _owed:
                _owed.append(p)
        _cv.notify_all()
        while _next < _issued and time.monotonic() < deadline:
            _cv.wait(deadline - time.monotonic())
        late = _issued - _next
        threads = list(_threads)
    # Ended before the interpreter is torn down, their frames gone too: a
    # daemon thread that frees a tensor during finalisation aborts the
    # process (torch's dealloc lets go of the GIL, and the thread is made
    # to exit there).
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if late:
        _say("%d batch(es) still being balanced ahead at exit after %.0f s"
             % (late, EXIT_WAIT_S))
    try:
        _settle()
    except Exception:
        pass
    s = stats()
    if s["threads"]:
        _say("python: %d hand-offs balanced ahead on a loader thread (%s=%d), "
             "%d inline; the trainer waited %.3f s in all for the %d batches "
             "it took from the thread" % (s["ahead"], ENV, depth(),
                                          s["inline"], s["waited_s"],
                                          s["takes"]))


def fresh(make):
    """make() (a loader's __iter__), on the trainer's thread, once no
    thread is fetching: a DataLoader with persistent workers gives its one
    iterator again, reset, and a thread still on it (a loop left early)
    must neither be in next() then nor fetch from it afterwards."""
    with _cv:
        while _next < _issued:
            _cv.wait()
    it = make()
    with _cv:
        for p in list(_live):
            if p._it is it and not p._closed:
                p._closed = True
                if p not in _owed:
                    _owed.append(p)
                _cv.notify_all()
    return it


class Prefetcher:
    """A daemon thread that fetches `it`'s batches and passes each through
    work(batch), each when the permission handed out for it has its turn;
    first: [a batch fetched already], the first to go through work().
    gate(), where given, is asked on the trainer's thread as each
    permission is handed out: True, and that batch passes as it came (a
    loader excluded, the hook stood down: what decides whether a batch is
    handed off must not depend on the thread's timing)."""

    def __init__(self, it, work, k, end_on_error, gate=None, first=None):
        global _at_exit_set
        self._it, self._work, self._end_on_error = it, work, end_on_error
        self._gate, self._first = gate, first or []  # fetched already
        self._tickets = collections.deque()  # (permission, gated), in order
        self._items = collections.deque()    # (kind, value, hand-offs)
        self._closed = self._ended = False
        with _cv:
            if not _at_exit_set:
                _at_exit_set = True
                atexit.register(_at_exit)
            _stats["threads"] += 1
            _live.add(self)
            for _ in range(k):
                self._permit()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="dpshim-ahead")
        with _cv:
            _threads[:] = [t for t in _threads if t.is_alive()]
            _threads.append(self._thread)
        self._thread.start()

    def _permit(self):
        """Under _cv: one more batch may be fetched."""
        global _issued
        if self._ended or self._closed:
            return
        self._tickets.append((_issued, bool(self._gate and self._gate())))
        _issued += 1
        _cv.notify_all()

    def _one(self, gated):
        """The next batch through work(): (item, whether the thread ends)."""
        try:
            batch = self._first.pop() if self._first else next(self._it)
        except StopIteration:
            return ("stop", None, 0), True
        except BaseException as e:
            return ("raise", e, 0), False
        if gated:
            return ("ok", batch, 0), False
        before = handoffs()
        try:
            value = self._work(batch)
        except BaseException as e:
            return ("raise", e, handoffs() - before), self._end_on_error
        return ("ok", value, handoffs() - before), False

    def _run(self):
        _local.worker = True
        try:
            while True:
                with _cv:
                    while not self._tickets and not self._closed:
                        _cv.wait()
                    if not self._tickets:
                        return
                    ticket, gated = self._tickets[0]
                    while _next != ticket:
                        _cv.wait()
                item, end = self._one(gated)
                with _cv:
                    self._tickets.popleft()
                    self._items.append(item)
                    if end:
                        self._end()
                    _finish(ticket)
                if end:
                    return
        finally:
            with _cv:
                self._end()
                _live.discard(self)
            self._it = self._work = None  # the inner iterator goes now

    def _end(self):
        """Under _cv: no more batches; the permissions left are skipped."""
        if self._ended:
            return
        self._ended = True
        if not self._items or self._items[-1][0] != "stop":
            self._items.append(("stop", None, 0))
        _skipped.update(t for t, _ in self._tickets)
        self._tickets.clear()
        _advance()
        _cv.notify_all()

    def take(self):
        """On the trainer's thread: the next batch, or the exception raised
        where it was; dpshim_batch_taken() for its hand-offs."""
        from . import _TAKEN
        if _owed:
            _settle()
        with _cv:
            waited = 0.0
            if not self._items:
                t0 = time.perf_counter()
                while not self._items:
                    _cv.wait()
                waited = time.perf_counter() - t0
            kind, value, handed = self._items[0]
            if kind != "stop":  # StopIteration stays: raised again
                self._items.popleft()
                self._permit()
            if handed:
                _stats["takes"] += 1
                _stats["waited_s"] += waited
        for k in range(handed if _TAKEN is not None else 0):
            _TAKEN(waited if k == 0 else 0.0)
        if kind == "ok":
            return value
        if kind == "stop":
            raise StopIteration
        raise value

    def close(self):
        """No more permissions: the thread executes those handed out (the
        same on every rank) and ends."""
        with _cv:
            if self._closed:
                return
            self._closed = True
            if self._items or not self._ended:
                _owed.append(self)
            _cv.notify_all()


class Iterator:
    """`it`'s batches through work(batch): inline until a batch that would
    be handed off comes while the process balances ahead, then that batch
    and the next ones on a Prefetcher's thread, `k` ahead. ready(batch), on
    the trainer's thread: whether the batch would be handed off, with MPI
    up (the hook starts it there); None: every batch would. end_on_error:
    an exception of work() ends the iteration (a generator's behaviour,
    BalancedLoader's inline). thread_work: work() as the thread does it,
    where it differs; gate: see Prefetcher."""

    def __init__(self, it, work, k, end_on_error=False, thread_work=None,
                 gate=None, ready=None):
        self._it, self._work, self._k = it, work, k
        self._thread_work = thread_work or work
        self._end_on_error, self._gate = end_on_error, gate
        self._ready = ready
        self._ahead = self._done = None

    def __iter__(self):
        return self

    def __next__(self):
        if self._ahead is not None:
            return self._ahead.take()
        if self._done:
            raise StopIteration
        batch = next(self._it)
        if (self._k and _decision is not False and
                (self._ready is None or self._ready(batch)) and
                decide(self._k)):
            # From this batch on, every hand-off is the thread's: the shim
            # sees none of this iterator's on the trainer's thread.
            self._ahead = Prefetcher(self._it, self._thread_work, self._k,
                                     self._end_on_error, self._gate,
                                     first=[batch])
            return self._ahead.take()
        try:
            return self._work(batch)
        except BaseException:
            if self._end_on_error:
                self._done = True
            raise

    @property
    def ahead(self):
        """Whether the batches now come from a thread."""
        return self._ahead is not None

    def close(self):
        if self._ahead is not None:
            self._ahead.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass  # at interpreter shutdown
