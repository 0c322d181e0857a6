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
"""
import math

ROOM = 2.0  # buffers hold this many times the batch (DPSHIM_MAX_LEN_RATIO
            # is 1.2 by default: a rank never receives more than that)


def _rows(x):
    return x.shape[0]


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
    buf[:_rows(x)] = x
    return buf


class BalancedLoader:
    def __init__(self, loader, token_keys, sample_keys=(), cu_key="cu_seqlens",
                 room=ROOM):
        from . import Batch, Field  # the package's, not a cycle at import
        self._Batch, self._Field = Batch, Field
        self.loader, self.cu_key = loader, cu_key
        self.token_keys, self.sample_keys = tuple(token_keys), tuple(sample_keys)
        self.room = room

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            yield self.balance(batch)

    def balance(self, batch):
        """One batch through the shim: a dict of views of the balanced
        samples."""
        from . import balance
        cu = batch[self.cu_key]
        n = _rows(cu) - 1
        tokens = int(cu[n])
        token_cap = max(1, math.ceil(tokens * self.room))
        sample_cap = max(1, math.ceil(n * self.room))
        cu_buf = _room_for(cu, sample_cap + 1)
        fields = [self._Field(k, _room_for(batch[k][:tokens], token_cap))
                  for k in self.token_keys]
        fields += [self._Field(k, _room_for(batch[k][:n], sample_cap),
                               per_sample=True) for k in self.sample_keys]
        b = self._Batch(cu_buf, fields, nsamples=n,
                        capacity_samples=sample_cap)
        balance(b)
        n = b.nsamples
        tokens = int(cu_buf[n])
        out = dict(batch)
        out[self.cu_key] = cu_buf[:n + 1]
        for f in fields:
            out[f.name] = f.data[:n] if f.per_sample else f.data[:tokens]
        return out
