#!/usr/bin/env python3
"""dpshim.balance() on hand-made batches (NumPy and torch), under mpirun:
  1. every rank balances a batch of NumPy arrays (a token-aligned field, a
     field with its own offsets, a per-sample field);
  2. rank 1 gives cu_seqlens as int64: TypeError there, dpshim.Error
     (EINVAL) on the others, every batch untouched, no rank left waiting;
  3. the same batch again, as torch tensors: balanced.
Each rank prints one JSON line: its sample ids before and after each call,
and what each call raised; the test compares them across ranks.
"""
import json
import sys

import numpy as np
import torch
from mpi4py import MPI

import dpshim


def make(rank, lib):
    """Rank r holds 2 + 3r samples of 10 * (r + 1) tokens each: unequal
    work, in buffers with room for far more. NumPy arrays, or torch
    tensors over the same memory."""
    n, cap = 2 + 3 * rank, 64
    lens = [10 * (rank + 1)] * n
    cu = np.zeros(cap + 1, dtype=np.int32)
    cu[1:n + 1] = np.cumsum(lens)
    tokens = np.zeros((4096, 2), dtype=np.int64)
    ids = np.zeros(cap, dtype=np.int64)
    pix_off = np.zeros(cap + 1, dtype=np.int32)
    pixels = np.zeros((4 * cap, 3), dtype=np.float32)
    for i in range(n):
        ids[i] = 1000 * rank + i
        tokens[cu[i]:cu[i + 1], 0] = ids[i]
        tokens[cu[i]:cu[i + 1], 1] = np.arange(lens[i])
        pix_off[i + 1] = pix_off[i] + 1 + i % 2
        pixels[pix_off[i]:pix_off[i + 1]] = ids[i]
    arrays = (cu, tokens, ids, pix_off, pixels)
    if lib is torch:
        arrays = tuple(torch.from_numpy(a) for a in arrays)
    cu, tokens, ids, pix_off, pixels = arrays
    fields = [dpshim.Field("tokens", tokens),
              dpshim.Field("pixels", pixels, offsets=pix_off),
              dpshim.Field("ids", ids, per_sample=True)]
    return dpshim.Batch(cu, fields, nsamples=n), arrays


def intact(batch, arrays):
    """Every sample's rows still carry its id."""
    cu, tokens, ids, pix_off, pixels = arrays
    for i in range(batch.nsamples):
        a, b = int(cu[i]), int(cu[i + 1])
        if not bool((tokens[a:b, 0] == ids[i]).all()):
            return False
        if not bool((pixels[int(pix_off[i]):int(pix_off[i + 1])] ==
                     float(ids[i])).all()):
            return False
    return True


def call(batch):
    try:
        dpshim.balance(batch)
        return "ok"
    except dpshim.Error as e:
        return "Error %d" % e.code
    except TypeError:
        return "TypeError"


def main():
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    out = {"rank": rank, "available": dpshim.available(), "calls": []}
    for k, lib in enumerate((np, np, torch)):
        batch, arrays = make(rank, lib)
        before = [int(i) for i in arrays[2][:batch.nsamples]]
        if k == 1 and rank == 1:
            batch.cu_seqlens = np.asarray(arrays[0], dtype=np.int64)
        outcome = call(batch)
        after = [int(i) for i in arrays[2][:batch.nsamples]]
        out["calls"].append({"outcome": outcome, "before": before,
                             "after": after, "intact": intact(batch, arrays)})
        comm.Allreduce(MPI.IN_PLACE, np.zeros(1), op=MPI.SUM)  # step end
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
