"""The policy module that the learner and the embedded engines of one process share
(`cluster.share_weights`): the engines compute with the learner's own parameter tensors, so a
weight update copies nothing.

- `publish(key, module)`: the learner actor, once its policy is loaded (restored too);
- `await wait_for(key, timeout_s)`: each rollout worker, before it builds its engine on it;
- `withdraw(key)`: the learner, when it stops.

The key is the run directory, so two runs in one process (the tests) never mix.

Why sharing is safe where the settings allow it (`TrainConfig.validate`): synchronous RL only
(no engine generates while the optimizer writes the tensors), one learner rank (plain tensors,
not FSDP2's shards), the embedded engine in the learner's process (`graph.processes = 1`), on
the learner's device, in float32 (the learner's master weights; the embedded engine computes
in its model's dtype). The optimizer updates the parameters in place, which the engine's
forward and its captured CUDA graphs read where they are. The learner's push then carries no
tensor: one empty final `WeightUpdate` per version (`rstar2.weights.push.SharedPush`), which
each worker's weight gate applies as usual (tagging turns with the version).

Engines keep the module they were built on: a learner that published another module later
would leave them behind, which `rstar2 train` never does (its learner actor is not restarted:
a failure stops the graph).

What it does not do: cross a process boundary (CUDA IPC handles could; not built) or check the
settings (the config does; `check_shared` checks the module against the engine's device).
"""

from __future__ import annotations

import anyio
import torch
from torch import nn

_modules: dict[str, nn.Module] = {}


def publish(key: str, module: nn.Module) -> None:
    """Offer `module` to the engines of this process under `key` (one module per key)."""
    if _modules.get(key, module) is not module:
        raise RuntimeError(f"another policy module is already shared under {key!r}")
    _modules[key] = module


def withdraw(key: str) -> None:
    """Stop offering the module under `key` (engines already built on it keep it)."""
    _modules.pop(key, None)


async def wait_for(key: str, timeout_s: float = 600.0, poll_s: float = 0.05) -> nn.Module:
    """The module published under `key`, once it is (TimeoutError after `timeout_s`: the
    learner never loaded its policy, or runs in another process)."""
    with anyio.move_on_after(timeout_s):
        while key not in _modules:
            await anyio.sleep(poll_s)
        return _modules[key]
    raise TimeoutError(
        f"no learner policy shared under {key!r} after {timeout_s:.0f} s "
        "(cluster.share_weights needs the learner in this process: graph.processes = 1)"
    )


def check_shared(module: nn.Module, device: torch.device) -> None:
    """ValueError unless the engine can compute with `module`'s tensors as they are: on
    `device`, in float32 (an engine would otherwise move or cast the learner's parameters)."""
    params = list(module.parameters())
    where = {(p.device.type, p.device.index or 0) for p in params}
    if where != {(device.type, device.index or 0)}:
        raise ValueError(
            f"cluster.share_weights: the learner's parameters are on {sorted(where)}, the "
            f"engine on {device}; set engine.device and learner.device to the same device"
        )
    dtypes = {p.dtype for p in params}
    if dtypes != {torch.float32}:
        raise ValueError(
            f"cluster.share_weights: the learner's parameters are {sorted(map(str, dtypes))}; "
            "the embedded engine shares float32 parameters only"
        )
