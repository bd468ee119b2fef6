"""Rank 0's handle on the other ranks of a sharded learner: start them, drive them, see them die.

The learner actor is rank 0 of the learner's torch.distributed group and the only rank on the
actor bus. Ranks 1..N-1 ("followers") hold their shard of the same `LearnerPolicy` and do what
rank 0 does, in the same order, so the collectives inside line up:

- `RankGroup.spawn(world, entry, args, backend)` starts the followers as local processes
  (torch.multiprocessing, "spawn"), each running `entry(rank, world, init_method, *args)`, and
  joins the group as rank 0; or `RankGroup.meet(world, init, backend, args)` joins followers
  started elsewhere (torchrun, srun: `follow` on their side) and sends them `args`. Rank 0
  then knows no follower process to watch: a dead remote rank shows as the collective's own
  error (gloo: at once; NCCL: at its timeout).
- `run(policy, op, *args)` sends `(op, args)` to every follower (`call`: `broadcast_object_list`
  on the control group (gloo: the default group on CPU, a second gloo group when the default is NCCL);
  each follower's `serve_commands` runs `getattr(policy, op)(*args)` (an iterator result, such
  as the weight buckets, is run to its end) until `close()` sends `STOP`; then rank 0 runs the
  same method on its own policy.
- Joining: rank 0 binds the rendezvous store and waits, in Python, until every follower has
  checked in on it (`wait_for_joiners`); a follower it started that ends first is named at once
  (joining straight away would wait out the group's 30-minute timeout inside C++).
- A follower that dies closes its gloo connections, and the collective rank 0 is in fails within
  about a second; `call` turns that into `LearnerRankDied`, which names the dead rank(s) and how
  they ended. NCCL does not notice a dead peer before its timeout, so `dead_ranks()` is there for
  a watchdog to poll while rank 0 is blocked.
- Leaving: each follower leaves the group and then reports it through the rendezvous store
  (`leave`); rank 0, which hosts the store, leaves last (`close` waits for the reports): a gloo
  rank whose peer closes its connections first can abort on an uncaught I/O error.

Commands are pickled (they carry a `TrainingBatch` or a path), which is fine here: every rank is a
process this run started from its own code, on the learner's private group; nothing untrusted is
ever unpickled, and the actor bus itself stays msgpack.

What it does not do: decide what to run (the train package) or the math (policy.py).
"""

from __future__ import annotations

import datetime
import logging
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp

from rstar2.rendezvous import parse_rendezvous

log = logging.getLogger(__name__)

STOP = "stop"
TIMEOUT = datetime.timedelta(minutes=30)
"""How long a collective waits for a silent rank (a crashed rank is noticed at once on gloo)."""


class LearnerRankDied(RuntimeError):
    """A rank of the sharded learner ended before the run did."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Membership:
    """A rank's place in the learner's group: the gloo control group of commands, and the
    rendezvous store (rank 0 hosts it) that carries the leaving handshake (`leave`)."""

    control: dist.ProcessGroup
    store: dist.Store


def join_group(rank: int, world: int, init_method: str, backend: str) -> Membership:
    """Join the learner's default process group at `init_method` (`tcp://HOST:PORT`; rank 0
    binds it and hosts the store). A follower checks in on the store first (`_joined_key`): what
    rank 0 of `RankGroup.spawn` or `meet` waits for (`wait_for_joiners`) before it joins."""
    host, port = parse_rendezvous(init_method)
    store = dist.TCPStore(host, port, world_size=world, is_master=rank == 0, timeout=TIMEOUT)
    if rank:
        store.set(_joined_key(rank), "1")
    return _init_group(store, rank, world, backend)


def _init_group(store: dist.Store, rank: int, world: int, backend: str) -> Membership:
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=TIMEOUT)
    control = dist.new_group(backend="gloo") if backend != "gloo" else dist.group.WORLD
    assert control is not None
    return Membership(control, store)


def leave(rank: int, member: Membership) -> None:
    """A follower leaves the group, then tells rank 0 it has (see `RankGroup.close`): rank 0
    must go last, since a gloo rank whose peer closes its connections first may abort with an
    uncaught I/O error (seen in CI: a torchrun-started rank ended by SIGABRT after `STOP`)."""
    dist.destroy_process_group()
    try:
        member.store.set(_left_key(rank), "1")
    except RuntimeError as e:  # (DistError is one) rank 0 gone already: nothing left to protect
        log.warning("learner rank %d could not report leaving: %s", rank, e)


def wait_for_leavers(store: dist.Store, world: int, timeout_s: float) -> None:
    """Rank 0, before it leaves: wait until ranks 1..world-1 have reported leaving (`leave`);
    a timeout or a store gone is logged, not raised."""
    keys = [_left_key(r) for r in range(1, world)]
    try:
        store.wait(keys, datetime.timedelta(seconds=timeout_s))
    except RuntimeError as e:  # DistError is one: a timeout, a store gone
        log.warning("learner ranks did not all report leaving: %s", e)


def _left_key(rank: int) -> str:
    return f"rstar2/left/{rank}"


def _joined_key(rank: int) -> str:
    return f"rstar2/joined/{rank}"


def wait_for_joiners(
    store: dist.Store,
    world: int,
    processes: Sequence[BaseProcess],
    timeout_s: float,
    poll_s: float = 0.05,
) -> None:
    """Rank 0, before it joins the group: wait until ranks 1..world-1 have checked in on the
    store (`join_group`), failing at once, naming it, when a follower this process started
    (`processes[i]` is rank i + 1) ends first. Joining straight away would wait out `TIMEOUT`
    (30 minutes) for a follower that died before it joined (a bad import, an unusable device),
    inside a C++ call that neither Ctrl-C nor a test's timeout interrupts; this loop is Python.
    Raises `LearnerRankDied`, or `TimeoutError` after `timeout_s`."""
    pending = set(range(1, world))
    started = dict(enumerate(processes, start=1))
    begun = time.monotonic()
    told = begun
    while True:
        pending = {r for r in pending if not store.check([_joined_key(r)])}
        if not pending:
            return
        dead = {
            r: started[r].exitcode for r in pending & started.keys() if not started[r].is_alive()
        }
        if dead:
            raise LearnerRankDied(_describe(dead, "before it joined the group"))
        ranks = ", ".join(str(r) for r in sorted(pending))
        now = time.monotonic()
        if now - begun > timeout_s:
            raise TimeoutError(f"learner rank(s) {ranks} did not join within {timeout_s:.0f} s")
        if now - told > 60:
            told = now
            log.info("learner: still waiting for rank(s) %s", ranks)
        time.sleep(poll_s)


def _master_store(host: str, port: int, world: int) -> dist.TCPStore:
    """Rank 0's rendezvous store, bound at once (port 0: one of the kernel's choosing); it does
    not wait for the others to connect (`wait_for_joiners` does, in Python)."""
    return dist.TCPStore(
        host, port, world_size=world, is_master=True, timeout=TIMEOUT, wait_for_workers=False
    )


def serve_commands(target: object, control: dist.ProcessGroup) -> None:
    """A follower's loop: run each command rank 0 broadcasts on `target` until `STOP`."""
    while True:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0, group=control)
        op, args = box[0]
        if op == STOP:
            return
        result = getattr(target, op)(*args)
        if isinstance(result, Iterator):
            for _ in result:
                pass


def follow(rank: int, world: int, init: str, backend: str) -> tuple[Membership, tuple]:
    """A rank started elsewhere (see `RankGroup.meet`): join the group at `init`, then wait for
    rank 0's `start` command; returns the membership and the command's arguments."""
    member = join_group(rank, world, init, backend)
    box: list[Any] = [None]
    dist.broadcast_object_list(box, src=0, group=member.control)
    op, args = box[0]
    if op != "start":
        raise RuntimeError(f"rank 0 sent {op!r} before 'start'")
    return member, args


def _follower(entry: Callable[..., None], rank: int, world: int, init: str, args: tuple) -> None:
    entry(rank, world, init, *args)


class RankGroup:
    """Rank 0's side of the learner's process group (see the module docstring)."""

    def __init__(self, member: Membership, processes: Sequence[BaseProcess]) -> None:
        self.control = member.control
        self.store = member.store
        self.processes = list(processes)
        """The followers this process started (rank i + 1)."""
        self._closed = False

    @property
    def world(self) -> int:
        return dist.get_world_size()

    @classmethod
    def spawn(cls, world: int, entry: Callable[..., None], args: tuple, backend: str) -> RankGroup:
        """Start ranks 1..world-1 on this host and join them as rank 0."""
        if world < 2:
            raise ValueError(f"a rank group needs world >= 2, got {world}")
        if dist.is_initialized():
            raise RuntimeError("this process already belongs to a torch.distributed group")
        # the store binds a port of the kernel's choosing before any follower is told it (a port
        # found free and bound later could be taken in between)
        store = _master_store("127.0.0.1", 0, world)
        init = f"tcp://127.0.0.1:{store.port}"
        ctx = mp.get_context("spawn")
        processes = []
        for rank in range(1, world):
            p = ctx.Process(
                target=_follower,
                args=(entry, rank, world, init, args),
                name=f"learner-rank-{rank}",
                daemon=True,
            )
            p.start()
            log.info("learner rank %d/%d started (pid %d)", rank, world, p.pid)
            processes.append(p)
        try:
            wait_for_joiners(store, world, processes, TIMEOUT.total_seconds())
            member = _init_group(store, 0, world, backend)
        except BaseException:
            for p in processes:
                p.kill()
            raise
        return cls(member, processes)

    @classmethod
    def meet(
        cls, world: int, init: str, backend: str, args: tuple,
        timeout_s: float = TIMEOUT.total_seconds(),
    ) -> RankGroup:  # fmt: skip
        """Join ranks 1..world-1 started elsewhere (`rstar2 learner-rank`, by torchrun or srun)
        at `init` as rank 0, and send them `args` (what `follow` hands to its entry); waits up to
        `timeout_s` for them to arrive."""
        if world < 2:
            raise ValueError(f"a rank group needs world >= 2, got {world}")
        if dist.is_initialized():
            raise RuntimeError("this process already belongs to a torch.distributed group")
        log.info("learner: waiting at %s for ranks 1..%d", init, world - 1)
        store = _master_store(*parse_rendezvous(init), world)
        wait_for_joiners(store, world, [], timeout_s)
        group = cls(_init_group(store, 0, world, backend), [])
        group.call("start", *args)
        return group

    def run(self, target: object, op: str, *args: object) -> Any:
        """`target.op(*args)` on every rank: the followers are told first (they wait in the
        collectives inside), then rank 0 runs it on its own `target`."""
        self.call(op, *args)
        return self.guarded(lambda: getattr(target, op)(*args))

    def call(self, op: str, *args: object) -> None:
        """Tell every follower to run `op(*args)` (rank 0 then runs it too)."""
        self.guarded(lambda: dist.broadcast_object_list([(op, args)], src=0, group=self.control))

    def guarded(self, fn: Callable[[], Any]) -> Any:
        """`fn()`, with a collective failure caused by a dead follower named as such."""
        try:
            return fn()
        except RuntimeError as e:
            dead = self.dead_ranks(wait_s=5.0)
            if dead:
                raise LearnerRankDied(_describe(dead)) from e
            raise

    def dead_ranks(self, wait_s: float = 0.0) -> dict[int, int | None]:
        """{rank: exit code} of the followers that have ended (waiting up to `wait_s` for a
        breaking process to finish)."""
        out: dict[int, int | None] = {}
        for rank, p in enumerate(self.processes, start=1):
            p.join(timeout=wait_s if not out else 0.0)
            if not p.is_alive():
                out[rank] = p.exitcode
        return out

    def close(self, abort: bool = False, timeout_s: float = 30.0) -> None:
        """Stop the followers and leave the group (idempotent; never raises for a dead rank).
        `abort`: kill them instead of sending `STOP` - after a failure rank 0 may have left them
        inside a collective, where a stop message would never be read. A dead rank has the others
        killed too, without waiting for it to report leaving (that would only time out)."""
        if self._closed:
            return
        self._closed = True
        # a dead rank takes no STOP and never reports leaving; the others cannot go on without it
        kill = abort or bool(self.dead_ranks())
        if not kill:
            try:
                self.call(STOP)
            except RuntimeError as e:
                log.warning("could not stop the learner ranks cleanly: %s", e)
                abort = kill = True
        if not kill:  # rank 0 leaves last (see `leave`); followers elsewhere have no process here
            wait_for_leavers(self.store, self.world, timeout_s)
        for p in self.processes:
            if kill:
                p.kill()
            p.join(timeout=timeout_s)
            if p.is_alive():
                log.warning("learner rank process %s did not stop; killing it", p.pid)
                p.kill()
                p.join(timeout=timeout_s)
        if not abort:
            dist.destroy_process_group()


def _describe(dead: dict[int, int | None], when: str = "") -> str:
    parts = []
    for rank, code in sorted(dead.items()):
        if code is None:
            how = "ended"
        elif code < 0:
            how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        parts.append(f"learner rank {rank} {how}" + (f" {when}" if when else ""))
    return "; ".join(parts) + " (its log is above); the run stopped"
