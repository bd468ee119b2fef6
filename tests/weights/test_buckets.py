"""The manifest and byte-bucket plan of a broadcast weight update (pure, no process group)."""

from __future__ import annotations

import pytest
import torch

from rstar2.weights.buckets import (
    ALIGN,
    Bucket,
    WeightManifest,
    manifest_of,
    pack_bucket,
    plan_buckets,
    unpack_bucket,
)


def mixed_state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "a": torch.randn(3, 5, generator=g),  # 60 B
        "b": torch.randn(7, generator=g).to(torch.bfloat16),  # 14 B
        "c": torch.tensor(2.5, dtype=torch.float64),  # 8 B, 0-dim
        "d": torch.tensor([True, False, True]),  # 3 B
        "e": torch.arange(6, dtype=torch.int64).view(2, 3),  # 48 B
        "f": torch.empty(0, 4),  # 0 B
    }


def test_manifest_round_trips_through_a_plain_payload() -> None:
    m = manifest_of(mixed_state())
    assert m.names == ("a", "b", "c", "d", "e", "f")
    assert m.dtype_names == ("float32", "bfloat16", "float64", "bool", "int64", "float32")
    assert m.shapes == ((3, 5), (7,), (), (3,), (2, 3), (0, 4))
    assert [m.nbytes(i) for i in range(6)] == [60, 14, 8, 3, 48, 0]
    payload = m.to_payload()
    assert payload["shapes"][2] == [] and isinstance(payload["names"], list)
    assert WeightManifest.from_payload(**payload) == m


def test_buckets_hold_consecutive_aligned_tensors_up_to_the_bound() -> None:
    m = manifest_of(mixed_state())
    # Offsets: a 0..60, b 64..78, c 80..88, d 96..99, e 112..160, f 160..160.
    assert plan_buckets(m, 1 << 20) == [Bucket(0, (0, 64, 80, 96, 112, 160), 160)]
    assert plan_buckets(m, 90) == [
        Bucket(0, (0, 64, 80), 88),  # d would end at 99 > 90
        Bucket(3, (0, 16, 64), 64),  # d, e and the empty f
    ]
    assert plan_buckets(m, 70) == [
        Bucket(0, (0,), 60),
        Bucket(1, (0, 16, 32), 35),  # b, c, d
        Bucket(4, (0, 48), 48),  # e, then the empty f (48 + 0 <= 70)
    ]
    assert all(o % ALIGN == 0 for b in plan_buckets(m, 70) for o in b.offsets)


def test_a_tensor_larger_than_the_bound_gets_a_bucket_of_its_own() -> None:
    m = manifest_of({"small": torch.zeros(2), "big": torch.zeros(100), "tail": torch.zeros(1)})
    assert plan_buckets(m, 64) == [Bucket(0, (0,), 8), Bucket(1, (0,), 400), Bucket(2, (0,), 4)]
    assert sorted(i for b in plan_buckets(m, 64) for i in b.indices) == [0, 1, 2]


@pytest.mark.parametrize("bucket_bytes", [1, 50, 90, 1 << 20])
def test_pack_then_unpack_gives_back_every_tensor(bucket_bytes: int) -> None:
    state = mixed_state()
    m = manifest_of(state)
    tensors = list(state.values())
    got: dict[str, torch.Tensor] = {}
    for bucket in plan_buckets(m, bucket_bytes):
        buf = pack_bucket(bucket, tensors)
        assert buf.dtype == torch.uint8 and buf.numel() == bucket.nbytes
        got.update(unpack_bucket(bucket, m, buf.clone()))
    assert list(got) == list(state)
    for name, t in state.items():
        assert got[name].dtype == t.dtype and got[name].shape == t.shape
        assert torch.equal(got[name], t)


def test_non_contiguous_and_shared_tensors_are_packed_by_value() -> None:
    base = torch.arange(12.0).view(3, 4)
    state = {"t": base.t(), "tied_a": base, "tied_b": base}  # a transposed view, shared storage
    m = manifest_of(state)
    (bucket,) = plan_buckets(m, 1 << 20)
    got = dict(unpack_bucket(bucket, m, pack_bucket(bucket, list(state.values()))))
    assert torch.equal(got["t"], base.t()) and torch.equal(got["tied_b"], base)


def test_bad_manifests_and_buffers_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        manifest_of({})
    with pytest.raises(ValueError, match="differ in length"):
        WeightManifest(("a",), ("float32", "float32"), ((1,),))
    with pytest.raises(ValueError, match="twice"):
        WeightManifest(("a", "a"), ("float32", "float32"), ((1,), (1,)))
    with pytest.raises(ValueError, match="unknown dtype name 'complex64'"):
        WeightManifest(("a",), ("complex64",), ((1,),))
    with pytest.raises(ValueError, match="cannot be broadcast"):
        manifest_of({"z": torch.zeros(2, dtype=torch.complex64)})
    with pytest.raises(ValueError, match="negative"):
        WeightManifest(("a",), ("float32",), ((-1,),))
    m = manifest_of({"a": torch.zeros(4)})
    with pytest.raises(ValueError, match="bucket_bytes"):
        plan_buckets(m, 0)
    (bucket,) = plan_buckets(m, 64)
    with pytest.raises(ValueError, match="16 uint8 bytes"):
        unpack_bucket(bucket, m, torch.zeros(4))
