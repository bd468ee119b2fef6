"""The learner's chunked LM head and packed token-budget micro-batches against the reference
computation (full logits over padded rows): values, gradients, the head's memory, and the
whole GRPO-RoC update (with TIS's proximal logprobs and an entropy bonus too)."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

from rstar2.config import ConfigError
from rstar2.learner.activation_checkpoint import is_checkpointed
from rstar2.learner.learner_config import LearnerConfig
from rstar2.learner.logprob_head import LogprobHead, chunked_logprobs, install
from rstar2.learner.micro_batch import pad_batch, split_micro_batches, token_logprobs
from rstar2.learner.model_preparation import packed_head, prepare_model
from rstar2.learner.packing import pack, token_budget_micro_batches, use_packed_attention
from rstar2.learner.policy_update import make_lr_schedule, update_policy
from rstar2.rl.resampling import TrainingBatch
from rstar2.rl.rl_config import RLConfig
from tests.engine.factories import tiny_qwen2


@dataclass
class R:
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]


def rollouts(lengths: tuple[int, ...] = (7, 12, 3, 9, 5), seed: int = 0) -> list[R]:
    """Rollouts with a masked prompt and a masked tool response in the middle."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in lengths:
        ids = torch.randint(0, 64, (n,), generator=g).tolist()
        mask = [0, 0] + [1] * (n - 2)
        if n > 6:
            mask[4:6] = [0, 0]  # a tool response: no loss
        behaviour = (-torch.rand(n, generator=g) * 3).tolist()
        out.append(R(ids, mask, [b if m else 0.0 for b, m in zip(behaviour, mask, strict=True)]))
    return out


def reference_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor):
    logp_all = F.log_softmax((hidden @ weight.t()).double(), dim=-1)
    logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    return logp, -(logp_all.exp() * logp_all).sum(-1)


@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_chunked_head_equals_the_full_logits_in_value_and_gradient(chunk: int) -> None:
    torch.manual_seed(0)
    hidden = torch.randn(10, 8, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 8, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 50, (10,))
    g_logp, g_ent = torch.randn(10, dtype=torch.float64), torch.randn(10, dtype=torch.float64)

    logp, ent = chunked_logprobs(hidden, weight, targets, chunk)
    ref_logp, ref_ent = reference_logprobs(hidden, weight, targets)
    torch.testing.assert_close(logp, ref_logp)
    torch.testing.assert_close(ent, ref_ent)
    got = torch.autograd.grad(
        (logp * g_logp + ent * g_ent).sum(), (hidden, weight), retain_graph=True
    )
    want = torch.autograd.grad(
        (ref_logp * g_logp + ref_ent * g_ent).sum(), (hidden, weight), retain_graph=True
    )
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
    # the log-probs alone (the entropy a metric): its gradient path is not taken
    got = torch.autograd.grad((logp * g_logp).sum(), (hidden, weight))
    want = torch.autograd.grad((ref_logp * g_logp).sum(), (hidden, weight))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)


def test_chunked_head_in_bf16_is_within_bf16_tolerance() -> None:
    torch.manual_seed(1)
    hidden = torch.randn(32, 16, requires_grad=True)
    weight = torch.randn(200, 16, requires_grad=True) / 4
    targets = torch.randint(0, 200, (32,))
    logp, ent = chunked_logprobs(hidden.bfloat16(), weight.bfloat16(), targets, 8)
    ref_logp, ref_ent = reference_logprobs(hidden, weight, targets)
    assert logp.dtype == torch.float32
    torch.testing.assert_close(logp.double(), ref_logp, atol=0.1, rtol=0.02)
    torch.testing.assert_close(ent.double(), ref_ent, atol=0.1, rtol=0.02)
    g = torch.autograd.grad(logp.sum(), weight)[0]
    g_ref = torch.autograd.grad(ref_logp.sum(), weight)[0].float()
    assert float((g - g_ref).norm() / g_ref.norm()) < 0.02


def test_the_heads_memory_is_bounded_by_its_chunk() -> None:
    """The largest tensor the head allocates, forward and backward, is a chunk x vocab buffer,
    not the tokens x vocab logits (counted with a dispatch mode that sees every allocation)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        biggest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    Largest.biggest = max(Largest.biggest, t.numel())
            return out

    tokens, vocab, chunk = 256, 1000, 16
    hidden = torch.randn(tokens, 8, requires_grad=True)
    weight = torch.randn(vocab, 8, requires_grad=True)
    targets = torch.randint(0, vocab, (tokens,))
    with Largest():
        logp, ent = chunked_logprobs(hidden, weight, targets, chunk)
        (logp.sum() + ent.sum()).backward()
    assert Largest.biggest == chunk * vocab  # the weight's gradient is 8 x vocab, smaller
    Largest.biggest = 0
    with Largest():
        reference_logprobs(hidden, weight, targets)
    assert Largest.biggest == tokens * vocab


def test_pack_lays_out_positions_targets_and_boundaries() -> None:
    a = R([5, 6, 7, 8], [0, 1, 0, 1], [0.0, -1.0, 0.0, -2.0])
    b = R([9, 10], [0, 1], [0.0, -3.0])
    p = pack([a, b], [0.5, -1.0])
    assert p.input_ids.tolist() == [[5, 6, 7, 8, 9, 10]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3, 0, 1]]
    assert p.cu_seqlens.tolist() == [0, 4, 6] and p.max_len == 4
    assert p.keep.tolist() == [0, 2, 4] and p.targets.tolist() == [6, 8, 10]
    assert p.behaviour.tolist() == [-1.0, -2.0, -3.0]
    assert p.advantages.tolist() == [0.5, 0.5, -1.0] and p.counts == [2, 1]
    with pytest.raises(ValueError):
        pack([R([1, 2], [0], [0.0, 0.0])], [1.0])
    with pytest.raises(ValueError):
        pack([a], [1.0, 2.0])


def test_token_budget_micro_batches() -> None:
    items, lengths = [0, 1, 2, 3, 4, 5], [300, 500, 100, 900, 50, 60]
    assert token_budget_micro_batches(items, lengths, 800, 16) == [[0, 1], [2], [3], [4, 5]]
    assert token_budget_micro_batches(items, lengths, 10_000, 4) == [[0, 1, 2, 3], [4, 5]]
    with pytest.raises(ValueError):
        token_budget_micro_batches(items, lengths, 0, 4)
    batch = TrainingBatch(
        rollouts=[R([0] * n, [0] * n, [0.0] * n) for n in lengths], advantages=[0.0] * 6
    )
    no_budget = LearnerConfig(micro_batch_size=4, micro_batch_tokens=0)
    assert split_micro_batches(items, batch, no_budget) == [[0, 1, 2], [3, 4, 5]]


def test_packed_rows_give_the_padded_logprobs_and_gradients() -> None:
    """Attention stays within each packed sequence (a leak would change the log-probs of the
    sequences after the first) and the kept positions are the loss tokens."""
    rs = rollouts()
    model, ref = tiny_qwen2(), tiny_qwen2()
    model.train(), ref.train()
    assert use_packed_attention(model)
    head = install(model, chunk=4)
    assert isinstance(head, LogprobHead) and packed_head(model) is head
    p = pack(rs, [1.0] * len(rs))
    with head.targets(p.targets):
        out = model(**p.forward_kwargs()).logits[0]
    ids, attn, mask, _ = pad_batch(rs)
    ref_logp, ref_ent = token_logprobs(ref, ids, attn, entropy_grad=True)
    keep = mask[:, 1:].bool()
    torch.testing.assert_close(out[:, 0], ref_logp[keep].to(out.dtype), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[:, 1], ref_ent[keep].to(out.dtype), atol=1e-5, rtol=1e-5)
    w = torch.randn(out.shape[0], dtype=out.dtype)
    (out[:, 0] * w).sum().backward()
    (ref_logp[keep] * w).sum().backward()
    for (name, a), b in zip(model.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-4, msg=name)
    # unarmed, the model is the plain model (padded batches: SFT, evaluation)
    torch.testing.assert_close(
        model(input_ids=ids, attention_mask=attn).logits,
        ref(input_ids=ids, attention_mask=attn).logits,
    )


@pytest.mark.parametrize(
    ("rl", "mini_batches"),
    [(RLConfig(), 1), (RLConfig(tis_cap=2.0, entropy_coef=0.01), 2)],
    ids=["grpo-roc", "tis-entropy-two-mini-batches"],
)
def test_the_packed_update_equals_the_padded_one(rl: RLConfig, mini_batches: int) -> None:
    """The same step, packed by a token budget with the chunked head vs padded by sequence count
    with full logits: weights and metrics equal (the token-level mean is unchanged)."""
    rs = rollouts((7, 12, 3, 9, 5, 11, 4, 8))
    batch = TrainingBatch(rollouts=rs, advantages=[0.9, -0.4, 1.3, -1.1, 0.2, 0.7, -0.8, 0.5])
    results = []
    for packed, budget, size in ((False, 0, 3), (True, 20, 16), (True, 10_000, 2)):
        model = tiny_qwen2()
        cfg = LearnerConfig(
            lr=0.5, warmup_steps=0, micro_batch_size=size, micro_batch_tokens=budget,
            packed=packed, head_chunk=5, mini_batches=mini_batches,
        )  # fmt: skip
        prepare_model(model, cfg)
        assert (packed_head(model) is not None) == packed
        # SGD: the update is the gradient itself (Adam would amplify rounding noise in
        # near-zero gradients to a full learning-rate step)
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        metrics = update_policy(model, opt, make_lr_schedule(opt, cfg), batch, cfg, rl)
        results.append((model, metrics))
    (ref, ref_metrics), *others = results
    moved = max(
        float((a - b).detach().abs().max())
        for a, b in zip(ref.parameters(), tiny_qwen2().parameters(), strict=True)
    )
    assert moved > 1e-3
    for model, metrics in others:
        for (name, a), b in zip(model.named_parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)
        for key, value in ref_metrics.items():
            assert metrics[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def test_prepare_model_checkpoints_every_kth_layer() -> None:
    model = tiny_qwen2()
    model.model.layers.append(copy.deepcopy(model.model.layers[0]))
    model.model.layers.append(copy.deepcopy(model.model.layers[0]))
    prepare_model(model, LearnerConfig(activation_checkpointing=True, checkpoint_every=2))
    assert [is_checkpointed(layer) for layer in model.model.layers] == [
        True, False, True, False,
    ]  # fmt: skip
    # a deep copy checkpoints its own layers, not the original's
    twin = copy.deepcopy(model)
    assert twin.model.layers[0].forward.__self__ is twin.model.layers[0]


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_a_checkpointed_layer_gets_no_kv_cache_and_the_same_gradients(policy: str) -> None:
    """A training forward that asks for a KV cache (the padded path does not say
    `use_cache=False`): a checkpointed layer gets none, as in transformers' own
    checkpointing, since its recomputation would append its keys to the cache a second
    time; the gradients equal the unchecked model's, and evaluation keeps its cache. (The
    gradients alone would not show a second append under "full": attention over every key
    twice, values twice, gives the same output; the cache's length does.)"""
    ids = torch.randint(1, 100, (2, 12), generator=torch.Generator().manual_seed(0))
    plain, checked = tiny_qwen2(dtype=torch.float32), tiny_qwen2(dtype=torch.float32)
    cfg = LearnerConfig(activation_checkpointing=True, checkpoint_policy=policy, packed=False)
    prepare_model(checked, cfg)
    for model in (plain, checked):
        model.train()
        out = model(input_ids=ids, use_cache=True)
        out.logits.pow(2).mean().backward()
        cache = out.past_key_values
        cached = 0 if cache is None else cache.get_seq_length()
        assert cached == (0 if model is checked else ids.shape[1])
    for (name, a), b in zip(checked.named_parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-5, msg=name)
    with torch.no_grad():
        assert checked.eval()(input_ids=ids, use_cache=True).past_key_values is not None


def test_prepare_model_compiles_the_layers_where_asked_and_on_gpus_by_default() -> None:
    """`learner.compile`: None compiles on a GPU only (the model here is on the CPU); True
    compiles every decoder layer in place (module names, so state-dict keys, unchanged)."""
    model = tiny_qwen2()
    keys = list(model.state_dict())
    prepare_model(model, LearnerConfig())
    assert not any(layer._compiled_call_impl for layer in model.model.layers)
    prepare_model(model, LearnerConfig(compile=True))
    assert all(layer._compiled_call_impl is not None for layer in model.model.layers)
    assert list(model.state_dict()) == keys


def test_the_compile_mode_reaches_every_layers_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """`learner.compile_mode` is torch.compile's `mode` for each layer ("default": none)."""
    modes: list[str | None] = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: modes.append(kw.get("mode")))
    model = tiny_qwen2()
    prepare_model(model, LearnerConfig(compile=True))
    prepare_model(model, LearnerConfig(compile=True, compile_mode="reduce-overhead"))
    n = len(model.model.layers)
    assert modes == [None] * n + ["reduce-overhead"] * n


def test_a_compile_mode_needs_a_known_name_and_compiling() -> None:
    LearnerConfig(compile_mode="reduce-overhead").validate()  # compile None: on on a GPU
    with pytest.raises(ConfigError, match='learner.compile_mode.*"default" or "reduce-overhead"'):
        LearnerConfig(compile=True, compile_mode="fast").validate()
    with pytest.raises(ConfigError, match="learner.compile_mode.*learner.compile = false"):
        LearnerConfig(compile=False, compile_mode="reduce-overhead").validate()


def test_packed_attention_has_no_side_effect_a_checkpointed_compiled_layer_would_refuse() -> None:
    """Compiled layers under activation checkpointing: torch.compile traces the checkpointed
    layer as one higher-order op and gives up on all of it (eager layers) at the first state
    the layer's code changes. `packed_attention` once recorded its kernel in a module-level
    set, which did exactly that (on the H200 the FSDP2 + checkpointing entries ran uncompiled
    layers); now the path is decided and recorded outside the model. (This CPU's path, one
    SDPA call per sequence, still breaks the graph at the boundaries' `tolist`; a GPU's
    varlen call does not.)"""
    import torch._dynamo

    from rstar2.learner import packing

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = tiny_qwen2()
    cfg = LearnerConfig(lr=0.1, warmup_steps=0, compile=True, activation_checkpointing=True)
    prepare_model(model, cfg)
    packing.attention_paths.clear()
    batch = TrainingBatch(rollouts=rollouts(), advantages=[1.0, -1.0, 0.5, -0.5, 1.0])
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    update_policy(model, opt, make_lr_schedule(opt, cfg), batch, cfg, RLConfig())
    reasons = " ".join(torch._dynamo.utils.counters["graph_break"])
    assert "side effect" not in reasons.lower() and "mutat" not in reasons.lower(), reasons
    assert packing.attention_paths == {"sdpa-per-sequence"}  # recorded all the same
    torch._dynamo.reset()


def test_varlen_is_tried_once_per_shape_and_a_failure_falls_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from rstar2.learner import packing

    calls = []

    def failing(q, k, v, cu, max_len, scale):  # type: ignore[no-untyped-def]
        calls.append(q.shape)
        raise RuntimeError("no kernel for this head size")

    monkeypatch.setattr(packing, "_VARLEN", failing)
    shape = ("cpu", 4, 2, 16, torch.bfloat16)
    assert packing._try_varlen(shape, torch.device("cpu")) is False
    assert calls == [torch.Size([8, 4, 16])] and "varlen attention failed" in caplog.text
    monkeypatch.setattr(packing, "_VARLEN", lambda *a: a[0])
    assert packing._try_varlen(shape, torch.device("cpu")) is True
    # the CPU never takes varlen, whatever the dtype
    model = tiny_qwen2()
    assert packing.check_varlen(model, torch.device("cpu"), torch.bfloat16) is False


VARLEN_SHAPE = ("cpu", 4, 2, 16, torch.float32)
"""tiny_qwen2's varlen shape: 4 query heads, 2 key/value heads of 16, in float32."""


@pytest.fixture
def varlen_standin(monkeypatch: pytest.MonkeyPatch) -> None:
    """`packed_attention`'s varlen branch (a GPU's) made available on this CPU through a
    stand-in for torch's `varlen_attn` (`tests/learner/varlen_standin.py`, opaque to
    torch.compile as torch's own custom op is), which "selective" checkpointing keeps as it
    keeps torch's op. Tests choose the branch per shape in `packing._varlen_usable`."""
    import torch.nn.attention.varlen

    from rstar2.learner import activation_checkpoint, packing
    from tests.learner import varlen_standin as standin

    monkeypatch.setattr(torch.nn.attention.varlen, "varlen_attn", standin.varlen_attn)
    monkeypatch.setattr(packing, "_VARLEN", packing._varlen_call())
    monkeypatch.setattr(packing, "_varlen_usable", {VARLEN_SHAPE: True})
    saved = activation_checkpoint.saved_ops() | {torch.ops.rstar2_tests.varlen_standin.default}
    monkeypatch.setattr(activation_checkpoint, "saved_ops", lambda: saved)


def _checkpointed_update(policy: str = "full", compiled: bool = False) -> tuple[object, dict]:
    """One packed update of tiny_qwen2 (float32) with SGD; checkpointing and compiled layers
    when `compiled` (the settings the GPU's learner runs), with `policy`."""
    model = tiny_qwen2(dtype=torch.float32)
    cfg = LearnerConfig(
        lr=0.5, warmup_steps=0, micro_batch_tokens=20, head_chunk=5, compile=compiled,
        activation_checkpointing=compiled, checkpoint_policy=policy,
    )  # fmt: skip
    prepare_model(model, cfg)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    batch = TrainingBatch(rollouts=rollouts(), advantages=[1.0, -1.0, 0.5, -0.5, 1.0])
    return model, update_policy(model, opt, make_lr_schedule(opt, cfg), batch, cfg, RLConfig())


@pytest.mark.usefixtures("varlen_standin")
def test_the_gpu_attention_path_compiles_inside_checkpointed_layers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The varlen branch of `packed_attention` run on this CPU with the stand-in: layers
    compiled under activation checkpointing, "full" or "selective", build their graphs with
    no graph break at all; the update equals the same one uncompiled, and all equal the CPU's
    path (one SDPA call per sequence), which checks the branch's layouts. Before 2026-11-28
    the branch recorded its kernel in a module-level set, and the checkpointed layers fell
    back to eager."""
    import torch._dynamo

    from rstar2.learner import packing
    from rstar2.learner.op_profile import compile_report

    results = []
    runs = ((False, False, "full"), (True, False, "full"), (True, True, "full"))
    for varlen, compiled, policy in (*runs, (True, True, "selective")):
        monkeypatch.setattr(packing, "_varlen_usable", {VARLEN_SHAPE: True} if varlen else {})
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        packing.attention_paths.clear()
        model, metrics = _checkpointed_update(policy, compiled)
        results.append((model, metrics, compile_report(torch._dynamo.utils.counters)))
        assert packing.attention_paths == {"varlen" if varlen else "sdpa-per-sequence"}
    torch._dynamo.reset()
    (reference, want, _), *varlen_runs = results
    for _, _, compiled_report in varlen_runs[1:]:
        assert compiled_report["graphs"] >= 2 and compiled_report["graph_breaks"] == {}
    for model, metrics, _ in varlen_runs:
        for (name, a), b in zip(model.named_parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=name)
        assert metrics["loss"] == pytest.approx(want["loss"], rel=1e-4, abs=1e-6)


@pytest.mark.usefixtures("varlen_standin")
def test_compiled_selective_checkpointing_recomputes_no_matmul(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Compiled, the choice of what to recompute is torch.compile's partitioner's: the layers
    built here by AOTAutograd with the min-cut partitioner inductor uses, their graphs'
    matmuls counted. "selective" checkpointing leaves the backward graphs exactly two matmuls
    per forward matmul (the input's and the weight's gradients: nothing recomputed); "full"
    recomputes some forward matmuls there."""
    import torch._dynamo
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    matmul_ops = (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm)
    original = torch.nn.Module.compile

    def counted(policy: str) -> dict[str, int]:
        counts = {"forward": 0, "backward": 0}

        def compiler(kind: str):  # type: ignore[no-untyped-def]
            def compile_graph(gm: torch.fx.GraphModule, _inputs: object):  # type: ignore[no-untyped-def]
                counts[kind] += sum(
                    getattr(node.target, "overloadpacket", None) in matmul_ops
                    for node in gm.graph.nodes
                )
                return make_boxed_func(gm.forward)

            return compile_graph

        backend = aot_autograd(
            fw_compiler=compiler("forward"),
            bw_compiler=compiler("backward"),
            partition_fn=min_cut_rematerialization_partition,
        )
        monkeypatch.setattr(
            torch.nn.Module, "compile", lambda self: original(self, backend=backend)
        )
        torch._dynamo.reset()
        _checkpointed_update(policy, compiled=True)
        torch._dynamo.reset()
        return counts

    full, selective = counted("full"), counted("selective")
    assert selective["forward"] == full["forward"] > 0
    assert selective["backward"] == 2 * selective["forward"] < full["backward"]
