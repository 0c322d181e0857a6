"""dpshim-run's start-up hook, the package's half: every packed batch a
torch DataLoader yields is balanced across the DP ranks, with no change to
the trainer.

dpshim-run puts tools/python/boot (only a sitecustomize.py) and this package on
PYTHONPATH. That sitecustomize calls install() when libdpshim.so is in
LD_PRELOAD, DPSHIM_VLM_BALANCE is on and DPSHIM_PY_WRAP is not off; else it
does nothing at all. install() imports nothing: a finder on sys.meta_path
waits for torch.utils.data to be imported (by the trainer's `import torch`)
and then wraps DataLoader.__iter__. From then on each batch any DataLoader
yields that is a dict holding DPSHIM_PY_CU_KEY (default cu_seqlens; int32
[n + 1] token offsets) goes through dpshim's balance as BalancedLoader's
batches do, and comes back as a copy of the dict with views of the
balanced samples. Other batches pass as they come, with no collective.

What the trainer must keep to:
  - Every DP rank iterates each wrapped DataLoader in step: each packed
    batch is a collective hand-off. A loader that only some ranks iterate
    (an evaluation on rank 0) must be kept out, with dpshim.exclude(loader)
    or DPSHIM_PY_WRAP=0 for the whole process, or the ranks hang.
  - The shim balances over MPI: a trainer that never starts it (DDP over
    NCCL or Gloo) has it started by mpi4py, through the shim, at its first
    packed batch, on the trainer's thread; without mpi4py its batches pass
    unbalanced, said once.
  - Batches are balanced ahead, on a thread of each iterator's own
    (dpshim.ahead): DPSHIM_AHEAD=K batches (default 1) while the trainer
    computes the current one; DPSHIM_AHEAD=0 balances each in the
    trainer's next(). An iterator's first packed batch is fetched by the
    trainer's next(), which starts MPI there if need be (so the trainer's
    thread is MPI_Init's) and decides, then starts the thread with it; from
    then on only the thread calls next() on the DataLoader's own iterator,
    and a loader whose batches are never packed gets no thread. The thread
    needs DPSHIM_LOADER_THREAD=1 at MPI_Init, which install() sets at
    start-up when it is unset (so MPI is asked for MPI_THREAD_MULTIPLE); a
    trainer that started MPI without it, a DPSHIM_LOADER_THREAD=0, or a
    libdpshim.so without dpshim_batch_taken() keep every batch inline,
    said once. The trainer iterates on the thread that started MPI, and
    keeps each batch as long as it likes (every one is a fresh copy).
    Whether a batch passes untouched (exclude(), a BalancedLoader made) is
    settled when the trainer lets it be fetched: from K batches on.
    Batches fetched ahead and never taken (a loop left early) are balanced
    all the same, on every rank alike.
  - A process that makes a dpshim.BalancedLoader balances for itself: the
    hook stands aside in it from then on, so no batch is balanced twice. A
    trainer that calls dpshim.balance() on a DataLoader's batches itself
    excludes that loader.
  - What is wrapped is DataLoader.__iter__: a subclass whose own __iter__
    does not go through DataLoader's is not balanced.

Which keys move. DPSHIM_PY_TOKEN_KEYS, DPSHIM_PY_SAMPLE_KEYS (comma lists):
when either is set, exactly those keys move (token-aligned, per-sample) and
every other key passes untouched. When neither is set, each batch is read
by its arrays' shapes against its tokens T = cu[n] and its samples n:
  - an array with T among its later dimensions ([1, T], a [T, T] mask): its
    tokens are not just its rows, which is all dpshim moves: the hand-off
    fails (a coincidence, such as a hidden size equal to T, is settled by
    naming the keys);
  - first dimension T (and T != n): token-aligned;
  - first dimension n (and n != T): one row per sample;
  - first dimension T == n (samples of one token each, an empty batch):
    ambiguous, the hand-off fails;
  - anything else passes untouched: numbers, lists, strings, 0-d tensors,
    arrays of other lengths. Arrays that do follow the samples in a way
    shapes cannot tell are among them and would come out wrong: a token
    array padded past cu[n] (name it in DPSHIM_PY_TOKEN_KEYS: its padding is
    dropped), image patches with offsets of their own (exclude the loader
    and balance with dpshim.Batch and Field(offsets=...)).
Keys are taken in sorted order, so every rank describes the same fields.

A batch this rank cannot describe (a GPU tensor, an int64 cu_seqlens, a
failed rule above) fails the hand-off on every rank through dpshim.fail()
(the shim names this rank's reason on rank 0) and is yielded as it came;
so is, on every rank, a batch the shim could not balance.
"""
import functools
import importlib.util
import os
import sys
import weakref

from . import ahead

TARGET = "torch.utils.data"

_excluded = weakref.WeakSet()
_stood_down = False
_settings = None  # _Settings once install() has run


def exclude(loader):
    """Keeps `loader` out of the hook: its batches pass as they come."""
    try:
        _excluded.add(loader)
    except TypeError:
        pass  # no weak reference: not a DataLoader, never wrapped


def stand_down():
    """The process balances for itself (a BalancedLoader): the hook passes
    every batch from now on."""
    global _stood_down
    _stood_down = True


def _rank():
    """This process's rank as the launcher says, for saying things once."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def say(line):
    """One line on stderr, on rank 0 only: every rank decides alike."""
    if _rank() == 0:
        sys.stderr.write("dpshim: %s\n" % line)
        sys.stderr.flush()


def _keys(value):
    return tuple(k.strip() for k in value.split(",") if k.strip())


class _Settings:
    def __init__(self, environ):
        self.cu_key = environ.get("DPSHIM_PY_CU_KEY") or "cu_seqlens"
        tokens = _keys(environ.get("DPSHIM_PY_TOKEN_KEYS", ""))
        samples = _keys(environ.get("DPSHIM_PY_SAMPLE_KEYS", ""))
        self.named = (tokens, samples) if tokens or samples else None
        self.mpi_up = self.said_mpi = False


# ---- which keys move --------------------------------------------------------

def detect(batch, cu_key):
    """(token-aligned keys, per-sample keys) of a packed batch, read from its
    arrays' shapes (the rules in this module's docstring); ValueError or
    TypeError, naming the key, where they cannot tell."""
    from .loader import checked_array, is_array, nrows
    cu = checked_array(batch, cu_key, 1, "offsets")
    n = nrows(cu) - 1
    tokens = int(cu[n])
    token_keys, sample_keys = [], []
    for key in sorted(batch, key=str):
        x = batch[key]
        if key == cu_key or not is_array(x):
            continue
        shape = tuple(x.shape)
        if tokens in shape[1:]:
            raise ValueError(
                "%s: shape %s holds the batch's %d tokens in a later "
                "dimension, and dpshim moves rows only: give it as [tokens, "
                "...], or name the keys in DPSHIM_PY_TOKEN_KEYS and "
                "DPSHIM_PY_SAMPLE_KEYS" % (key, list(shape), tokens))
        if shape[0] == tokens == n:
            raise ValueError(
                "%s: %d rows, both the batch's tokens and its samples: name "
                "the keys in DPSHIM_PY_TOKEN_KEYS and DPSHIM_PY_SAMPLE_KEYS"
                % (key, shape[0]))
        if shape[0] == tokens:
            token_keys.append(key)
        elif shape[0] == n:
            sample_keys.append(key)
    return token_keys, sample_keys


# ---- one batch --------------------------------------------------------------

def _mpi_initialised():
    """Whether MPI_Init has run (the shim balances nothing before; after
    MPI_Finalize it returns at once, on every rank alike)."""
    import ctypes
    flag = ctypes.c_int(0)
    try:
        initialized = ctypes.CDLL(None).MPI_Initialized
    except AttributeError:
        return False  # no MPI in this process
    return initialized(ctypes.byref(flag)) == 0 and flag.value != 0


def _start_mpi():
    """Starts MPI (through the preloaded shim's MPI_Init wrapper) for a
    trainer that has none of its own, e.g. DDP over NCCL or Gloo launched
    by mpirun: every rank reaches its first packed batch, so every rank
    starts it there. mpi4py finalises it at exit, where the shim prints
    its summary. False when mpi4py is missing."""
    try:
        from mpi4py import MPI  # noqa: F401 (importing initialises MPI)
    except ImportError:
        return False
    return _mpi_initialised()


def balance_batch(batch, ahead_thread=False):
    """`batch` balanced when it is a packed one (a dict holding the cu
    key), else as it came. Every rank calls it for every batch alike.
    ahead_thread: on a prefetch thread, which never starts MPI (it is up
    before one starts) and whose permission said already whether the hook
    stands down (dpshim.ahead's gate)."""
    from . import fail
    from .loader import balanced
    s = _settings
    if (s is None or (_stood_down and not ahead_thread) or
            not isinstance(batch, dict) or s.cu_key not in batch):
        return batch
    if not s.mpi_up and not _mpi_initialised() and (ahead_thread or
                                                    not _start_mpi()):
        if not s.said_mpi:
            s.said_mpi = True
            say("a packed batch came while MPI is not initialised, and "
                "mpi4py cannot start it, so nothing is balanced: install "
                "python3-mpi4py or initialise MPI before the first batch")
        return batch
    s.mpi_up = True
    try:
        token_keys, sample_keys = s.named or detect(batch, s.cu_key)
    except (TypeError, ValueError) as e:
        return _failed(fail, str(e), batch)
    try:
        return balanced(batch, s.cu_key, token_keys, sample_keys)
    except Exception:
        # The hand-off failed on every rank (dpshim.Error) or this rank
        # could not describe the batch (TypeError, ...; the others were
        # told): the shim said why on rank 0. The batch goes on as it came.
        return batch


def _failed(fail, why, batch):
    """This rank's batch cannot be described: every rank's hand-off fails,
    and the batch goes on unbalanced."""
    try:
        fail(why)
    except Exception:
        pass  # the shim's own error: said on rank 0
    return batch


# ---- the DataLoader ---------------------------------------------------------

def _passes(loader_ref):
    """Whether the loader's batches pass as they come (excluded, or the
    hook stood down): asked on the trainer's thread, for a batch to be
    fetched ahead, so that every rank's thread hands off the same
    batches."""
    loader = loader_ref()
    return _stood_down or (loader is not None and loader in _excluded)


def _ready(loader_ref, batch):
    """On the trainer's thread: whether `batch` would be handed off (a
    packed one, the loader not passing), with MPI up: started here where
    the trainer has not, so that MPI_Init's thread is the trainer's."""
    s = _settings
    if (s is None or _passes(loader_ref) or not isinstance(batch, dict) or
            s.cu_key not in batch):
        return False
    if not s.mpi_up and not _mpi_initialised() and not _start_mpi():
        return False  # balance_batch() says so
    s.mpi_up = True
    return True


def _balance_one(loader_ref, batch):
    """One batch of the loader `loader_ref` refers to, on the trainer's
    thread: as it came where the loader is excluded, else through
    balance_batch()."""
    loader = loader_ref()
    if loader is not None and loader in _excluded:
        return batch
    return balance_batch(batch)


class _Balancing(ahead.Iterator):
    """The iterator a wrapped DataLoader gives: its own, each batch through
    balance_batch(), inline or ahead on a thread (dpshim.ahead);
    everything else is the wrapped iterator's."""

    def __init__(self, it, loader):
        # A weak reference: a prefetch thread must not keep the loader,
        # nor this iterator, alive.
        ref = weakref.ref(loader)
        super().__init__(it, functools.partial(_balance_one, ref),
                         ahead.depth(), thread_work=functools.partial(
                             balance_batch, ahead_thread=True),
                         gate=functools.partial(_passes, ref),
                         ready=functools.partial(_ready, ref))

    def __len__(self):
        return len(self._it)

    def __getattr__(self, name):
        it = self.__dict__.get("_it")
        if it is None:
            raise AttributeError(name)
        return getattr(it, name)


def _patch(data):
    """Wraps DataLoader.__iter__ of the module torch.utils.data."""
    cls = data.DataLoader
    original = cls.__iter__
    if getattr(original, "_dpshim", False):
        return

    @functools.wraps(original)
    def __iter__(self):
        it = ahead.fresh(lambda: original(self))
        if _stood_down or self in _excluded:
            return it
        return _Balancing(it, self)

    __iter__._dpshim = True
    cls.__iter__ = __iter__


def _patch_or_say(data):
    try:
        _patch(data)
    except Exception as e:  # a torch this does not know: say it, go on
        say("the DataLoader hook could not be installed (%s: %s): nothing "
            "is balanced by it" % (type(e).__name__, e))


class _Loader:
    """Loads torch.utils.data with the loader found for it, then patches
    it."""

    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        # As if found without this hook: the module's own code sees its
        # real loader.
        module.__spec__.loader = module.__loader__ = self.inner
        self.inner.exec_module(module)
        _patch_or_say(module)


class _Finder:
    """On sys.meta_path, first: finds nothing itself. When torch.utils.data
    is imported it lets the other finders find it and has it patched once
    it has run; then it leaves sys.meta_path."""

    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)  # once, and the lookup below skips it
        spec = importlib.util.find_spec(name)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            say("%s could not be hooked: nothing is balanced by "
                "dpshim's DataLoader hook" % name)
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


def install():
    """Balances every DataLoader's packed batches from now on (the first
    import of torch.utils.data, or now when it is imported already)."""
    global _settings
    if _settings is not None:
        return
    _settings = _Settings(os.environ)
    # Before the trainer can start MPI: a loader thread's hand-offs need
    # DPSHIM_LOADER_THREAD=1 at MPI_Init.
    ahead.prepare(ahead.depth())
    data = sys.modules.get(TARGET)
    if data is not None:
        _patch_or_say(data)
    else:
        sys.meta_path.insert(0, _Finder())
