"""No secret is logged or written to a run directory: `redact` itself, `rstar2 launch` with
CURVE keys, and `rstar2 train` with secrets planted in its environment."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import zmq

from rstar2.actors.graph_config import CurveConfig, GraphConfig, graph_config
from rstar2.actors.sockets import CurveKeys
from rstar2.redaction import REDACTED, is_secret_key, redact
from rstar2.train.config import TrainConfig, config_dict
from tests.train.conftest import SMOKE_TOML


def test_secret_values_are_redacted_and_the_rest_is_kept() -> None:
    data = {
        "curve": {"server_secret_key": "S" * 40, "server_public_key": "P" * 40},
        "api_key": "sk-1",
        "HF_TOKEN": "hf_x",
        "db-password": "pw",
        "client_secret_key": "",
        "max_response_tokens": 512,
        "eos_token": "<|im_end|>",
        "betas": (0.9, 0.99),
        "nodes": [{"token": "t"}],
    }
    assert redact(data) == {
        "curve": {"server_secret_key": REDACTED, "server_public_key": "P" * 40},
        "api_key": REDACTED,
        "HF_TOKEN": REDACTED,
        "db-password": REDACTED,
        "client_secret_key": "",  # empty: shows that it is not set
        "max_response_tokens": 512,
        "eos_token": "<|im_end|>",
        "betas": (0.9, 0.99),
        "nodes": [{"token": REDACTED}],
    }
    assert data["api_key"] == "sk-1"  # the argument is not changed
    assert not is_secret_key("kv_budget_tokens") and is_secret_key("access_token")


def test_a_graph_config_is_redacted_and_curve_keys_do_not_print() -> None:
    public, secret = (k.decode() for k in zmq.curve_keypair())
    cfg = GraphConfig([], curve=CurveConfig(public, secret, public, secret))
    assert secret not in str(redact(cfg)) and public in str(redact(cfg))
    assert secret not in repr(CurveKeys(public, secret, public, secret))


def test_the_train_config_has_no_key_that_reads_as_secret() -> None:
    """A false positive would write "<redacted>" into RUN/config.json and break resume."""
    data = config_dict(TrainConfig())
    assert redact(data) == data


GRAPH = """
[graph]
name = "secrets{pid}"
edges = ["source.out -> sink.in"]
hosts = {{ local = "127.0.0.1" }}

[graph.curve]
server_public_key = "{server_public}"
server_secret_key = "{server_secret}"
client_public_key = "{client_public}"
client_secret_key = "{client_secret}"

[[graph.actors]]
name = "source"
cls = "rstar2.actors.demo:Source"
params = {{ n = 20 }}
process = "producer"

[[graph.actors]]
name = "sink"
cls = "rstar2.actors.demo:Sink"
params = {{ n = 20 }}
process = "consumer"
"""


@pytest.mark.slow
def test_launch_logs_no_curve_secret(tmp_path: Path) -> None:
    server_public, server_secret = (k.decode() for k in zmq.curve_keypair())
    client_public, client_secret = (k.decode() for k in zmq.curve_keypair())
    text = GRAPH.format(
        pid=os.getpid(),
        server_public=server_public,
        server_secret=server_secret,
        client_public=client_public,
        client_secret=client_secret,
    )
    path = tmp_path / "graph.toml"
    path.write_text(text)
    assert graph_config(tomllib.loads(text)).curve.keys() is not None
    out = subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "-v", "launch", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "graph config:" in out.stderr and server_public in out.stderr  # it was logged
    for secret in (server_secret, client_secret):
        assert secret not in out.stderr and secret not in out.stdout


@pytest.mark.slow
def test_train_writes_no_planted_secret_to_its_run_directory(tmp_path: Path) -> None:
    secret = "hf_PLANTED" + "x" * 30
    config = tmp_path / "smoke.toml"
    config.write_text(SMOKE_TOML)
    run = tmp_path / "run"
    env = {**os.environ, "HF_TOKEN": secret, "RSTAR2_API_KEY": secret, "AWS_SECRET": secret}
    out = subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "-v", "train", "--config", str(config),
         "--run-dir", str(run), "--set", "sft.steps=0",
         "--set", 'stages=[{"name": "rl1", "steps": 1}]'],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert secret not in out.stderr and secret not in out.stdout
    files = [p for p in run.rglob("*") if p.is_file()]
    assert any(p.name == "config.json" for p in files)
    leaked = [p for p in files if secret.encode() in p.read_bytes()]
    assert not leaked, leaked
