"""Which torch device a device setting ("auto" | "cpu" | "cuda") means on this machine.

`resolve_device(setting, key, index)`: "cpu" is the CPU; with GPUs that torch sees (ROCm
builds count as "cuda"), "auto" and "cuda" are `cuda:{index % GPUs}`; without one, "auto" is
the CPU and "cuda" a `ConfigError` naming `key` (one line, exit code 2, at the CLI). The
engine (`engine.device`, index: the engine's number on its host) and the learner
(`learner.device`, index: the rank's local index) both resolve theirs here, where the process
that uses the device runs.

What it does not do: check a config before a run (`TrainConfig.check_devices` refuses "cuda"
without a GPU before any work) or pick devices for other tools (`rstar2 analyze --device`
takes any torch device name).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rstar2.config import ConfigError

if TYPE_CHECKING:
    import torch

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(
    setting: str, key: str, index: int = 0, cuda_devices: int | None = None
) -> torch.device:
    """The device `key = setting` means for the user number `index` on its host.
    `cuda_devices`: the number of GPUs torch sees (None: ask torch)."""
    import torch  # here, not at the top: a config check needs no torch until it asks

    if setting not in DEVICES:
        raise ConfigError(key, setting, f"one of {', '.join(DEVICES)}")
    if cuda_devices is None:
        cuda_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if setting == "cuda" and cuda_devices == 0:
        raise ConfigError(key, setting, "'cpu' or 'auto': torch sees no GPU on this machine")
    if setting == "cpu" or cuda_devices == 0:
        return torch.device("cpu")
    return torch.device("cuda", index % cuda_devices)
