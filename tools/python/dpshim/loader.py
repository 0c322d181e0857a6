"""BalancedLoader: balance every packed batch a DataLoader (any iterable of
dicts of CPU tensors or NumPy arrays) yields, changing one line:

    loader = dpshim.BalancedLoader(DataLoader(...),
                                   token_keys=("input_ids", "labels"),
                                   sample_keys=("ids",))

Each batch is a dict holding `cu_key` (int32 [n + 1] token offsets), the
token-aligned arrays (first dimension: tokens) and the per-sample ones
(first dimension: samples); other keys pass through untouched. The batch is
copied into buffers with room to receive (`room` times its tokens and
samples), balanced, and yielded as views of the balanced samples: the same
keys, the same types. Every DP rank must iterate in
step: each batch is a collective hand-off.

Ahead: BalancedLoader(..., ahead=K) balances K batches ahead on a thread
of the iterator's own while the trainer computes (dpshim.ahead); ahead=None,
the default, takes DPSHIM_AHEAD (1 unless set), and 0 balances each batch
inline in next(). The first batch is fetched in next() and handed to the
thread with the loader's iterator; the thread needs
DPSHIM_LOADER_THREAD=1 at MPI_Init, which a BalancedLoader made before
MPI_Init sets (dpshim-run's hook sets it at start-up); without it, or with
a libdpshim.so without dpshim_batch_taken(), every batch stays inline,
said once. An error of a batch's balance ends the iteration there, as
inline; one of the inner loader reaches the trainer at its batch.

dpshim-run's start-up hook (dpshim.autowrap) does the same for every torch
DataLoader without this line. A process that makes a BalancedLoader
balances for itself: the hook then stands aside in that process, so that
no batch is balanced twice.
"""
import copy
import math

ROOM = 2.0  # buffers hold this many times the batch (DPSHIM_MAX_LEN_RATIO
            # is 1.2 by default: a rank never receives more than that)


def nrows(x):
    return x.shape[0]


def is_array(x):
    """A NumPy array or a torch.Tensor with a row dimension."""
    return ((hasattr(x, "data_ptr") or hasattr(x, "__array_interface__"))
            and len(getattr(x, "shape", ())) >= 1)


def _empty_like(x, rows):
    """A zeroed buffer of `rows` rows shaped and typed as x."""
    shape = (rows,) + tuple(x.shape[1:])
    if hasattr(x, "data_ptr"):
        import torch
        return torch.zeros(shape, dtype=x.dtype)
    import numpy
    return numpy.zeros(shape, dtype=x.dtype)


def _room_for(x, rows):
    """x copied into a fresh buffer of `rows` rows (fresh, so that the views
    yielded stay valid while later batches come)."""
    buf = _empty_like(x, rows)
    buf[:nrows(x)] = x
    return buf


def checked_array(batch, key, need, what):
    """batch[key], checked to be an array of at least `need` rows (`what`
    names them); ValueError/TypeError naming the key otherwise."""
    if key not in batch:
        raise ValueError("%s: not in the batch (its keys: %s)" % (
            key, ", ".join(map(str, batch))))
    x = batch[key]
    if not is_array(x):
        raise TypeError("%s: expected a NumPy array or a CPU torch.Tensor "
                        "with a row dimension, got %s" % (
                            key, type(x).__name__))
    device = getattr(x, "device", None)
    if getattr(device, "type", "cpu") != "cpu":
        # Copied to the CPU it would come back on another device.
        raise ValueError("%s: a CPU tensor is needed, not %s" % (key, device))
    if nrows(x) < need:
        raise ValueError("%s: %d rows, fewer than the batch's %d %s" % (
            key, nrows(x), need, what))
    return x


class Packed:
    """A batch dict copied into buffers with room to receive, described as
    a dpshim.Batch (.batch) for balance(); views() gives the balanced dict.
    Building one starts no collective: a batch it cannot take raises here,
    naming the key, before this rank meets the others."""

    def __init__(self, batch, cu_key, token_keys, sample_keys, room=ROOM):
        from . import Batch, Field  # the package's, not a cycle at import
        self.source, self.cu_key = batch, cu_key
        cu = checked_array(batch, cu_key, 1, "offsets")
        n = nrows(cu) - 1
        tokens = int(cu[n])
        token_cap = max(1, math.ceil(tokens * room))
        sample_cap = max(1, math.ceil(n * room))
        self.cu = _room_for(cu, sample_cap + 1)
        self.keys = ([(k, False) for k in token_keys] +
                     [(k, True) for k in sample_keys])
        fields = []
        for key, per_sample in self.keys:
            rows, cap, what = ((n, sample_cap, "samples") if per_sample
                               else (tokens, token_cap, "tokens"))
            x = checked_array(batch, key, rows, what)
            fields.append(Field(str(key), _room_for(x[:rows], cap),
                                per_sample=per_sample))
        self.batch = Batch(self.cu, fields, nsamples=n,
                           capacity_samples=sample_cap)

    def views(self):
        """The batch as it stands now: views of its samples in the buffers,
        the other keys as they came, in a copy of the batch's own type."""
        n = self.batch.nsamples
        tokens = int(self.cu[n])
        out = copy.copy(self.source)
        out[self.cu_key] = self.cu[:n + 1]
        for (key, per_sample), f in zip(self.keys, self.batch.fields):
            out[key] = f.data[:n] if per_sample else f.data[:tokens]
        return out


def balanced(batch, cu_key, token_keys, sample_keys, room=ROOM):
    """`batch` through the shim (collective): a dict of views of the
    balanced samples. A batch this rank cannot take fails the hand-off on
    every rank, with this rank's reason, and raises TypeError/ValueError
    here (dpshim.Error on the other ranks)."""
    from . import balance, fail
    try:
        packed = Packed(batch, cu_key, token_keys, sample_keys, room)
    except Exception as e:
        # This rank still takes part, so that no rank waits for it.
        fail(str(e) if isinstance(e, (TypeError, ValueError))
             else "%s: %s" % (type(e).__name__, e))
        raise
    balance(packed.batch)
    return packed.views()


class BalancedLoader:
    """`loader`'s packed batches, balanced (see the module's docstring).
    ahead: how many batches are balanced ahead on a thread (None: the
    environment's DPSHIM_AHEAD, 1 by default; 0: inline, in next())."""

    def __init__(self, loader, token_keys, sample_keys=(), cu_key="cu_seqlens",
                 room=ROOM, ahead=None):
        from . import ahead as _ahead
        from . import autowrap
        self.ahead = _ahead.checked(ahead)
        autowrap.stand_down()  # this process balances for itself
        self.loader, self.cu_key = loader, cu_key
        self.token_keys, self.sample_keys = tuple(token_keys), tuple(sample_keys)
        self.room = room
        _ahead.prepare(self.ahead)  # made before MPI_Init: ask for a thread

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        if self.ahead == 0:
            return self._inline()
        from . import ahead as _ahead
        return _ahead.Iterator(_ahead.fresh(lambda: iter(self.loader)),
                               self.balance, self.ahead, end_on_error=True)

    def _inline(self):
        for batch in self.loader:
            yield self.balance(batch)

    def balance(self, batch):
        """One batch through the shim: a dict of views of the balanced
        samples."""
        return balanced(batch, self.cu_key, self.token_keys, self.sample_keys,
                        self.room)
