#!/usr/bin/env python3
"""A small PyTorch + mpi4py trainer over packed samples, balanced by
dpshim's Python loader wrapper (the one line marked below).

Every rank reads packs of `--pack` tokens of variable-length samples (a
deterministic, long-tailed stream: step s, rank r always get the same
samples), trains a one-layer causal attention model on them on the CPU
(attention per sample, so a sample costs ~len^2), sums the loss over
tokens, and averages the gradients with mpi4py's Allreduce, which the shim
sees as the step's end. float64 throughout: the loss differs with and
without balancing only by summation order.

    mpirun -np 4 python3 train.py --steps 20 [--ids-out FILE]
    LD_PRELOAD=libdpshim.so (dpshim-run) ... python3 train.py ...

Rank 0 prints one JSON line per step ({"step", "loss", "tokens"}) and one
at the end ({"steps_per_s", "wait_share", "consumed": [n per rank]}).
--ids-out FILE: each rank appends "step rank id id ..." per step.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
from mpi4py import MPI

import dpshim

VOCAB = 256


def sample_lengths(rng, pack, mean_len):
    """Lengths filling `pack` tokens: log-normal, a long tail, clamped."""
    lens, left = [], pack
    while left > 0:
        n = int(min(left, max(8, rng.lognormal(math.log(mean_len), 1.0))))
        lens.append(n)
        left -= n
    return lens


class PackedStream(torch.utils.data.IterableDataset):
    """This rank's packs: step s is drawn from a seed of (seed, s, rank)."""

    def __init__(self, rank, steps, pack, mean_len, seed):
        self.rank, self.steps, self.pack = rank, steps, pack
        self.mean_len, self.seed = mean_len, seed

    def __iter__(self):
        for s in range(1, self.steps + 1):
            rng = np.random.default_rng([self.seed, s, self.rank])
            lens = sample_lengths(rng, self.pack, self.mean_len)
            cu = np.zeros(len(lens) + 1, dtype=np.int32)
            cu[1:] = np.cumsum(lens)
            tokens = rng.integers(0, VOCAB, size=int(cu[-1]) + 1)
            yield {"input_ids": torch.from_numpy(tokens[:-1].copy()),
                   "labels": torch.from_numpy(tokens[1:].copy()),
                   "cu_seqlens": torch.from_numpy(cu),
                   "ids": torch.tensor([s * 10**9 + self.rank * 10**5 + k
                                        for k in range(len(lens))],
                                       dtype=torch.int64)}


class Model(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, VOCAB)
        self.dim = dim

    def forward(self, ids, cu):
        """Summed next-token loss over the batch: attention within each
        sample only (varlen), causal."""
        x = self.embed(ids)
        q, k, v = self.qkv(x).split(self.dim, dim=-1)
        outs = []
        for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
            att = q[a:b] @ k[a:b].T / math.sqrt(self.dim)
            mask = torch.ones(b - a, b - a, dtype=torch.bool).triu(1)
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            outs.append(att @ v[a:b])
        return self.out(x + torch.cat(outs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--pack", type=int, default=2048)
    ap.add_argument("--mean-len", type=float, default=120)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--ids-out")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    torch.manual_seed(args.seed)  # the same initial weights everywhere
    model = Model(args.dim)
    params = list(model.parameters())
    stream = torch.utils.data.DataLoader(
        PackedStream(rank, args.steps, args.pack, args.mean_len, args.seed),
        batch_size=None)
    # The one line dpshim adds: balance each packed batch across the ranks.
    loader = dpshim.BalancedLoader(stream, token_keys=("input_ids", "labels"),
                                   sample_keys=("ids",))
    consumed, wait, start = 0, 0.0, time.perf_counter()
    for step, batch in enumerate(loader, 1):
        cu = batch["cu_seqlens"]
        logits = model(batch["input_ids"], cu)
        loss = torch.nn.functional.cross_entropy(
            logits, batch["labels"], reduction="sum")
        for p in params:
            p.grad = None
        loss.backward()
        grads = np.concatenate([p.grad.numpy().ravel() for p in params] +
                               [np.array([loss.item(), float(cu[-1])])])
        t0 = time.perf_counter()
        comm.Allreduce(MPI.IN_PLACE, grads, op=MPI.SUM)  # the step's end
        wait += time.perf_counter() - t0
        total_loss, total_tokens = grads[-2], grads[-1]
        off = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                g = torch.from_numpy(grads[off:off + n]).view_as(p)
                p -= args.lr * g / total_tokens
                off += n
        consumed += len(batch["ids"])
        if args.ids_out:
            with open(args.ids_out, "a") as f:
                f.write("%d %d %s\n" % (step, rank, " ".join(
                    str(int(i)) for i in batch["ids"])))
        if rank == 0:
            print(json.dumps({"step": step, "loss": total_loss / total_tokens,
                              "tokens": int(total_tokens)}), flush=True)
    elapsed = time.perf_counter() - start
    counts = comm.gather(consumed, root=0)
    waits = comm.gather(wait / elapsed, root=0)
    if rank == 0:
        print(json.dumps({"steps_per_s": args.steps / elapsed,
                          "wait_share": sum(waits) / len(waits),
                          "consumed": counts,
                          "balancing": dpshim.available()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
