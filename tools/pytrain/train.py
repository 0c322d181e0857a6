#!/usr/bin/env python3
"""A small PyTorch trainer over packed samples, data-parallel through
mpi4py or through PyTorch DDP over Gloo. It knows nothing of dpshim:
dpshim-run balances its DataLoader through its start-up hook.

Every rank reads packs of `--pack` tokens of variable-length samples (a
deterministic, long-tailed stream: pack j of rank r always holds the same
samples), trains a one-layer causal attention model on them on the CPU
(attention per sample, so a sample costs ~len^2), sums the loss over
tokens, and sums the gradients over the ranks:
  --sync mpi   one mpi4py Allreduce of the gradients, the loss and the
               tokens a step (the shim sees it as the step's end);
  --sync gloo  torch.distributed over Gloo: the model wrapped in
               DistributedDataParallel, its gradients summed by DDP, the
               loss and tokens by an all_reduce; the shim sees no
               gradient sync (MPI is still initialised, for the shim and
               to agree on the rendezvous port).
--micro-batches M: M packs a step, the gradients accumulated (DDP's
no_sync() on all but the last). Both modes apply the same update, so the
loss of every step agrees between them, and with and without balancing,
up to summation order: float64 throughout.

    mpirun -np 4 python3 train.py --steps 20 [--sync gloo] [--ids-out FILE]
    dpshim-run --use-vlm-dp-balance -- mpirun ... python3 train.py ...

Rank 0 prints one JSON line per step ({"step", "loss", "tokens"}) and one
at the end ({"steps_per_s", "wait_share": the share of time in the
gradient sync, "consumed": [samples per rank], "balancing": whether
libdpshim.so is in the process, "sync", "micro_batches"}).
--ids-out FILE: each rank appends "step rank id id ..." per step.
"""
import argparse
import contextlib
import ctypes
import gc
import json
import math
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI

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
    """This rank's packs: pack j is drawn from a seed of (seed, j, rank)."""

    def __init__(self, rank, packs, pack, mean_len, seed):
        self.rank, self.packs, self.pack = rank, packs, pack
        self.mean_len, self.seed = mean_len, seed

    def __iter__(self):
        for j in range(1, self.packs + 1):
            rng = np.random.default_rng([self.seed, j, self.rank])
            lens = sample_lengths(rng, self.pack, self.mean_len)
            cu = np.zeros(len(lens) + 1, dtype=np.int32)
            cu[1:] = np.cumsum(lens)
            tokens = rng.integers(0, VOCAB, size=int(cu[-1]) + 1)
            yield {"input_ids": torch.from_numpy(tokens[:-1].copy()),
                   "labels": torch.from_numpy(tokens[1:].copy()),
                   "cu_seqlens": torch.from_numpy(cu),
                   "ids": torch.tensor([j * 10**9 + self.rank * 10**5 + k
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
        """Logits of the next token: attention within each sample only
        (varlen), causal."""
        x = self.embed(ids)
        q, k, v = self.qkv(x).split(self.dim, dim=-1)
        outs = []
        for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
            att = q[a:b] @ k[a:b].T / math.sqrt(self.dim)
            mask = torch.ones(b - a, b - a, dtype=torch.bool).triu(1)
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            outs.append(att @ v[a:b])
        return self.out(x + torch.cat(outs))


class MpiSync:
    """Gradients, loss and tokens summed by one mpi4py Allreduce a step."""

    def __init__(self, comm):
        self.comm, self.wait = comm, 0.0
        self.rank, self.size = comm.Get_rank(), comm.Get_size()

    def wrap(self, model):
        return model

    def accumulating(self, model, last):
        return contextlib.nullcontext()

    def after_backward(self):
        pass

    def reduce(self, params, loss, tokens):
        """Sums every rank's gradients into p.grad; returns the summed
        loss and tokens."""
        buf = np.concatenate([p.grad.numpy().ravel() for p in params] +
                             [np.array([loss, tokens])])
        t0 = time.perf_counter()
        self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)  # the step's end
        self.wait += time.perf_counter() - t0
        off = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(torch.from_numpy(buf[off:off + n]).view_as(p))
            off += n
        return buf[-2], buf[-1]

    def gather(self, value):
        return self.comm.gather(value, root=0)

    def close(self):
        pass


class GlooSync:
    """PyTorch DDP over Gloo: DDP sums the gradients (a comm hook in place
    of its default average, so the update is MpiSync's), an all_reduce the
    loss and tokens."""

    def __init__(self, comm):
        self.wait, self.launched = 0.0, None
        self.rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        self.size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(rendezvous_port(comm))
        if os.environ["MASTER_ADDR"] == "127.0.0.1":
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", rank=self.rank, world_size=self.size)

    def wrap(self, model):
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        ddp.register_comm_hook(None, self._sum_hook)
        return ddp

    def _sum_hook(self, state, bucket):
        """DDP's all-reduce of one bucket, summed rather than averaged. The
        first launch of a step is noted: DDP launches a bucket as soon as
        its gradients are ready, and backward() returns only when every
        bucket's all-reduce is done, so the time from the first launch to
        backward's end is what the gradient sync kept this rank (the wait
        for the slowest rank and the transfer), less any backward work
        still running beside it (none here: the model is one bucket)."""
        if self.launched is None:
            self.launched = time.perf_counter()
        fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])

    def accumulating(self, model, last):
        return contextlib.nullcontext() if last else model.no_sync()

    def after_backward(self):
        if self.launched is not None:
            self.wait += time.perf_counter() - self.launched
            self.launched = None

    def reduce(self, params, loss, tokens):
        """The gradients are summed already (DDP); returns the summed loss
        and tokens."""
        sums = torch.tensor([loss, tokens], dtype=torch.float64)
        t0 = time.perf_counter()
        dist.all_reduce(sums)
        self.wait += time.perf_counter() - t0
        return float(sums[0]), float(sums[1])

    def gather(self, value):
        out = [None] * self.size
        dist.all_gather_object(out, value)
        return out if self.rank == 0 else None

    def close(self):
        """After the model is gone: torch 1.13 can hang when a process group
        is destroyed (the GIL held) while a worker thread still frees a
        tensor of the last step, which collecting the DDP model and meeting
        at a barrier first avoids (seen here, 4 hangs in 5 runs without)."""
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


def rendezvous_port(comm):
    """MASTER_PORT where it is set, else a port free on rank 0, agreed by
    an mpi4py bcast (runs side by side cannot collide on a fixed one)."""
    port = int(os.environ.get("MASTER_PORT", "0"))
    if not port and comm.Get_rank() == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    return comm.bcast(port, root=0)


def shim_loaded():
    """Whether libdpshim.so is in this process (reported only)."""
    return hasattr(ctypes.CDLL(None), "dpshim_balance_batch")


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--pack", type=int, default=2048)
    ap.add_argument("--mean-len", type=float, default=120)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--sync", choices=("mpi", "gloo"), default="mpi")
    ap.add_argument("--micro-batches", type=int, default=1,
                    help="packs a step, gradients accumulated")
    ap.add_argument("--ids-out")
    args = ap.parse_args()
    if args.micro_batches < 1:
        ap.error("--micro-batches: expected an integer >= 1")
    if args.sync == "gloo" and "OMPI_COMM_WORLD_RANK" not in os.environ:
        ap.error("--sync gloo: OMPI_COMM_WORLD_RANK is not set: run under "
                 "OpenMPI's mpirun")
    return args


def train_step(args, sync, model, params, batches):
    """One step of args.micro_batches packs: returns the summed loss and
    tokens and this rank's sample ids."""
    for p in params:
        p.grad = None
    loss_sum, tokens, ids = 0.0, 0, []
    for m in range(args.micro_batches):
        batch = next(batches)
        cu = batch["cu_seqlens"]
        with sync.accumulating(model, m == args.micro_batches - 1):
            logits = model(batch["input_ids"], cu)
            loss = torch.nn.functional.cross_entropy(
                logits, batch["labels"], reduction="sum")
            loss.backward()
        sync.after_backward()
        loss_sum += loss.item()
        tokens += int(cu[-1])
        ids += [int(i) for i in batch["ids"]]
    total_loss, total_tokens = sync.reduce(params, loss_sum, tokens)
    with torch.no_grad():
        for p in params:
            p -= args.lr * p.grad / total_tokens
    return total_loss, total_tokens, ids


def main():
    args = parse_args()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    comm = MPI.COMM_WORLD
    sync = MpiSync(comm) if args.sync == "mpi" else GlooSync(comm)
    rank = sync.rank
    torch.manual_seed(args.seed)  # the same initial weights everywhere
    model = sync.wrap(Model(args.dim))
    params = list(model.parameters())
    loader = torch.utils.data.DataLoader(
        PackedStream(rank, args.steps * args.micro_batches, args.pack,
                     args.mean_len, args.seed),
        batch_size=None)
    batches = iter(loader)
    consumed, start = 0, time.perf_counter()
    for step in range(1, args.steps + 1):
        total_loss, total_tokens, ids = train_step(args, sync, model, params,
                                                   batches)
        consumed += len(ids)
        if args.ids_out:
            with open(args.ids_out, "a") as f:
                f.write("%d %d %s\n" % (step, rank, " ".join(map(str, ids))))
        if rank == 0:
            print(json.dumps({"step": step, "loss": total_loss / total_tokens,
                              "tokens": int(total_tokens)}), flush=True)
    elapsed = time.perf_counter() - start
    counts = sync.gather(consumed)
    waits = sync.gather(sync.wait / elapsed)
    if rank == 0:
        print(json.dumps({"steps_per_s": args.steps / elapsed,
                          "wait_share": sum(waits) / len(waits),
                          "consumed": counts, "balancing": shim_loaded(),
                          "sync": args.sync,
                          "micro_batches": args.micro_batches}), flush=True)
    del model  # DDP's reducer holds the process group: it goes first
    sync.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
