"""Stage-0 SFT saves the demonstrations it trained on with the run (issue 29)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from rstar2.train.config import load_train_config
from rstar2.train.runner import prepare_policy, sft_traces


def test_sft_saves_the_demonstrations_it_trained_on(tmp_path: Path) -> None:
    sets = ["sft.steps=2", "sft.train_problems=8", "sft.mistake_fraction=0.5"]
    cfg = load_train_config(None, quick=True, sets=sets)
    sft_dir = prepare_policy(cfg, tmp_path)
    demos = sft_dir / "demos.jsonl"
    lines = demos.read_text().splitlines()
    info = json.loads((sft_dir / "sft.json").read_text())["demos"]
    assert info == {"count": 8, "sha256": hashlib.sha256(demos.read_bytes()).hexdigest()}
    assert [json.loads(line)["messages"] for line in lines] == sft_traces(cfg)
    assert any("Fixing it" in m["content"] or "fix it" in m["content"]
               for line in lines for m in json.loads(line)["messages"])  # fmt: skip
