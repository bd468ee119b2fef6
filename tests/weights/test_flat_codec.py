"""The bus weight update's flat codec: a state dict survives flattening, a wrong buffer is refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rstar2.weights.flat_codec import flatten_weights, unflatten_weights


def test_flatten_roundtrip() -> None:
    model = nn.Linear(3, 2)
    names, shapes, flat = flatten_weights(model)
    back = unflatten_weights(names, shapes, flat)
    for k, v in model.state_dict().items():
        assert torch.equal(back[k], v)
    with pytest.raises(ValueError):
        unflatten_weights(names, shapes, torch.cat([flat, flat[:1]]))
