"""Feasibility check of the embedded default: SFT the tiny model, then measure held-out accuracy.

Builds the tiny model (`init_model`), runs SFT with the given budget, then evaluates with a
small multi-turn loop of its own on the HF model (not the package's agent loop): generate until
`</tool_call>` or the end of the turn, run the code with `python -I -c`, append the tool
response, continue (max 3 assistant turns). Reports greedy accuracy, temperature-1 pass@1 over
K samples and the share of problems whose K samples have mixed rewards (what RL needs).

    .venv/bin/python scripts/sft_feasibility.py --steps 600 --out /tmp/feas
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from rstar2.learner.sft import encode_examples, train_sft
from rstar2.learner.sft_config import SFTConfig
from rstar2.model.chat_format import render_prompt, tool_response_ids
from rstar2.model.loader import load_model
from rstar2.model.tiny import init_model
from rstar2.model.tiny_config import TinyModelConfig
from rstar2.model.tokenizer import special_token_ids
from rstar2.tasks import TaskConfig, build_traces, generate_problems

log = logging.getLogger("feasibility")
CALL = re.compile(r"<tool_call>\s*(\{.*\})\s*</tool_call>\s*$", re.S)
ERR = re.compile(r'File "<string>", line (\d+).*?\n(\w+(?:Error|Exception)\w*): (.*)$', re.S)


def run_tool(call_text: str) -> str:
    """Tool response text for one generated call, like the embedded default's formatter."""
    match = CALL.search(call_text)
    if match is None:
        return "Tool call failure\ninvalid JSON: no call"
    try:
        call = json.loads(match.group(1))
        code = call["arguments"]["code"]
        assert isinstance(code, str)
    except (json.JSONDecodeError, KeyError, TypeError, AssertionError) as e:
        return f"Tool call failure\ninvalid JSON: {e}"
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=5
        )
    except subprocess.TimeoutExpired:
        return "Tool call failure\ntimeout\n"
    if proc.returncode == 0:
        return f"Tool call success\n{proc.stdout[:200]}"
    m = ERR.search(proc.stderr.strip())
    if m is None:
        return f"Tool call failure\nerror\n{proc.stdout[:200]}{proc.stderr[-200:]}"
    line = int(m.group(1))
    src = code.splitlines()[line - 1].strip() if 0 < line <= len(code.splitlines()) else ""
    err = f"{m.group(2)} at line {line}: {m.group(3)}\n    {src}\n"
    return f"Tool call failure\nerror\n{proc.stdout[:200]}{err}"


def answer_of(text: str) -> str | None:
    ans = re.findall(r"<answer>(.*?)</answer>", text, re.S)
    boxed = re.findall(r"\\boxed\{([^{}]*)\}", ans[-1] if ans else text)
    return boxed[-1].strip() if boxed else None


@torch.no_grad()
def rollouts(model, tok, problems, temperature: float, samples: int, max_new: int = 64):
    """Texts of `samples` rollouts per problem (batched HF generate, one call per turn)."""
    special = special_token_ids(tok)
    rows = [
        (i, render_prompt(tok, problems[i].problem))
        for i in range(len(problems))
        for _ in range(samples)
    ]
    ids = [r[1] for r in rows]
    texts = ["" for _ in rows]
    active = list(range(len(rows)))
    for _turn in range(3):
        if not active:
            break
        width = max(len(ids[i]) for i in active)
        batch = torch.full((len(active), width), special.eos, dtype=torch.long)
        attn = torch.zeros_like(batch)
        for r, i in enumerate(active):
            batch[r, width - len(ids[i]) :] = torch.tensor(ids[i])
            attn[r, width - len(ids[i]) :] = 1
        out = model.generate(
            input_ids=batch,
            attention_mask=attn,
            max_new_tokens=max_new,
            do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else None,
            top_k=None,
            top_p=None,
            eos_token_id=list(special.stop_ids),
            pad_token_id=special.eos,
        )[:, width:]
        still = []
        for r, i in enumerate(active):
            new = out[r].tolist()
            cut = next((k for k, t in enumerate(new) if t in special.stop_ids), None)
            new = new if cut is None else new[: cut + 1]
            text = tok.decode(new)
            texts[i] += text
            ids[i] = ids[i] + new
            if cut is not None and new[-1] == special.tool_call_end:
                response = run_tool(text)
                ids[i] += tool_response_ids(tok, response)
                texts[i] += f"[TOOL:{response}]"
                still.append(i)
        active = still
    return [(rows[k][0], texts[k]) for k in range(len(rows))]


def evaluate(model, tok, problems, temperature: float, samples: int) -> dict[str, float]:
    correct = [0] * len(problems)
    outs = []
    for start in range(0, len(problems), 32):
        chunk = problems[start : start + 32]
        for i, text in rollouts(model, tok, chunk, temperature, samples):
            ok = answer_of(text) == chunk[i].answer
            correct[start + i] += ok
            outs.append(text)
    mixed = sum(0 < c < samples for c in correct) / len(problems)
    return {"acc": sum(correct) / (samples * len(problems)), "mixed": mixed, "example": outs[0]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=SFTConfig.steps)
    ap.add_argument("--batch", type=int, default=SFTConfig.batch_size)
    ap.add_argument("--lr", type=float, default=SFTConfig.lr)
    ap.add_argument("--hidden", type=int, default=TinyModelConfig.hidden_size)
    ap.add_argument("--layers", type=int, default=TinyModelConfig.num_layers)
    ap.add_argument("--max-digits", type=int, default=TaskConfig.max_digits)
    ap.add_argument("--heldout", type=int, default=100)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--out", default="/tmp/feasibility")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 on a shared box)")
    ap.add_argument("--eval-at", default="", help="comma-separated steps for a greedy check")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    mcfg = replace(TinyModelConfig(), hidden_size=args.hidden, num_layers=args.layers)
    scfg = replace(SFTConfig(), steps=args.steps, batch_size=args.batch, lr=args.lr)
    task = replace(TaskConfig(), max_digits=args.max_digits, heldout_size=args.heldout)
    path = init_model(Path(args.out) / "model", mcfg)
    model, tok = load_model(path)
    traces = build_traces(generate_problems(task, "train"), scfg.seed, scfg.mistake_fraction)
    examples = encode_examples(tok, traces)
    t0 = time.perf_counter()
    held = generate_problems(task, "heldout")
    eval_at = {int(s) for s in args.eval_at.split(",") if s}

    def check(step: int) -> None:
        if step in eval_at:
            model.eval()
            acc = evaluate(model, tok, held[:50], 0.0, 1)["acc"]
            log.info("step %d greedy acc on 50 held-out: %.2f", step, acc)
            model.train()

    res = train_sft(model, examples, scfg, special_token_ids(tok).eos, on_step=check)
    log.info("sft %.1fs, %d loss tokens, final loss %.4f", res.seconds, res.tokens, res.losses[-1])
    model.save_pretrained(Path(args.out) / "sft")
    tok.save_pretrained(Path(args.out) / "sft")
    t1 = time.perf_counter()
    greedy = evaluate(model, tok, held, 0.0, 1)
    sampled = evaluate(model, tok, held, 1.0, args.samples)
    report = {
        "sft_s": round(t1 - t0, 1),
        "eval_s": round(time.perf_counter() - t1, 1),
        "greedy_acc": greedy["acc"],
        "t1_pass1": sampled["acc"],
        "t1_mixed_groups": sampled["mixed"],
        "params": sum(p.numel() for p in model.parameters()),
        "args": vars(args),
    }
    print(greedy["example"])
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
