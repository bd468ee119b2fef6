"""The receiver body of the weight-group tests (spawned processes import it by name)."""

from __future__ import annotations

import torch

from rstar2.weights.buckets import WeightManifest
from rstar2.weights.gloo_group import WeightReceiver


def receive_updates(
    port: int, rank: int, world_size: int, bucket_bytes: int, manifests: list[dict], out: str
) -> None:
    """Join the group, receive one update per manifest, save {update: {name: tensor}} to `out`."""
    torch.set_num_threads(1)
    got: list[dict[str, torch.Tensor]] = []
    member = WeightReceiver.connect(
        "127.0.0.1", port, rank, world_size, timeout_s=60, bucket_bytes=bucket_bytes
    )
    try:
        for payload in manifests:
            update: dict[str, torch.Tensor] = {}
            for pairs in member.receive(WeightManifest.from_payload(**payload)):
                update.update((name, t.clone()) for name, t in pairs)
            got.append(update)
    finally:
        member.close()
    torch.save(got, out)
