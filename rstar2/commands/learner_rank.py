"""`rstar2 learner-rank`: one rank of a sharded learner, started by torchrun or srun.

With `cluster.learner_rendezvous = "tcp://HOST:PORT"` and `cluster.learner_ranks = N`, the
learner actor of `rstar2 train` (rank 0, on HOST) spawns no ranks: it waits at HOST:PORT for
ranks 1..N-1 started elsewhere by this command, then sends them what to load (the model
directory, the learner and RL settings). The rank and world size come from the launcher's
environment unless given: torchrun's `RANK`/`WORLD_SIZE`/`LOCAL_RANK`, else Slurm's
`SLURM_PROCID`/`SLURM_NTASKS`/`SLURM_LOCALID`; the launcher starts the N-1 followers only, so
this rank is the launcher's rank + 1 and the world its size + 1.

    srun --ntasks 15 rstar2 learner-rank --rendezvous tcp://HOST:29500
    torchrun --nproc-per-node 7 -m rstar2.cli learner-rank --rendezvous tcp://HOST:29500 \\
        --world 16 --gpu-offset 1                      # HOST: GPUs 1..7 are ranks 1..7
    torchrun --nproc-per-node 8 -m rstar2.cli learner-rank --rendezvous tcp://HOST:29500 \\
        --world 16 --rank-offset 7                     # a second host: ranks 8..15
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from rstar2.config import UsageError
from rstar2.rendezvous import parse_rendezvous

_LAUNCHERS = (
    ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rendezvous", required=True, metavar="tcp://HOST:PORT",
        help="rank 0's address: the run's cluster.learner_rendezvous",
    )  # fmt: skip
    p.add_argument("--rank", type=int, default=None, help="this rank (default: launcher's + 1)")
    p.add_argument("--world", type=int, default=None, help="all ranks (default: launcher's + 1)")
    p.add_argument(
        "--local-rank", type=int, default=None, help="GPU index on this host (default: launcher's)"
    )
    p.add_argument("--gpu-offset", type=int, default=0, help="added to the local rank (default 0)")
    p.add_argument(
        "--rank-offset", type=int, default=0,
        help="added to the launcher's rank: one launch per host numbers its processes from 0 "
        "(default 0)",
    )  # fmt: skip
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="the run's learner.device (default auto)")  # fmt: skip


def placement(
    env: dict[str, str],
    rank: int | None,
    world: int | None,
    local: int | None,
    rank_offset: int = 0,
) -> tuple[int, int, int]:
    """(rank, world, local rank) from the flags, else from torchrun's or Slurm's environment
    (the launcher's rank + 1 + `rank_offset`, its world size + 1)."""
    for rank_var, world_var, local_var in _LAUNCHERS:
        if rank_var in env and world_var in env:
            rank = int(env[rank_var]) + 1 + rank_offset if rank is None else rank
            world = int(env[world_var]) + 1 if world is None else world
            local = int(env.get(local_var, "0")) if local is None else local
            break
    if rank is None or world is None:
        raise UsageError(
            "--rank and --world are needed outside torchrun or srun (no RANK/WORLD_SIZE or "
            "SLURM_PROCID/SLURM_NTASKS in the environment)"
        )
    if not 1 <= rank < world:
        raise UsageError(f"rank {rank} of {world}: a follower's rank is 1..{world - 1}")
    return rank, world, 0 if local is None else local


def run(args: argparse.Namespace) -> int:
    """Join the group, serve rank 0's commands until it stops the group, then exit (never
    returns after joining: see the end)."""
    try:
        parse_rendezvous(args.rendezvous)
    except ValueError as e:
        raise UsageError(f"--rendezvous {args.rendezvous!r}: {e}") from None
    rank, world, local = placement(
        dict(os.environ), args.rank, args.world, args.local_rank, args.rank_offset
    )
    from rstar2.devices import resolve_device
    from rstar2.learner.policy import external_rank

    resolve_device(args.device, "--device")  # "cuda" without a GPU: one line, not a traceback

    external_rank(rank, world, args.rendezvous, args.device, local + args.gpu_offset)
    # End like a spawned rank: multiprocessing ends its children with os._exit, skipping the
    # interpreter's finalization, where the FSDP module's references to the (already
    # destroyed) gloo group are freed in arbitrary order and gloo may abort ("terminate called
    # without an active exception", SIGABRT, seen in CI after a clean run; spawned ranks never
    # showed it). The rank has left the group and written everything: only stdio to flush.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
