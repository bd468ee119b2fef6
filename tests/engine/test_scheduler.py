"""Scheduling decisions, without a model: admission, growth, preemption and finishing."""

from __future__ import annotations

from rstar2.engine.protocol import SamplingParams
from rstar2.engine.request import Request
from rstar2.engine.scheduler import Scheduler


def make_request(rid: str, prompt_len: int, max_tokens: int = 100, arrival: int = 0) -> Request:
    return Request(rid, list(range(prompt_len)), SamplingParams(max_tokens, 0.0), arrival)


def make_scheduler(num_blocks: int = 4, max_num_seqs: int = 8, budget: int = 1000) -> Scheduler:
    return Scheduler(num_blocks, 4, max_num_seqs, budget, max_model_len=1000)


def run_step(sched: Scheduler, token: int = 7) -> list[Request]:
    result = sched.schedule()
    n = len(result.scheduled)
    return sched.update(result.scheduled, [token] * n, [0.0] * n)


def test_new_requests_prefill_their_prompt_then_decode_one_token() -> None:
    sched = make_scheduler()
    sched.add(make_request("a", 5))
    first = sched.schedule()
    assert [(r.request_id, n) for r, n in first.scheduled] == [("a", 5)]
    sched.update(first.scheduled, [1], [0.0])
    second = sched.schedule()
    assert [(r.request_id, n) for r, n in second.scheduled] == [("a", 1)]
    assert len(second.scheduled[0][0].blocks) == 2  # 6 tokens in blocks of 4


def test_newest_running_request_is_preempted_when_blocks_run_out() -> None:
    sched = make_scheduler(num_blocks=4)
    old, new = make_request("old", 8), make_request("new", 8)
    sched.add(old)
    sched.add(new)
    run_step(sched)  # both admitted: 2 blocks each, pool empty
    assert sched.pool.num_free == 0
    result = sched.schedule()  # "old" needs a 3rd block: "new" must go
    assert result.preempted == [new]
    assert [r.request_id for r, _ in result.scheduled] == ["old"]
    assert new.num_computed == 0 and new.blocks == [] and sched.waiting[0] is new
    assert sched.preemptions == 1


def test_preempted_request_is_recomputed_with_its_generated_tokens() -> None:
    sched = make_scheduler(num_blocks=4)
    old, new = make_request("old", 8, max_tokens=2), make_request("new", 8)
    sched.add(old)
    sched.add(new)
    run_step(sched)
    sched.update(sched.schedule().scheduled, [9], [0.0])  # "new" preempted, "old" finishes
    assert old.finish_reason == "length"
    result = sched.schedule()
    assert [(r.request_id, n) for r, n in result.scheduled] == [("new", 9)]
    assert sched.recomputed_tokens == 8


def test_no_admission_in_a_step_that_preempted() -> None:
    sched = make_scheduler(num_blocks=4)
    a, b = make_request("a", 8), make_request("b", 8)
    sched.add(a)
    sched.add(b)
    run_step(sched)
    sched.add(make_request("c", 1))
    result = sched.schedule()
    assert result.preempted == [b]
    assert [r.request_id for r, _ in result.scheduled] == ["a"]
    assert [r.request_id for r in sched.waiting] == ["b", "c"]


def test_admission_is_first_come_first_served_and_capped() -> None:
    sched = make_scheduler(num_blocks=3, max_num_seqs=2)
    for rid, n in (("big", 12), ("small", 1), ("third", 1)):
        sched.add(make_request(rid, n))
    result = sched.schedule()
    assert [r.request_id for r, _ in result.scheduled] == ["big"]  # "small" waits behind it
    sched.update(result.scheduled, [1], [0.0])
    assert [r.request_id for r in sched.waiting] == ["small", "third"]


def test_token_budget_limits_prefill_but_admits_one_long_prompt_alone() -> None:
    sched = make_scheduler(num_blocks=100, budget=10)
    sched.add(make_request("long", 30))
    sched.add(make_request("short", 3))
    first = sched.schedule()
    assert [r.request_id for r, _ in first.scheduled] == ["long"]


def test_stop_token_finishes_and_frees_blocks() -> None:
    sched = make_scheduler()
    req = Request("a", [1, 2], SamplingParams(10, 0.0, stop_token_ids=(5,)), 0)
    sched.add(req)
    assert run_step(sched, token=3) == []
    assert run_step(sched, token=5) == [req]
    assert req.finish_reason == "stop" and req.output_ids == [3, 5]
    assert sched.pool.num_free == 4 and not sched.has_unfinished()


def test_abort_removes_running_or_waiting_requests() -> None:
    sched = make_scheduler(max_num_seqs=1)
    sched.add(make_request("run", 2))
    sched.add(make_request("wait", 2))
    run_step(sched)
    assert sched.abort("wait") is not None
    aborted = sched.abort("run")
    assert aborted is not None and aborted.finish_reason == "abort"
    assert sched.abort("missing") is None
    assert sched.pool.num_free == 4 and not sched.has_unfinished()
