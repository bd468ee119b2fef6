"""The GPU session's equality checks (`scripts/gpu_figures.py --check-packed DEVICE` and
`--check-engine DEVICE`): the learner's packed, chunked-head log-probs against the padded
full-logits reference, and the embedded engine's decode paths against each other, HF
`generate` and the model's own logits, with the attention kernels torch chose. Each returns
one JSON-able dict; `gpu_figures.py` runs it in a subprocess with a time limit.

What it does not do: time anything (`gpu_figures.py` and the `rstar2 bench` commands do).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def packed_check(device: str) -> dict[str, Any]:
    """The packed, chunked-head log-probs against the padded full-logits reference on `device`
    (a small random Qwen2 with grouped-query attention, bf16 autocast, sequences of different
    lengths with masked prompts and tool responses): the largest log-prob and entropy
    differences, the gradients' relative difference, and the attention kernel used."""
    import copy

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rstar2.learner import packing
    from rstar2.learner.learner_config import LearnerConfig
    from rstar2.learner.micro_batch import pad_batch, token_logprobs
    from rstar2.learner.model_preparation import packed_head, prepare_model
    from rstar2.learner.workload import rl_batch

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=32_000, hidden_size=256, intermediate_size=704,
                      num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                      tie_word_embeddings=True)  # fmt: skip
    ref = Qwen2ForCausalLM(cfg).to(device).train()
    model = copy.deepcopy(ref)
    prepare_model(model, LearnerConfig(head_chunk=128))
    head = packed_head(model)
    assert head is not None
    batch = rl_batch(cfg.vocab_size, 6, 512, seed=1)
    ids, attn, mask, _ = (t.to(device) for t in pad_batch(batch.rollouts))
    keep = mask[:, 1:].bool()
    dev = torch.device(device)
    packed = packing.pack(batch.rollouts, batch.advantages).to(dev)
    packing.check_varlen(model, dev, torch.bfloat16)  # as the update does: varlen where usable
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        ref_logp, ref_ent = token_logprobs(ref, ids, attn)
        with head.targets(packed.targets):
            out = model(**packed.forward_kwargs()).logits[0]
    packing.note_attention_path(model, dev, torch.bfloat16)
    weights = torch.randn(out.shape[0], device=device)
    (out[:, 0] * weights).sum().backward()
    (ref_logp[keep] * weights).sum().backward()
    num = sum(float((a.grad - b.grad).norm() ** 2) for a, b in
              zip(model.parameters(), ref.parameters(), strict=True))  # fmt: skip
    den = sum(float(b.grad.norm() ** 2) for b in ref.parameters())
    return {
        "device": device,
        "attention": sorted(packing.attention_paths),
        "loss_tokens": int(out.shape[0]),
        "logprob_max_abs_diff": float((out[:, 0] - ref_logp[keep]).detach().abs().max()),
        "entropy_max_abs_diff": float((out[:, 1] - ref_ent[keep]).detach().abs().max()),
        "logprob_mean_abs": float(ref_logp[keep].detach().abs().mean()),
        "grad_relative_diff": (num / den) ** 0.5,
    }


def engine_check(device: str, smoke: bool = False) -> dict[str, Any]:
    """The embedded engine's decode paths against each other and HF `generate` on `device`:
    greedy outputs of the fixed-shape path with CUDA graphs, without them, the dynamic path
    and HF (float32 and bfloat16 random Qwen2 models), the same with a KV budget small enough
    to preempt and with a multi-turn continuation (prefix cache), sampled log-probs against
    the model's own, rounds of 8 decode steps against single steps, a step of batched prefill
    groups against the model's own logits (`prefill_groups_check`), and the graphs captured."""
    import torch

    from rstar2.engine.benchmark import random_model
    from rstar2.engine.config import EngineConfig
    from rstar2.engine.core import EngineCore
    from rstar2.engine.protocol import SamplingParams

    out: dict[str, Any] = {"device": device}
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 1000, (int(n),), generator=gen).tolist()
               for n in torch.randint(8, 40, (12,), generator=gen)]  # fmt: skip
    greedy = SamplingParams(48, temperature=0.0)
    models = (("tiny", torch.float32), ("25m", torch.bfloat16))
    for size, dtype in models[:1] if smoke else models:
        model = random_model(size, 0, device).to(dtype)
        key = f"{size}_{str(dtype).removeprefix('torch.')}"

        def run(
            budget: int = 65536, model: Any = model, key: str = key, **kw: Any
        ) -> list[list[int]]:
            cfg = EngineConfig(kv_budget_tokens=budget, max_num_seqs=64, device=device, **kw)
            core = EngineCore(model, cfg)
            outs = [o.token_ids for o in core.generate(prompts, greedy)]
            if core.fixed is not None:
                name = f"{key}_graphs_{budget}_{kw.get('cuda_graphs', True)}"
                out[name + (f"_rounds_{core.round_steps}" if core.round_steps > 1 else "")] = (
                    core.fixed.stats()
                )
            if core.fixed_prefill is not None:
                out[f"{key}_prefill_graphs"] = core.fixed_prefill.stats()
            return outs

        graphs = run(decode="fixed")
        eager = run(decode="fixed", cuda_graphs=False)
        dynamic = run(decode="dynamic")
        tight = run(budget=512, decode="fixed")  # 12 x ~75 tokens in 32 blocks: preemptions
        rounds = run(decode="fixed", decode_steps=8)
        rounds_tight = run(budget=512, decode="fixed", decode_steps=8)
        prefilled = run(decode="fixed", decode_steps=8, prefill_graph_tokens=64)
        with torch.inference_mode():
            hf = [model.generate(torch.tensor([p], device=device), max_new_tokens=48,
                                 min_new_tokens=48, do_sample=False, pad_token_id=0)
                  [0, len(p):].tolist() for p in prompts]  # fmt: skip

        def same(a: list[list[int]], b: list[list[int]]) -> int:
            return sum(x == y for x, y in zip(a, b, strict=True))

        out[key] = {
            "prompts": len(prompts),
            "graphs_equal_eager_fixed": same(graphs, eager),
            "graphs_equal_dynamic": same(graphs, dynamic),
            "graphs_equal_hf_generate": same(graphs, hf),
            "dynamic_equal_hf_generate": same(dynamic, hf),
            "graphs_preempted_equal_roomy": same(tight, graphs),
            "rounds_equal_graphs": same(rounds, graphs),
            "rounds_preempted_equal_graphs": same(rounds_tight, graphs),
            "prefill_graphs_equal_graphs": same(prefilled, graphs),
        }
        core = EngineCore(model, EngineConfig(device=device, decode="fixed"))
        first = core.generate(prompts[:4], greedy)
        follow = [p + o.token_ids + [7, 8, 9] for p, o in zip(prompts[:4], first, strict=True)]
        again = [o.token_ids for o in core.generate(follow, greedy)]
        fresh = [o.token_ids for o in
                 EngineCore(model, EngineConfig(device=device, decode="fixed")).generate(
                     follow, greedy)]  # fmt: skip
        out[key]["continuation_equal_fresh"] = same(again, fresh)
        graphed = EngineCore(model, EngineConfig(device=device, decode="fixed",
                                                 prefill_graph_tokens=64))  # fmt: skip
        graphed.generate(prompts[:4], greedy)
        out[key]["continuation_prefill_graphs_equal"] = same(
            [o.token_ids for o in graphed.generate(follow, greedy)], again
        )
        out[key]["prefix_cache_hits"] = core.scheduler.prefix_cache.hits
        sampled = core.generate(prompts, [SamplingParams(48, 1.0, seed=i) for i in range(12)])
        diffs = []
        with torch.inference_mode():
            for p, o in zip(prompts, sampled, strict=True):
                logits = model(torch.tensor([p + o.token_ids], device=device)).logits[0].float()
                ref = torch.log_softmax(logits[len(p) - 1 : -1], dim=-1)
                ref = ref.gather(1, torch.tensor(o.token_ids, device=device).view(-1, 1))
                diffs.append(float((ref.view(-1).cpu() - torch.tensor(o.logprobs)).abs().max()))
        out[key]["sampled_logprob_max_abs_diff"] = max(diffs)
        mixed = [SamplingParams(48, 1.0, top_p=(1.0, 0.9)[i % 2], seed=i) for i in range(12)]
        stepwise = EngineCore(model, EngineConfig(device=device, decode="fixed"))
        in_rounds = EngineCore(model, EngineConfig(device=device, decode="fixed", decode_steps=8))
        a, b = stepwise.generate(prompts, mixed), in_rounds.generate(prompts, mixed)
        out[key]["rounds_sampled_equal"] = same([o.token_ids for o in a], [o.token_ids for o in b])
        out[key]["rounds_sampled_logprob_max_abs_diff"] = max(
            abs(x - y)
            for o, q in zip(a, b, strict=True)
            for x, y in zip(o.logprobs, q.logprobs, strict=True)
        )
        checked = prefill_groups_check(model, device)
        out[key]["prefill_groups_logit_max_abs_diff"] = checked.pop("logit_max_abs_diff")
        out[key] |= checked
    return out


def prefill_groups_check(model: Any, device: str) -> dict[str, Any]:
    """One engine step that mixes decodes, fresh prompts and continuations
    (`rstar2.engine.mixed_step`) against the model's own forward over each whole sequence:
    the largest logit difference of the dynamic step's batched prefill groups (padded slots,
    lone requests, contexts of different lengths), the largest log-prob difference of the
    step's prefills of at most 32 new tokens on fixed shapes (`FixedPrefill`, a CUDA graph
    on a GPU), and the attention kernel torch chose for each kind of call (`sdpa_choices`)."""
    import torch

    from rstar2.engine.mixed_step import mixed_step
    from rstar2.engine.prefill_graphs import FixedPrefill

    def last_logits(tokens: list[int]) -> Any:
        with torch.inference_mode():
            return model(torch.tensor([tokens], device=device)).logits[0, -1].float()

    t, cache, batch = mixed_step(model, block_size=16)
    with sdpa_choices() as backends:
        logits = t.forward(batch, cache).float()
    worst = max(float((logits[row] - last_logits(req.prompt_ids)).abs().max())
                for row, (req, _) in enumerate(batch.requests))  # fmt: skip
    t, cache, batch = mixed_step(model, block_size=16)
    prefill = FixedPrefill(t, cache, 8, 512, 32, graphs=True)
    rows = [(r, n) for r, n in batch.requests if prefill.takes(n)]
    with sdpa_choices() as fixed_backends:
        drawn = prefill.prefill(rows, list(range(len(rows)))).tolist()
    fixed_worst = 0.0
    for i, (req, _) in enumerate(rows):
        ref = torch.log_softmax(last_logits(req.prompt_ids), -1)[int(drawn[0][i])]
        fixed_worst = max(fixed_worst, abs(drawn[1][i] - float(ref)))
    return {
        "logit_max_abs_diff": worst,
        "fixed_prefill_logprob_max_abs_diff": fixed_worst,
        "fixed_prefill": prefill.stats(),
        "sdpa_backends": backends | {"fixed_prefill": fixed_backends.get("continuation", [])},
    }


@contextlib.contextmanager
def sdpa_choices() -> Iterator[dict[str, list[str]]]:
    """Record, while the block runs, the kernel `scaled_dot_product_attention` chooses for each
    call (torch's own selection, `torch._fused_sdp_choice`), by kind of engine call: "decode"
    (one query per request, its heads sharing a KV head folded into the query length),
    "fresh_prefill" (causal over the prompts' own tokens), "continuation" (a mask over the
    cached contexts). On CUDA, MATH means the unfused kernel: several launches and the scores
    materialised."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend

    chosen: dict[str, list[str]] = {}
    sdpa = F.scaled_dot_product_attention

    def recording(q: Any, k: Any, v: Any, attn_mask: Any = None, is_causal: bool = False,
                  **kw: Any) -> Any:  # fmt: skip
        if is_causal:
            kind = "fresh_prefill"
        elif attn_mask is None or attn_mask.shape[-2] == 1:
            kind = "decode"
        else:
            kind = "continuation"
        try:
            name = SDPBackend(torch._fused_sdp_choice(
                q, k, v, attn_mask=attn_mask, is_causal=is_causal, **kw)).name  # fmt: skip
        except (RuntimeError, TypeError, ValueError) as exc:
            name = f"unknown ({type(exc).__name__})"
        if name not in chosen.setdefault(kind, []):
            chosen[kind].append(name)
        return sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal, **kw)

    F.scaled_dot_product_attention = recording
    try:
        yield chosen
    finally:
        F.scaled_dot_product_attention = sdpa
