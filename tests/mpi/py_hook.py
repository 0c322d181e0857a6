#!/usr/bin/env python3
"""dpshim-run's start-up hook on hand-made torch DataLoaders. The script
never balances a batch itself: the hook does, or nothing does.

  py_hook.py hooked   (mpirun, 3 ranks, through dpshim-run) in order:
      1. steps 1-3: a DataLoader of packed batches (rank r: 6 - r samples
         of 10 (r + 1) tokens), an mpi4py Allreduce after each;
      2. rank 0 alone: a DataLoader of batches that are no packed dicts (a
         tuple, a dict without cu_seqlens): they must come untouched, with
         no collective (else rank 0 hangs);
      3. rank 0 alone: a DataLoader of packed batches kept out with
         dpshim.exclude(): untouched, no collective;
      4. step 4: rank 1's cu_seqlens is int64: every rank's batch as made;
      5. steps 5-6: BalancedLoader over a DataLoader: balanced once (the
         hook stands aside), which the shim's hand-off count shows.
  py_hook.py marks    (mpirun, through dpshim-run) 8 packed batches with
      dpshim.step_end() after the 1st, 3rd, 6th and 8th and no MPI
      collective: the shim's steps follow the marks (4, not 8).
  py_hook.py inert    (one process) what the start-up left in the process
      before anything else was imported, whether DataLoader is wrapped, a
      packed batch's tensors as made (the same objects), dpshim.step_end().

Each rank prints one JSON line; check_python.py judges them.
"""
import sys


def startup_state():
    """What start-up left in this process, before this script's imports."""
    return {"torch": "torch" in sys.modules,
            "dpshim": sorted(m for m in sys.modules
                             if m.split(".")[0] == "dpshim"),
            "finder": any(type(f).__module__ == "dpshim.autowrap"
                          for f in sys.meta_path)}


STARTUP = startup_state()

import json  # noqa: E402

import torch  # noqa: E402
from torch.utils.data import DataLoader, IterableDataset  # noqa: E402


class Packs(IterableDataset):
    """Rank r's packed batch of each step in `steps`: 6 - r samples of
    10 (r + 1) tokens (unequal loads, yet within what BalancedLoader's
    buffers can receive); each token row holds (its sample's id, its
    position). What it made is kept in .made, tensor objects and all."""

    def __init__(self, rank, steps, cu_dtype=torch.int32):
        self.rank, self.steps, self.cu_dtype = rank, steps, cu_dtype
        self.made = []

    def __iter__(self):
        for step in self.steps:
            yield self.make(step)

    def make(self, step):
        n, length = 6 - self.rank, 10 * (self.rank + 1)
        ids = torch.tensor([step * 10**6 + self.rank * 1000 + i
                            for i in range(n)], dtype=torch.int64)
        tokens = torch.stack([ids.repeat_interleave(length),
                              torch.arange(length).repeat(n)], dim=1)
        cu = torch.arange(0, n * length + 1, length, dtype=self.cu_dtype)
        batch = {"cu_seqlens": cu, "tokens": tokens, "ids": ids,
                 "note": "step %d" % step, "scale": torch.tensor(1.5)}
        self.made.append(batch)
        return batch


def intact(batch):
    """Every sample's token rows carry its id and its positions."""
    cu, tokens, ids = batch["cu_seqlens"], batch["tokens"], batch["ids"]
    for i in range(len(ids)):
        rows = tokens[int(cu[i]):int(cu[i + 1])]
        if not (bool((rows[:, 0] == ids[i]).all()) and
                rows[:, 1].tolist() == list(range(len(rows)))):
            return False
    return len(cu) == len(ids) + 1 and int(cu[-1]) == len(tokens)


def same_objects(got, made):
    """Every value of `got` is the very object `made` held."""
    return list(got) == list(made) and all(got[k] is made[k] for k in made)


def ids(batch):
    return [int(i) for i in batch["ids"]]


def steps_of(loader, dataset, comm):
    """Iterates `loader`, an Allreduce after each batch (the step's end):
    per batch the ids made and got, and whether the samples are intact."""
    out = []
    for k, got in enumerate(loader):
        out.append({"made": ids(dataset.made[k]), "got": ids(got),
                    "intact": intact(got), "note": got["note"]})
        comm.Allreduce(MPI.IN_PLACE, torch.zeros(1).numpy(), op=MPI.SUM)
    return out


def hooked():
    import dpshim
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    out = {"rank": rank, "startup": STARTUP,
           "wrapped": getattr(DataLoader.__iter__, "_dpshim", False)}
    packs = Packs(rank, [1, 2, 3])
    out["steps"] = steps_of(DataLoader(packs, batch_size=None), packs, comm)
    if rank == 0:
        plain = [(torch.arange(3), torch.arange(3)), {"tokens": torch.ones(4)}]
        got = list(DataLoader(plain, batch_size=None))
        out["plain_untouched"] = (got[0][0] is plain[0][0] and
                                  got[1]["tokens"] is plain[1]["tokens"])
        alone = Packs(rank, [90, 91])
        got = list(dpshim.exclude(DataLoader(alone, batch_size=None)))
        out["excluded_untouched"] = all(
            same_objects(g, m) for g, m in zip(got, alone.made))
    bad = Packs(rank, [4], torch.int64 if rank == 1 else torch.int32)
    out["steps"] += steps_of(DataLoader(bad, batch_size=None), bad, comm)
    packs = Packs(rank, [5, 6])
    loader = dpshim.BalancedLoader(DataLoader(packs, batch_size=None),
                                   token_keys=("tokens",),
                                   sample_keys=("ids",))
    out["steps"] += steps_of(loader, packs, comm)
    print(json.dumps(out), flush=True)


MARKS = (1, 3, 6, 8)  # steps of 1, 2, 3 and 2 hand-offs


def marks():
    import dpshim
    rank = MPI.COMM_WORLD.Get_rank()
    packs = Packs(rank, range(1, 9))
    rcs = []
    for k, _ in enumerate(DataLoader(packs, batch_size=None), 1):
        if k in MARKS:
            rcs.append(dpshim.step_end())
    print(json.dumps({"rank": rank, "marks": rcs}), flush=True)


def inert():
    packs = Packs(0, [1])
    got = next(iter(DataLoader(packs, batch_size=None)))
    out = {"startup": STARTUP,
           "wrapped": getattr(DataLoader.__iter__, "_dpshim", False),
           "untouched": same_objects(got, packs.made[0])}
    chained = getattr(sys.modules.get("sitecustomize"), "chained", None)
    out["chained"] = getattr(chained, "__file__", None)
    import dpshim
    out["step_end"] = dpshim.step_end()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1] in ("hooked", "marks"):
        from mpi4py import MPI
    {"hooked": hooked, "marks": marks, "inert": inert}[sys.argv[1]]()
