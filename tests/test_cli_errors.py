"""The CLI's error boundary: every subcommand, given bad input, prints one line on stderr (no
traceback) and exits with the documented code (rstar2/cli.py; docs/usage.md, "Exit codes and
errors"): 2 for bad input, 130 for Ctrl-C, 141 for a closed stdout, 1 with the traceback for a
bug. Commands run in this process (`rstar2.cli.main`), except the closed pipe."""

from __future__ import annotations

import argparse
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from matplotlib.figure import Figure

from rstar2 import cli
from rstar2.cli import main
from rstar2.commands import sim as sim_command
from rstar2.commands.arguments import HelpFormatter
from rstar2.commands.bench import TargetParser
from rstar2.train.runner import TrainingInterrupted
from tests.stand_in_model import stand_in_model

# placeholders in argv: {missing} a path that does not exist, {dir} an empty directory, {file} a
# text file, {bad_yaml}/{bad_toml}/{bad_jsonl}/{bad_json} files that do not parse, {q_jsonl}
# problems under fields no default names, {model} a directory with a model's files that do not load,
# {config_only} one with a config.json only,
# {empty_graph} a launch file with an empty [graph] table
CASES: list[tuple[str, int]] = [
    ("--bogus", 2),
    ("no-such-command", 2),
    # train
    ("train --config {missing}.toml", 2),
    ("train --config {bad_yaml}", 2),
    ("train --config {bad_toml}", 2),
    ("train --config {dir}", 2),
    ("train --processes x", 2),
    ("train --algo nope", 2),
    ("train --run-dir {file}", 2),
    ("train --resume {missing}", 2),
    ("train --resume {dir}", 2),
    ("train --set stages.x.steps=1", 2),
    ("train --set nope=1", 2),
    ("train --quick --dry-run --set data={q_jsonl}", 2),  # issue 34 row 3
    ("train --quick --run-dir {dir}/never --set data={q_jsonl}", 2),
    ("train --quick --run-dir {full}", 2),
    ("train --quick --set model.path={config_only}", 2),
    ("train --quick --dry-run --set model.path={config_only}", 2),
    # eval, chat
    ("eval --data {file}", 2),
    ("eval --model {dir} --data {file} --samples x", 2),
    ("eval --model {missing} --data {file}", 2),
    ("eval --model {file} --data {file}", 2),
    ("chat --model {dir}", 2),
    ("eval --model {model} --data {q_jsonl}", 2),
    ("eval --model {model} --data {dir}", 2),  # issue 34 row 10
    ("eval --model {model} --data {q_jsonl} --problem-field q --answer-field sol", 2),  # row 6
    ("chat --model {model} hi", 2),  # files that do not load (tests/model/test_loader.py: more)
    # analyze
    ("analyze {file}", 2),
    ("analyze {file} --model {dir}", 2),
    ("analyze {file} --model {missing}", 2),
    # init-model
    ("init-model {file}", 2),
    ("init-model {dir}/m --config {missing}.toml", 2),
    ("init-model {dir}/m --config {bad_toml}", 2),
    ("init-model {dir}/m --seed x", 2),
    # convert
    ("convert", 2),
    ("convert gguf {missing}.gguf {dir}/out", 2),
    ("convert gguf {file} {dir}/out", 2),
    ("convert checkpoint {missing} {dir}/out", 2),
    ("convert checkpoint {dir} {dir}/out", 2),
    ("train --resume {bad_run}", 2),
    # sandbox
    ("sandbox", 2),
    ("sandbox exec --config {missing}.toml", 2),
    ("sandbox exec --config {bad_toml}", 2),
    ("sandbox exec --concurrency 0", 2),
    ("sandbox serve", 2),
    ("sandbox serve --bind garbage", 2),
    ("sandbox serve --bind ipc://{dir}/s.sock --curve-keys {missing}.json", 2),
    ("sandbox bench --seconds 0", 2),
    ("sandbox exec --no-bwrap --require-isolation", 2),
    ("sandbox serve --bind ipc:///nonexistent-rstar2-dir/s.sock", 2),
    ("sandbox bench --sweep a,b", 2),
    ("sandbox bench --burst -1", 2),
    # reward
    ("reward", 2),
    ("reward verify --workers 0", 2),
    ("reward verify --timeout -5", 2),
    # sim
    ("sim --trace {missing}.jsonl", 2),
    ("sim --trace {dir}", 2),
    ("sim --trace {bad_jsonl}", 2),
    ("sim --prompts 0", 2),
    ("sim --gpus abc", 2),
    ("sim --tp -1", 2),
    ("sim --tp 3 --gpus 4", 2),
    ("sim --calibration {missing}.json", 2),
    ("sim compare --rollouts 0", 2),
    ("sim bound --sigma -1", 2),
    ("sim calibrate", 2),
    ("sim calibrate --points {missing}.json", 2),
    ("sim calibrate --points {bad_json}", 2),
    ("sim calibrate --points {file}", 2),
    ("sim calibrate --engine --model-dir {dir}", 2),
    ("sim calibrate --threads 0", 2),
    ("sim calibrate --points {empty_list}", 2),
    ("sim calibrate --points {header_csv}", 2),
    # bench
    ("bench", 2),
    ("bench engine --kv-budget 16 --requests 2", 2),
    ("bench learner --peak-tflops -1", 2),
    ("bench bus --messages 1", 2),
    ("bench bus --transports carrier-pigeon", 2),
    ("bench bus --busy-thread --switch-intervals-ms 5,0", 2),
    ("bench bus --busy-thread --switch-intervals-ms fast", 2),
    ("bench engine --model {dir}", 2),
    ("bench engine --requests 0", 2),
    ("bench engine --batch-sizes a", 2),
    ("bench train --steps 1", 2),
    ("bench train --model {missing}", 2),
    ("bench learner --steps 0", 2),
    ("bench learner --model {file}", 2),
    ("bench learner --trace {file} --steps 1", 2),
    ("bench learner --trace {empty} --steps 1", 2),
    # profile
    ("profile --steps 0", 2),
    ("profile --timeout 0", 2),
    ("profile --overhead --repeats 0", 2),
    ("profile --graph {missing}.toml", 2),
    ("profile --config {bad_toml}", 2),
    ("profile --model {dir}", 2),
    ("profile --model {config_only}", 2),
    ("profile --steps 1 --out {dir}/prof --set model.path={config_only}", 2),
    ("bench train --model {config_only}", 2),
    ("bench learner --model {config_only}", 2),
    ("bench engine --model {config_only}", 2),
    ("profile --synthetic reward --sft", 2),
    # top, launch
    ("top --interval 0 --once", 2),
    ("top --endpoint garbage --once", 2),
    ("top --once --interval 0.01 --endpoint ipc://{missing}/stats.sock", 2),  # issue 34 row 13
    ("launch {missing}.toml", 2),
    ("launch {dir}", 2),
    ("launch {bad_yaml}", 2),
    ("launch {train_toml}", 2),
    ("launch {empty_graph}", 2),
]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("cli-errors")
    (root / "dir").mkdir()
    files = {
        "file": "hello\n",
        "bad.yaml": "a: [b\n",
        "bad.toml": "x = \n",
        "bad.jsonl": "not json\n",
        "bad.json": "{not json",
        "q.jsonl": '{"q": "1+1?", "sol": 2}\n',
        "empty_graph.toml": "[graph]\n",
        "cuda.toml": '[engine]\ndevice = "cuda"\n',
        "empty_list.json": "[]\n",
        "header.csv": "prefill_tokens,decode_tokens,seconds\n",
        "empty": "",
        "bad_row.jsonl": '{"problem": "1+1", "answer": 2}\n{"problem": "1+2"\n',
    }
    for name, text in files.items():
        (root / name).write_text(text)
    stand_in_model(root / "model")  # every file a model needs, none that loads
    (root / "config_only").mkdir()
    (root / "config_only" / "config.json").write_text("{}")
    (root / "no_tokenizer").mkdir()
    (root / "no_tokenizer" / "config.json").write_text("{}")
    (root / "no_tokenizer" / "model.safetensors").write_text("")
    (root / "bad_config").mkdir()
    (root / "bad_config" / "config.json").write_text("{not json")
    damaged = root / "bad_run" / "checkpoints" / "step-000001"  # a run whose checkpoint broke
    damaged.mkdir(parents=True)
    (damaged / "state.pt").write_bytes(b"\x80\x02not a pickle")
    (damaged / "meta.json").write_text('{"step": 1}')
    (damaged.parent / "LATEST").write_text("step-000001\n")
    (root / "bad_run" / "config.json").write_text("{}")
    (root / "full").mkdir()
    (root / "full" / "notes.txt").write_text("mine\n")
    return {
        "q_jsonl": str(root / "q.jsonl"),
        "model": str(root / "model"),
        "config_only": str(root / "config_only"),
        "no_tokenizer": str(root / "no_tokenizer"),
        "bad_config": str(root / "bad_config"),
        "full": str(root / "full"),
        "bad_run": str(root / "bad_run"),
        "empty_graph": str(root / "empty_graph.toml"),
        "cuda_toml": str(root / "cuda.toml"),
        "empty_list": str(root / "empty_list.json"),
        "header_csv": str(root / "header.csv"),
        "empty": str(root / "empty"),
        "bad_row": str(root / "bad_row.jsonl"),
        "missing": str(root / "missing"),
        "dir": str(root / "dir"),
        "file": str(root / "file"),
        "bad_yaml": str(root / "bad.yaml"),
        "bad_toml": str(root / "bad.toml"),
        "bad_jsonl": str(root / "bad.jsonl"),
        "bad_json": str(root / "bad.json"),
        "train_toml": str(Path(__file__).parent.parent / "configs" / "gpu_20m.toml"),
    }


def _run(argv: list[str]) -> int:
    """main's exit code, whether it returns it or raises SystemExit (argparse)."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1


@pytest.mark.parametrize(("line", "code"), CASES)
def test_bad_input_is_one_line_and_its_exit_code(
    line: str, code: int, paths: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["-q", *line.format(**paths).split()]
    assert _run(argv) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rstar2"), err


# (argv, what the one line says): plain wording naming the flag or key (issue 34 rows 3, 10, 12)
WORDING: list[tuple[str, list[str]]] = [
    ("train --quick --dry-run --set data={q_jsonl}",
     ["config key 'data'", "missing field 'problem' (the row's fields: q, sol)",
      "data_format.problem_field"]),
    ("eval --model {model} --data {q_jsonl}",
     ["argument --data:", "missing field 'problem'", "--problem-field"]),
    ("eval --model {model} --data {dir}", ["argument --data:", "(Is a directory"]),
    ("chat --model {dir} hi",
     ["argument --model:", "has no config.json: not a model, checkpoint or run directory"]),
    ("train --quick --set model.path={dir}",
     ["model.path", "has no config.json: not a Hugging Face model directory"]),
    ("analyze {file} --model {model} --out {file}", ["argument --out: not a directory"]),
    # a flag that would have no effect: refused, not ignored
    ("sim run --trace-step 2", ["--trace-step is for --trace"]),
    ("sim run --learner-metrics {file}", ["--learner-metrics is for --trace"]),
    ("sim compare --policy round_robin", ["unrecognized arguments: --policy round_robin"]),
    ("sim compare-staleness --max-staleness 2", ["unrecognized arguments: --max-staleness 2"]),
    # ... and before the action, where the top-level parser takes them
    ("sim --policy round_robin compare", ["--policy: `sim compare` sets it itself"]),
    ("sim --max-staleness 2 compare-staleness", ["--max-staleness: `sim compare-staleness`"]),
    ("sim calibrate --engine --points {file}", ["--engine measures its own steps"]),
    ("sim calibrate --points {file} --save-points {dir}/p", ["--save-points: with --engine only"]),
    ("sandbox bench --api code-judge", ["--api is for --http"]),
    ("bench bus --switch-intervals-ms 1", ["--switch-intervals-ms is for --busy-thread"]),
    ("bench engine --kv-budget 16 --requests 2", ["max_model_len 16 (its KV budget): a larger KV"]),
    ("bench learner --peak-tflops -1", ["argument --peak-tflops: expected a number >= 0"]),
    ("bench bus --messages 1", ["argument --messages: expected an integer >= 2, got '1'"]),
    ("sim run --trace {missing}.jsonl", ["argument --trace:", "No such file or directory"]),
    ("sim run --trace {q_jsonl}", ["argument --trace:", "q.jsonl:1: not a trajectory record (no "
                                   "field 'turns'; a rollout_trace.jsonl record has"]),
    ("view {dir} --token-file {missing}", ["argument --token-file:", "No such file or directory"]),
    ("sandbox serve --http 127.0.0.1:0 --token-file {dir}", ["argument --token-file:",
                                                            "Is a directory"]),
    ("convert gguf {dir} {dir}/out", ["is a directory: expected a .gguf file"]),
    ("launch {train_toml}", ["is a training config", "run it with `rstar2 train --config"]),
    ("launch {empty_graph}", ["config key 'graph.actors' is missing: expected a list of tables"]),
    ("train --processes 0", ["argument --processes"]),
    ("train --quick --dry-run --set stages.0.steps=0", ["config key 'stages[0].steps': got 0"]),
    ("bench engine --decode-steps 0", ["argument --decode-steps: got 0"]),  # EngineConfig's
    ("bench engine --prefill-graphs 1 --decode fixed", ["argument --prefill-graphs: got 1"]),
    ("sandbox serve --bind tcp://0.0.0.0:1", ["--bind tcp://0.0.0.0:1", "needs --curve-keys"]),
    ("init-model {file}", ["argument DIR:", "expected a directory (this is a file)"]),
    ("sim run --tp 3 --prompts 4", ["argument --tp: got 3"]),  # SimConfig fields by their flag
    ("sim run --learner-mfu 2 --prompts 4", ["argument --learner-mfu: got 2.0"]),
    ("sim bound --overload-factor 0.5 --prompts 4", ["argument --overload-factor: got 0.5"]),
    ("sim run --kv-tokens 100 --prompts 4", ["argument --kv-tokens: got 96", "may reach"]),
    ("sim run --kv-tokens 100 --prompts 4 --steps 2", ["argument --kv-tokens", "may reach"]),
    ("sim compare --out-dir {file}", ["argument --out-dir: not a directory"]),  # row 9
    ("sim compare-staleness --out-dir {file}/x", ["argument --out-dir: cannot write"]),
    ("sim compare --out-dir /sys/rstar2-sim", ["argument --out-dir: cannot write"]),  # row 8
    ("sandbox exec --no-bwrap --require-isolation", ["require_isolation is set", "bwrap"]),
    ("sandbox serve --bind ipc:///nonexistent-rstar2-dir/s.sock",
     ["cannot bind ipc:///nonexistent-rstar2-dir/s.sock: No such file or directory"]),
    ("sim calibrate --points {empty_list}", ["--points:", "holds 0 measured step(s)"]),
    ("bench learner --trace {empty} --steps 1", ["argument --trace", "holds no trajectories"]),
    ("eval --model {model} --data {bad_row}", ["line 2: invalid JSON: Expecting ',' delimiter at "
                                               "column 18"]),
    ("train --resume {bad_run}", ["step-000001 does not load (UnpicklingError",
                                  "an earlier one of the run"]),
    # the flags of the (sub)command they were given to, whose --help lists them
    ("train --bogus", ["rstar2 train: error: unrecognized arguments: --bogus",
                       "(see rstar2 train --help)"]),
    ("sim compare --bogus 1", ["rstar2 sim compare: error: unrecognized arguments: --bogus 1",
                               "(see rstar2 sim compare --help)"]),
    ("--bogus", ["rstar2: error: unrecognized arguments: --bogus (see rstar2 --help)"]),
    # a model directory without what loading it needs: named before any work
    ("chat --model {config_only} hi", ["argument --model:", "has no weights file"]),
    ("eval --model {no_tokenizer} --data {q_jsonl}", ["argument --model:", "has no tokenizer"]),
    ("analyze {file} --model {bad_config}", ["argument --model:", "config.json does not read"]),
    ("train --quick --set model.path={config_only}", ["config key 'model.path'", "no weights file"]),
    ("train --quick --run-dir {full}", ["argument --run-dir", "a new or empty directory"]),
]  # fmt: skip


@pytest.mark.parametrize(("line", "words"), WORDING)
def test_the_error_names_the_flag_or_key_in_plain_words(
    line: str, words: list[str], paths: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["-q", *line.format(**paths).split()]) == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err, err
    assert "config key '-" not in err and "__init__" not in err


def test_a_bad_training_file_leaves_no_run_directory(
    paths: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = f"{paths['dir']}/never"
    assert (
        _run(["-q", "train", "--quick", "--run-dir", run_dir, "--set", f"data={paths['q_jsonl']}"])
        == 2
    )
    assert not os.path.exists(run_dir)


CUDA_WITHOUT_GPU = [
    "bench engine --device cuda --requests 2",
    "bench learner --device cuda --steps 1",
    "analyze {file} --model {model} --device cuda",
    "chat --model {model} --config {cuda_toml} hi",  # before the model (which cannot) loads
    "learner-rank --rendezvous tcp://127.0.0.1:1 --rank 1 --world 2 --device cuda",
]


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a GPU here")
@pytest.mark.parametrize("line", CUDA_WITHOUT_GPU)
def test_cuda_without_a_gpu_is_one_line_naming_the_flag_or_key(
    line: str, paths: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["-q", *line.format(**paths).split()]) == 2
    err = capsys.readouterr().err
    # the last line (in this process transformers, imported earlier, may draw a loading bar)
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith("rstar2"), err
    assert "got 'cuda'" in last and "no GPU on this machine" in last, err
    assert ("config key 'engine.device'" if "--config" in line else "argument --device") in err


def test_a_model_path_that_cannot_load_leaves_no_run_directory(
    paths: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = f"{paths['dir']}/never-model"
    argv = [
        "-q",
        "train",
        "--quick",
        "--run-dir",
        run_dir,
        "--set",
        f"model.path={paths['config_only']}",
    ]
    assert _run(argv) == 2
    assert not os.path.exists(run_dir)  # before: its config.json, which then refused a rerun
    assert sorted(os.listdir(paths["full"])) == ["notes.txt"]


def test_sim_checks_its_out_dir_before_simulating(
    paths: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 34 row 9: compare simulated every policy first, then failed on "File exists"
    def no_simulation(*args: object) -> None:
        raise AssertionError("simulated before checking --out-dir")

    monkeypatch.setattr(sim_command, "simulate", no_simulation)
    monkeypatch.setattr(sim_command, "simulate_run", no_simulation)
    for action in ("compare", "compare-staleness"):
        assert _run(["-q", "sim", action, "--out-dir", paths["file"]]) == 2
        assert "not a directory" in capsys.readouterr().err


def test_a_command_that_fails_after_making_its_out_dir_leaves_none_behind(
    paths: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # analyze makes --out to check it, then finds the trajectories file is not one
    out = tmp_path / "new" / "analysis"
    argv = ["-q", "analyze", paths["file"], "--model", paths["model"], "--out", str(out)]
    assert _run(argv) == 2
    assert "expected a trajectories file" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    # a directory that was there before stays
    assert _run([*argv[:-1], paths["dir"]]) == 2 and os.path.isdir(paths["dir"])
    # sim compare and compare-staleness: a trajectory that cannot fit the KV cache
    for action in ("compare", "compare-staleness"):
        out = tmp_path / action
        assert _run(["-q", "sim", action, "--out-dir", str(out), "--kv-tokens", "100"]) == 2
        assert "--kv-tokens" in capsys.readouterr().err
        assert not out.exists()


def test_a_full_disk_is_one_line_and_leaves_no_half_written_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 34 row 8
    def full(self: Figure, path: object, **kwargs: object) -> None:
        Path(str(path)).write_bytes(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(Figure, "savefig", full)
    argv = ["-q", "sim", "compare", "--out-dir", str(tmp_path / "out"), "--scenario",
            "short-uniform", "--prompts", "2", "--rollouts", "2", "--gpus", "2"]  # fmt: skip
    assert _run(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("rstar2 sim: error: No space left on device: ") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()  # no half-written plot, nor the emptied directory


def test_a_task_groups_one_bad_input_error_is_that_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 34 row 8: a full disk under eval's task group printed a 117-line ExceptionGroup
    full = OSError(errno.ENOSPC, "No space left on device", "out.jsonl")
    group = ExceptionGroup("unhandled", [ExceptionGroup("inner", [full])])
    monkeypatch.setattr(cli, "_load", lambda name: _Raising(group))
    assert cli.run_command(argparse.Namespace(command="eval")) == 2
    assert capsys.readouterr().err == "rstar2 eval: error: No space left on device: out.jsonl\n"
    two = ExceptionGroup("two", [full, RuntimeError("a bug")])
    monkeypatch.setattr(cli, "_load", lambda name: _Raising(two))
    with pytest.raises(ExceptionGroup):
        cli.run_command(argparse.Namespace(command="eval"))


def test_ctrl_c_is_exit_code_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_load", lambda name: _Raising(KeyboardInterrupt()))
    assert cli.run_command(argparse.Namespace(command="sim")) == 130
    assert capsys.readouterr().err == "rstar2 sim: interrupted\n"


def test_ctrl_c_while_the_command_module_imports_is_exit_code_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # build_parser imports the chosen command's module for its flags (torch: seconds): a
    # Ctrl-C then was a KeyboardInterrupt traceback and death by SIGINT
    def interrupted(name: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_load", interrupted)
    assert main(["sim", "--prompts", "1"]) == 130
    assert capsys.readouterr().err == "rstar2 sim: interrupted\n"


def test_ctrl_c_while_a_bench_target_module_imports_is_exit_code_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a `bench` target's module (torch) is imported when the command line is parsed
    def interrupted(parser: TargetParser) -> TargetParser:
        raise KeyboardInterrupt

    monkeypatch.setattr(TargetParser, "with_flags", interrupted)
    assert main(["bench", "engine"]) == 130
    assert capsys.readouterr().err == "rstar2 bench: interrupted\n"


def run_program(source: str) -> subprocess.CompletedProcess[str]:
    """Python `source` run as a program of its own (its exit code, stdout and stderr)."""
    return subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=60
    )


INTERRUPTED_PROGRAM = """
import atexit, sys
from rstar2 import cli

class Freed:
    def __del__(self):
        print("freed", file=sys.stderr, flush=True)

class Interrupted:  # a command module whose run is interrupted
    def add_arguments(parser):
        pass

    def run(args):
        print("written before")  # to a pipe: buffered
        raise KeyboardInterrupt

kept = Freed()
atexit.register(lambda: print("exit handler", file=sys.stderr, flush=True))
cli._load = lambda name: Interrupted
sys.argv = ["rstar2", "sim"]
sys.exit(cli.main())
"""


def test_an_interrupted_program_ends_without_the_interpreters_teardown() -> None:
    # after Ctrl-C the teardown freed torch's and the model's objects one by one: seconds of
    # garbage collection, most of the 5.0-5.7 s from Ctrl-C to exit of `convert`, `bench
    # train` and `experiment` at load 2-4 (issue 34: within 5 s)
    done = run_program(INTERRUPTED_PROGRAM)
    assert done.returncode == 130, done.stderr
    assert done.stdout == "written before\n"
    assert done.stderr.splitlines() == ["rstar2 sim: interrupted", "exit handler"], done.stderr


SWALLOWED_PROGRAM = """
import sys, time
from rstar2 import cli

class Finalised:
    def __del__(self):  # as if the Ctrl-C arrived while the garbage collector ran this
        raise KeyboardInterrupt

class Working:  # a command module whose Ctrl-C landed in a finaliser
    def add_arguments(parser):
        pass

    def run(args):
        Finalised()
        time.sleep(5)  # the rest of its work
        print("finished")
        return 0

cli._load = lambda name: Working
sys.argv = ["rstar2", "chat"]
sys.exit(cli.main())
"""


def test_a_ctrl_c_that_a_finaliser_swallowed_still_stops_the_command() -> None:
    # `rstar2 chat` Ctrl-C'd while `regex` freed a pattern at import printed "Exception
    # ignored in: <function Group.__del__ ...>" with a traceback, answered, and exited 0
    done = run_program(SWALLOWED_PROGRAM)
    assert (done.returncode, done.stdout) == (130, ""), done.stderr
    assert done.stderr == "rstar2 chat: interrupted\n"


def test_a_training_run_that_a_signal_stopped_is_exit_code_130_or_143(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `experiment` and `bench train` let run_training's TrainingInterrupted through: it was a
    # RuntimeError, a traceback and exit code 1
    for name, code in (("SIGINT", 130), ("SIGTERM", 143)):
        error = TrainingInterrupted(name, 2)
        monkeypatch.setattr(cli, "_load", lambda _, error=error: _Raising(error))
        assert cli.run_command(argparse.Namespace(command="experiment")) == code
        assert capsys.readouterr().err == "rstar2 experiment: interrupted\n"


def test_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_load", lambda name: _Raising(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):
        cli.run_command(argparse.Namespace(command="sim"))


class _Raising:
    """A command module whose run raises `error`."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def run(self, args: argparse.Namespace) -> int:
        raise self.error


def test_a_closed_stdout_exits_quietly_with_141() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rstar2.cli", "sim", "bound", "--gpus", "1", "--prompts", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `| head -1` does once it has its line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == ""


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["--version"]) == 0
    assert capsys.readouterr().out.startswith("rstar2 ")


HELPS = [
    "train", "eval", "chat", "init-model", "convert gguf", "sandbox exec", "sandbox serve",
    "sandbox bench", "reward verify", "sim", "sim compare", "sim bound", "sim calibrate",
    "bench bus", "bench engine", "bench train", "bench learner", "profile", "top", "launch",
]  # fmt: skip


@pytest.mark.parametrize("command", HELPS)
def test_help_is_the_commands_own_and_shows_defaults_without_none(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run([*command.split(), "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: rstar2 {command} ")
    assert "(default: None)" not in out


LIGHT_REFUSALS = [
    "eval --model {model} --data {file} --samples -3",
    "eval --model {model} --data {file} --concurrency 0",
    "eval --model {model} --data {missing}",
    "eval --model {model} --data {q_jsonl} --problem-field q --answer-field sol --out {dir}",
    "chat --model {model} --max-turns 0 hi",
    "chat --model {model} --temperature -1 hi",
]


@pytest.mark.parametrize("line", LIGHT_REFUSALS)
def test_eval_and_chat_refuse_bad_input_before_the_heavy_imports(
    line: str, paths: dict[str, str]
) -> None:
    # issue 34 row 11: `--samples -3` was refused only after 5-7 s of importing torch
    argv = ["-q", *line.format(**paths).split()]
    code = (
        "import sys; from rstar2.cli import main\n"
        f"try:\n    code = main({argv!r})\nexcept SystemExit as e:\n    code = e.code\n"
        "print(code, 'torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.splitlines()[-1] == "2 False False", out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.parametrize("command", ["eval", "chat"])
def test_every_option_of_eval_and_chat_shows_its_default(command: str) -> None:
    # issue 34 row 16: --max-tokens, --max-turns, --temperature, --tool-timeout showed none
    parser = cli.build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    formatter = HelpFormatter(command)
    for action in sub.choices[command]._actions:
        if action.option_strings and action.nargs != 0 and not action.required:
            text = formatter._get_help_string(action) or ""
            assert "default" in text, action.option_strings


def test_sim_help_shows_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["sim", "compare", "--help"]) == 0
    assert "GPUs in the cluster (default: 64)" in capsys.readouterr().out


def test_sim_options_before_the_action_are_kept() -> None:
    parser = cli.build_parser("sim")
    args = parser.parse_args(["sim", "--gpus", "8", "compare", "--seed", "3"])
    assert (args.action, args.gpus, args.seed, args.out_dir) == ("compare", 8, 3, "sim-out")
    assert parser.parse_args(["sim"]).action == "run"
