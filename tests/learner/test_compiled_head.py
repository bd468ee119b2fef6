"""The chunked LM head with its element-wise work compiled (`learner.compile_head`): the plain
functions `chunk_stats` / `chunk_logit_grad` against the full logits' log-softmax, the head's
autograd path through them (eager, exact in float64), and the compiled head (inductor on the
CPU) in float32 and bf16."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from rstar2.learner import logprob_head
from rstar2.learner.learner_config import LearnerConfig
from rstar2.learner.logprob_head import (
    LogprobHead,
    chunk_logit_grad,
    chunk_stats,
    chunked_logprobs,
)
from rstar2.learner.model_preparation import prepare_model
from tests.engine.factories import tiny_qwen2

HAS_CXX = any(shutil.which(c) for c in ("g++", "c++", "clang++"))


def reference(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor):
    logp_all = F.log_softmax((hidden @ weight.t()).double(), dim=-1)
    logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    return logp, -(logp_all.exp() * logp_all).sum(-1)


def inputs(dtype: torch.dtype, tokens: int = 13, vocab: int = 50, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, 8, generator=g, dtype=dtype).requires_grad_()
    weight = (torch.randn(vocab, 8, generator=g, dtype=dtype) / 2).requires_grad_()
    targets = torch.randint(0, vocab, (tokens,), generator=g)
    g_logp = torch.randn(tokens, generator=g, dtype=dtype)
    g_ent = torch.randn(tokens, generator=g, dtype=dtype)
    return hidden, weight, targets, g_logp, g_ent


def grads(logp, ent, g_logp, g_ent, wrt, with_entropy: bool):
    loss = (logp * g_logp).sum() + ((ent * g_ent).sum() if with_entropy else 0)
    return torch.autograd.grad(loss, wrt, retain_graph=True)


@pytest.mark.parametrize("with_entropy", [True, False])
def test_chunk_functions_equal_the_full_log_softmax(with_entropy: bool) -> None:
    """`chunk_stats` and `chunk_logit_grad`, eager in float64, against autograd through the
    reference log-softmax of the chunk's logits."""
    z = torch.randn(6, 40, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 40, (6,))
    g_logp, g_ent = torch.randn(6, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    logp_all = F.log_softmax(z, dim=-1)
    ref_logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    ref_ent = -(logp_all.exp() * logp_all).sum(-1)

    logp, ent, lse = chunk_stats(z.detach(), targets)
    torch.testing.assert_close(logp, ref_logp.detach())
    torch.testing.assert_close(ent, ref_ent.detach())
    torch.testing.assert_close(lse, torch.logsumexp(z.detach(), -1))
    g_z = chunk_logit_grad(z.detach(), targets, lse, ent, g_logp, g_ent if with_entropy else None)
    (want,) = grads(ref_logp, ref_ent, g_logp, g_ent, (z,), with_entropy)
    torch.testing.assert_close(g_z, want)


@pytest.mark.parametrize("chunk", [1, 4, 64])
@pytest.mark.parametrize("with_entropy", [True, False])
def test_head_through_the_chunk_functions_equals_the_reference(
    monkeypatch: pytest.MonkeyPatch, chunk: int, with_entropy: bool
) -> None:
    """The compiled path's autograd plumbing (saved log-sum-exp and entropy, chunking, the
    last short chunk) with the functions left eager: exact in float64."""
    monkeypatch.setattr(logprob_head, "_compiled", lambda fn: fn)
    hidden, weight, targets, g_logp, g_ent = inputs(torch.float64)
    logp, ent = chunked_logprobs(hidden, weight, targets, chunk, compiled=True)
    ref_logp, ref_ent = reference(hidden, weight, targets)
    torch.testing.assert_close(logp, ref_logp)
    torch.testing.assert_close(ent, ref_ent)
    got = grads(logp, ent, g_logp, g_ent, (hidden, weight), with_entropy)
    want = grads(ref_logp, ref_ent, g_logp, g_ent, (hidden, weight), with_entropy)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)


CUDA = pytest.param(
    "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_CXX, reason="torch.compile on the CPU needs a C++ compiler")
@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_head_equals_the_reference(device: str, dtype: torch.dtype) -> None:
    """Compiled by inductor (C++ on the CPU, Triton on a GPU), chunks of 5 over 13 positions
    (a short last chunk: dynamic shapes), with and without the entropy's gradient."""
    hidden, weight, targets, g_logp, g_ent = inputs(torch.float32)
    h, w = hidden.to(device, dtype), weight.to(device, dtype)
    logp, ent = chunked_logprobs(h, w, targets.to(device), 5, compiled=True)
    ref_logp, ref_ent = reference(hidden, weight, targets)
    assert logp.dtype == ent.dtype == torch.float32
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 0.05, "rtol": 0.02}
    torch.testing.assert_close(logp.cpu().double(), ref_logp, **tol)
    torch.testing.assert_close(ent.cpu().double(), ref_ent, **tol)
    for with_entropy in (True, False):
        got = grads(logp, ent, g_logp.to(device), g_ent.to(device), (hidden, weight), with_entropy)
        want = grads(
            ref_logp, ref_ent, g_logp.double(), g_ent.double(), (hidden, weight), with_entropy
        )
        for a, b in zip(got, want, strict=True):
            err = float((a.double() - b).norm() / b.norm())
            assert err < (1e-5 if dtype == torch.float32 else 0.02), (with_entropy, err)


def test_prepare_model_compiles_the_head_only_when_asked() -> None:
    """`learner.compile_head` reaches the installed head (its default, None: off on the CPU)."""
    model = tiny_qwen2()
    prepare_model(model, LearnerConfig())
    assert isinstance(model.lm_head, LogprobHead) and not model.lm_head.compiled
    prepare_model(model, LearnerConfig(compile_head=True))
    assert model.lm_head.compiled
