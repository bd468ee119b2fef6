"""The RL learner's `learner.bf16` and `learner.activation_checkpointing`, on a one-rank
`LearnerPolicy` on the CPU: bf16 reaches the compute but not the weights or Adam's state, and
checkpointing is really on (each decoder layer runs again in the backward pass, all of it or,
with `checkpoint_policy = "selective"`, all but its matmuls) without changing the update."""

from __future__ import annotations

import collections
from dataclasses import replace

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from rstar2.config import ConfigError
from rstar2.learner.activation_checkpoint import is_checkpointed
from rstar2.learner.learner_config import LearnerConfig
from rstar2.learner.policy import LearnerPolicy
from rstar2.rl.rl_config import RLConfig
from tests.learner.rank_entries import CFG
from tests.production.distributed_ranks import synthetic_batch, tiny_model


def _linear_output_dtypes(model: nn.Module) -> set[torch.dtype]:
    """Records the dtype of every Linear's output from now on (filled in as the model runs)."""
    seen: set[torch.dtype] = set()
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
    return seen


def _assert_same_weights(a: nn.Module, b: nn.Module, atol: float) -> None:
    other = b.state_dict()
    assert a.state_dict().keys() == other.keys()
    for name, tensor in a.state_dict().items():
        torch.testing.assert_close(tensor, other[name], atol=atol, rtol=0, msg=name)


def test_bf16_computes_in_bf16_and_keeps_float32_weights_and_adam_state() -> None:
    batch = synthetic_batch(tiny_model())
    plain = LearnerPolicy(tiny_model(), CFG, RLConfig())
    bf16 = LearnerPolicy(tiny_model(), replace(CFG, bf16=True), RLConfig())
    seen = _linear_output_dtypes(bf16.model)
    plain_metrics, bf16_metrics = plain.update(batch), bf16.update(batch)
    assert torch.bfloat16 in seen  # the matmuls ran in bf16
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())
    moments = [v for s in bf16.optimizer.state.values() for v in s.values() if v.dim() > 0]
    assert moments and all(v.dtype == torch.float32 for v in moments)
    # bf16 changes the numbers a little, not the update
    assert bf16_metrics["loss"] != plain_metrics["loss"]
    assert abs(bf16_metrics["loss"] - plain_metrics["loss"]) < 0.05
    _assert_same_weights(plain.model, bf16.model, atol=2e-2)


def _layer_forwards(model: nn.Module) -> list[int]:
    """Counts the runs of the first decoder layer's MLP: inside the layer's forward, which is
    what transformers checkpoints (its hooks do not fire in the recomputation: the forward
    itself is wrapped)."""
    calls = [0]
    mlp = model.model.layers[0].mlp
    forward = mlp.forward

    def counted(*args: object, **kwargs: object) -> torch.Tensor:
        calls[0] += 1
        return forward(*args, **kwargs)

    mlp.forward = counted
    return calls


def test_activation_checkpointing_recomputes_the_layers_and_keeps_the_update() -> None:
    batch = synthetic_batch(tiny_model())
    plain = LearnerPolicy(tiny_model(), CFG, RLConfig())
    ac = LearnerPolicy(tiny_model(), replace(CFG, activation_checkpointing=True), RLConfig())
    assert all(is_checkpointed(layer) for layer in ac.model.model.layers)
    assert not any(is_checkpointed(layer) for layer in plain.model.model.layers)
    plain_calls, ac_calls = _layer_forwards(plain.model), _layer_forwards(ac.model)
    plain_metrics, ac_metrics = plain.update(batch), ac.update(batch)
    # every forward with a gradient runs the layer once more in the backward pass
    assert plain_calls[0] > 0 and ac_calls[0] > plain_calls[0]
    for k, v in plain_metrics.items():
        assert ac_metrics[k] == v or abs(ac_metrics[k] - v) < 1e-5, k
    _assert_same_weights(plain.model, ac.model, atol=1e-6)


def _op_counts(policy: LearnerPolicy, batch: object) -> collections.Counter[str]:
    """The update's operator calls below autograd, by name (`mm`, `silu`, ...)."""
    seen: collections.Counter[str] = collections.Counter()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    with Count():
        policy.update(batch)
    return seen


def test_selective_checkpointing_recomputes_only_element_wise_work_and_keeps_the_update() -> None:
    """`learner.checkpoint_policy = "selective"`: the backward pass runs no matmul more than
    the plain update's (the layers' matmul outputs are kept), while "full" runs every layer's
    matmuls again; both recompute the element-wise work (the SiLU runs again), and all three
    give the same update."""
    batch = synthetic_batch(tiny_model())
    runs = {}
    for name, cfg in (
        ("plain", CFG),
        ("full", replace(CFG, activation_checkpointing=True)),
        ("selective", replace(CFG, activation_checkpointing=True, checkpoint_policy="selective")),
    ):
        policy = LearnerPolicy(tiny_model(), cfg, RLConfig())
        runs[name] = (policy, _op_counts(policy, batch))
    plain, full, selective = (runs[k][1] for k in ("plain", "full", "selective"))

    def matmuls(counts: collections.Counter[str]) -> int:
        return counts["mm"] + counts["addmm"] + counts["bmm"]

    assert matmuls(selective) == matmuls(plain) < matmuls(full)
    assert selective["silu"] == full["silu"] > plain["silu"] > 0
    for name in ("full", "selective"):
        _assert_same_weights(runs["plain"][0].model, runs[name][0].model, atol=1e-6)


def test_an_unknown_checkpoint_policy_is_a_config_error_naming_the_choices() -> None:
    LearnerConfig(activation_checkpointing=True, checkpoint_policy="selective").validate()
    with pytest.raises(ConfigError, match='learner.checkpoint_policy.*"full" or "selective"'):
        LearnerConfig(activation_checkpointing=True, checkpoint_policy="partial").validate()


@pytest.mark.parametrize("setting", [{"checkpoint_policy": "selective"}, {"checkpoint_every": 2}])
def test_checkpointing_settings_without_checkpointing_are_config_errors(setting: dict) -> None:
    LearnerConfig(activation_checkpointing=True, **setting).validate()
    (key,) = setting
    with pytest.raises(ConfigError, match=f"learner.{key}.*activation_checkpointing = true"):
        LearnerConfig(**setting).validate()


def test_checkpointing_a_model_without_decoder_layers_is_a_type_error() -> None:
    from rstar2.learner.model_preparation import prepare_model

    with pytest.raises(TypeError, match="needs decoder layers at model.model.layers, Linear"):
        prepare_model(nn.Linear(2, 2), LearnerConfig(activation_checkpointing=True))
