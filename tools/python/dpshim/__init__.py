"""dpshim for Python loaders: balance a packed batch across the
data-parallel group, in place and without copies.

    import dpshim
    batch = dpshim.Batch(cu_seqlens, [
        dpshim.Field("input_ids", input_ids),          # token-aligned
        dpshim.Field("labels", labels),                # token-aligned
        dpshim.Field("pixels", pixels, offsets=pix_offsets),
        dpshim.Field("ids", ids, per_sample=True),     # one row a sample
    ], nsamples=n)
    dpshim.balance(batch)          # collective over the DP group
    n = batch.nsamples             # the arrays hold the balanced batch

The field model is <dpshim/batch.h>'s. Arrays are NumPy arrays or CPU
PyTorch tensors, C-contiguous and writable; their first dimension is rows
and their length is the capacity (a rank may receive more than it holds).
cu_seqlens and offsets are int32 with room for capacity_samples + 1
entries. Every DP rank calls balance() once per hand-off.

balance() does nothing (and returns 0) when libdpshim.so is not preloaded
or balancing is off; a batch that cannot be balanced raises dpshim.Error
with the library's code, every rank's batch untouched (the shim prints the
reason on rank 0). A batch this module cannot describe (a GPU tensor, a
wrong dtype) raises TypeError or ValueError here and fails the hand-off on
every rank, so that no rank waits. BalancedLoader (dpshim.loader) wraps a DataLoader of
packed batches.

A trainer needs no code change at all when run by dpshim-run: its start-up
hook (dpshim.autowrap) balances every packed batch a torch DataLoader
yields. exclude(loader) keeps one DataLoader out of it (one that not every
rank iterates). step_end() marks a step's end where the gradient sync is
not an MPI call (PyTorch DDP over Gloo or NCCL).

The hook and BalancedLoader balance ahead (dpshim.ahead): a thread of the
iterator's own fetches the next batch and balances it while the trainer
computes the current one (DPSHIM_AHEAD=K batches, default 1; 0: inline),
and the trainer's next() tells the shim when it takes each
(dpshim_batch_taken()). That thread's hand-offs need DPSHIM_LOADER_THREAD=1
at MPI_Init (the hook sets it); balance() called by the trainer itself
waits for the hand-offs those threads were allowed before it, so every
rank's hand-offs keep one order.
"""
import ctypes

from . import ahead as _ahead
from .loader import BalancedLoader  # noqa: F401 (re-exported)

__all__ = ["Batch", "Field", "Error", "balance", "fail", "available",
           "step_end", "exclude", "BalancedLoader"]

# The library's DPSHIM_E* codes (<dpshim/dpshim.h>).
EINVAL, ENOMEM, ENOCONV, EMPI = -22, -12, -61, -71


class Error(Exception):
    """A batch the shim could not balance: .code is the DPSHIM_E* code."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class _Field(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.c_void_p),
                ("row_bytes", ctypes.c_size_t),
                ("offsets", ctypes.POINTER(ctypes.c_int32)),
                ("capacity_rows", ctypes.c_int64)]


class _Vision(ctypes.Structure):
    _fields_ = [("patches", ctypes.c_int64), ("patches_sq", ctypes.c_int64)]


class _Batch(ctypes.Structure):
    _fields_ = [("nsamples", ctypes.c_int32),
                ("capacity_samples", ctypes.c_int32),
                ("cu_seqlens", ctypes.POINTER(ctypes.c_int32)),
                ("nfields", ctypes.c_int32),
                ("fields", ctypes.POINTER(_Field)),
                ("vision", ctypes.POINTER(_Vision))]


def _library():
    """libdpshim.so's entry points where it is preloaded, else None: the
    process's own symbols, so this is the instance that wraps MPI."""
    process = ctypes.CDLL(None)
    try:
        balance_fn = process.dpshim_balance_batch
        fail_fn = process.dpshim_balance_fail
        strerror = process.dpshim_strerror
    except AttributeError:
        return None
    balance_fn.argtypes = [ctypes.POINTER(_Batch)]
    balance_fn.restype = ctypes.c_int
    fail_fn.argtypes = [ctypes.c_char_p]
    fail_fn.restype = ctypes.c_int
    strerror.argtypes = [ctypes.c_int]
    strerror.restype = ctypes.c_char_p
    return balance_fn, fail_fn, strerror


def _step_end_entry():
    """dpshim_step_end where the preloaded library has it (an older one
    does not), else None."""
    try:
        fn = ctypes.CDLL(None).dpshim_step_end
    except AttributeError:
        return None
    fn.argtypes = []
    fn.restype = ctypes.c_int
    return fn


def _taken_entry():
    """dpshim_batch_taken where the preloaded library has it (balancing
    ahead needs it; an older one does not), else None."""
    try:
        fn = ctypes.CDLL(None).dpshim_batch_taken
    except AttributeError:
        return None
    fn.argtypes = [ctypes.c_double]
    fn.restype = ctypes.c_int
    return fn


_LIB = _library()
_STEP_END = _step_end_entry() if _LIB else None
_TAKEN = _taken_entry() if _LIB else None


def available():
    """Whether libdpshim.so is preloaded into this process."""
    return _LIB is not None


def _buffer(array, what):
    """(address, rows, bytes per row, itemsize, dtype name) of a NumPy
    array or a CPU tensor, zero-copy; TypeError/ValueError naming `what`
    otherwise."""
    if hasattr(array, "data_ptr"):  # torch.Tensor
        if array.device.type != "cpu":
            raise ValueError("%s: a CPU tensor is needed, not %s" % (
                what, array.device))
        if not array.is_contiguous():
            raise ValueError("%s: the tensor is not contiguous" % what)
        if array.dim() < 1:
            raise ValueError("%s: a tensor with a row dimension is needed"
                             % what)
        item = array.element_size()
        rows = array.shape[0]
        per_row = array.numel() // rows if rows else 0
        return array.data_ptr(), rows, per_row * item, item, str(array.dtype)
    if hasattr(array, "__array_interface__"):  # numpy.ndarray
        if not array.flags["C_CONTIGUOUS"]:
            raise ValueError("%s: the array is not C-contiguous" % what)
        if not array.flags["WRITEABLE"]:
            raise ValueError("%s: the array is read-only" % what)
        if array.ndim < 1:
            raise ValueError("%s: an array with a row dimension is needed"
                             % what)
        rows = array.shape[0]
        per_row = array.size // rows if rows else 0
        return (array.ctypes.data, rows, per_row * array.itemsize,
                array.itemsize, str(array.dtype))
    raise TypeError("%s: expected a NumPy array or a CPU torch.Tensor, got %s"
                    % (what, type(array).__name__))


def _int32(array, what, need):
    address, rows, row_bytes, item, dtype = _buffer(array, what)
    if item != 4 or "int32" not in dtype or row_bytes != 4:
        raise TypeError("%s: expected a 1-D int32 array, got %s with %d "
                        "bytes a row" % (what, dtype, row_bytes))
    if rows < need:
        raise ValueError("%s: %d entries, expected at least %d" % (
            what, rows, need))
    return ctypes.cast(address, ctypes.POINTER(ctypes.c_int32)), rows


class Field:
    """One buffer of the batch. offsets: None (token-aligned: the batch's
    cu_seqlens), an int32 array of per-sample row offsets, or per_sample=
    True for one row per sample."""

    def __init__(self, name, data, offsets=None, per_sample=False):
        if offsets is not None and per_sample:
            raise ValueError("%s: offsets and per_sample exclude each other"
                             % name)
        self.name, self.data = name, data
        self.offsets, self.per_sample = offsets, per_sample


class Batch:
    """A packed batch: cu_seqlens (int32, capacity_samples + 1 entries),
    its fields, and how many samples it holds (updated by balance())."""

    def __init__(self, cu_seqlens, fields, nsamples, capacity_samples=None,
                 vision=None):
        self.cu_seqlens, self.fields = cu_seqlens, list(fields)
        self.nsamples = int(nsamples)
        self.capacity_samples = capacity_samples
        self.vision = vision  # int64 array [capacity, 2]: patches, patches^2


def _describe(batch):
    """The C description of `batch`, and what must stay alive with it."""
    cap = batch.capacity_samples
    cu, cu_rows = _int32(batch.cu_seqlens, "cu_seqlens",
                         batch.nsamples + 1)
    if cap is None:
        cap = cu_rows - 1
    if not 0 <= batch.nsamples <= cap <= cu_rows - 1:
        raise ValueError("nsamples %d, capacity_samples %d: expected 0 <= "
                         "nsamples <= capacity_samples < len(cu_seqlens) "
                         "(%d)" % (batch.nsamples, cap, cu_rows))
    keep = [batch]
    fields = (_Field * max(1, len(batch.fields)))()
    for k, f in enumerate(batch.fields):
        address, rows, row_bytes, _, _ = _buffer(f.data, f.name)
        if row_bytes < 1:
            raise ValueError("%s: rows of 0 bytes" % f.name)
        if f.per_sample:
            offsets = None
        elif f.offsets is None:
            offsets = cu
        else:
            offsets, _ = _int32(f.offsets, f.name + " offsets", cap + 1)
        name = f.name.encode()
        keep.append(name)
        fields[k] = _Field(name, address, row_bytes, offsets, rows)
    vision = None
    if batch.vision is not None:
        address, rows, row_bytes, item, dtype = _buffer(batch.vision,
                                                        "vision")
        if "int64" not in dtype or row_bytes != 16 or rows < batch.nsamples:
            raise TypeError("vision: expected an int64 array [samples, 2]")
        vision = ctypes.cast(address, ctypes.POINTER(_Vision))
    c = _Batch(batch.nsamples, cap, cu, len(batch.fields), fields, vision)
    keep.append(fields)
    return c, keep


def balance(batch):
    """Balances `batch` across the DP group, in place (collective: every DP
    rank calls it once per hand-off). Returns 0, also when balancing is off
    or libdpshim.so is not preloaded; raises Error when the batch could not
    be balanced (every rank's batch is then as it was)."""
    if _LIB is None:
        return 0
    try:
        c, keep = _describe(batch)
    except (TypeError, ValueError) as e:
        # This rank still takes part, so that no rank waits for it: the
        # hand-off fails on every rank, this one's reason named.
        _ahead.handing_off()
        _LIB[1](str(e).encode())
        raise
    _ahead.handing_off()
    rc = _LIB[0](ctypes.byref(c))
    del keep
    if rc < 0:
        raise Error(rc, _LIB[2](rc).decode(errors="replace"))
    batch.nsamples = c.nsamples
    return 0


def fail(why):
    """In place of balance() when this rank cannot describe its batch: it
    still takes part, and the hand-off fails on every rank with `why`."""
    if _LIB is None:
        return 0
    _ahead.handing_off()
    rc = _LIB[1](why.encode())
    if rc < 0:
        raise Error(rc, _LIB[2](rc).decode(errors="replace"))
    return 0


def step_end():
    """Marks the end of this rank's training step (after the optimizer's
    step), for a trainer whose gradient sync is not an MPI call: the shim's
    steps then follow the marks instead of DPSHIM_MICRO_BATCHES hand-offs
    (or takes, where batches are balanced ahead: a step holds the batches
    the trainer took in it). Every rank marks each step once, on the thread
    that called MPI_Init; no collective. Returns 0, also doing nothing when
    libdpshim.so is not preloaded (or is too old to know step marks)."""
    if _STEP_END is None:
        return 0
    rc = _STEP_END()
    if rc < 0:
        raise Error(rc, _LIB[2](rc).decode(errors="replace"))
    return 0


def exclude(loader):
    """Keeps `loader` (a torch DataLoader) out of dpshim-run's start-up
    hook: its batches are yielded as they come, with no collective. For a
    loader that not every DP rank iterates in step (an evaluation on rank 0
    alone). Returns `loader`."""
    from . import autowrap
    autowrap.exclude(loader)
    return loader
