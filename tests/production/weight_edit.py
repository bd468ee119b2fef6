"""A closed-form weight edit for the vLLM weight-update tests: teach the tiny model one output.

Used by test_vllm_engine.py (file updates) and test_vllm_broadcast.py (broadcast updates).
"""

from __future__ import annotations

import torch


def memorise(model, token_ids: list[int], loss_mask: list[int]) -> None:
    """Edit the last MLP's down projection so greedy decoding reproduces the model tokens of one
    trajectory (closed form, instant; training on a busy CPU takes minutes).

    The last layer's MLP output at position t is W a_t, added to the residual r_t; nothing after
    it mixes positions, and the final RMSNorm and the tied LM head make the next token
    argmax_j E_j . (g * x_t) for residual x_t (scale-free). So ask for x_t = E_y / g (each token
    is its own nearest embedding in this model) and solve dW a_t = x_t - r_t for every trained
    position by least squares: exact while the positions (< 512) have independent a_t.
    """
    mlp = model.model.layers[-1].mlp
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        mlp.down_proj.register_forward_hook(
            lambda mod, args, out: seen.update(a=args[0][0], mlp=out[0])
        ),
        model.model.layers[-1].register_forward_hook(
            lambda mod, args, out: seen.update(h=(out[0] if isinstance(out, tuple) else out)[0])
        ),
    ]
    ids = torch.tensor([token_ids])
    with torch.no_grad():
        model(ids)
        for hook in hooks:
            hook.remove()
        at = torch.tensor(loss_mask[1:], dtype=torch.bool).nonzero().squeeze(-1)  # predicts t+1
        targets = ids[0, at + 1]
        emb = model.get_input_embeddings().weight
        residual = (seen["h"] - seen["mlp"])[at]
        want = emb[targets] / model.model.norm.weight
        want = want * (residual.norm(dim=-1, keepdim=True) / want.norm(dim=-1, keepdim=True))
        delta = torch.linalg.lstsq(seen["a"][at].double(), (want - residual).double()).solution
        mlp.down_proj.weight += delta.T.float()
        logits = model(ids).logits[0]
    assert bool((logits[at].argmax(-1) == targets).all())
