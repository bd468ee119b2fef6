"""The learner rendezvous address: one parser, and the config and the CLI refuse alike."""

from __future__ import annotations

import pytest

from rstar2.cli import main
from rstar2.config import ConfigError, from_dict
from rstar2.rendezvous import parse_rendezvous
from rstar2.train.cluster_config import ClusterConfig


@pytest.mark.parametrize(
    ("address", "parsed"),
    [
        ("tcp://10.0.0.5:29500", ("10.0.0.5", 29500)),
        ("tcp://node-1.cluster:1", ("node-1.cluster", 1)),
        ("tcp://[::1]:65535", ("::1", 65535)),
    ],
)
def test_a_rendezvous_is_host_and_port(address: str, parsed: tuple[str, int]) -> None:
    assert parse_rendezvous(address) == parsed


BAD = [
    ("tcp://host", "no PORT"),
    ("tcp://host:0", "no PORT"),
    ("tcp://host:http", "Port could not be cast"),
    ("tcp://host:70000", "out of range"),
    ("tcp://:29500", "no HOST"),
    ("host:29500", "the scheme is tcp://"),
    ("http://host:29500", "the scheme is tcp://"),
    ("tcp://host:29500/rank0", "something after PORT"),
]


@pytest.mark.parametrize(("address", "why"), BAD)
def test_a_bad_rendezvous_says_what_is_wrong(address: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_rendezvous(address)


@pytest.mark.parametrize(("address", "why"), BAD)
def test_the_train_config_refuses_what_the_parser_refuses(address: str, why: str) -> None:
    with pytest.raises(ConfigError, match=f"cluster.learner_rendezvous.*{why}"):
        from_dict(ClusterConfig, {"learner_rendezvous": address})
    assert from_dict(ClusterConfig, {"learner_rendezvous": ""}).learner_rendezvous == ""


@pytest.mark.parametrize(("address", "why"), BAD[:2])
def test_learner_rank_refuses_it_in_one_line_before_joining(
    address: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # rank and world given, so nothing but the address can be wrong; a parse that let it
    # through would try to join a group (and fail in torch, not with exit code 2)
    code = main(["learner-rank", "--rendezvous", address, "--rank", "1", "--world", "2"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert why in err and address in err
    assert len(err.splitlines()) == 1
