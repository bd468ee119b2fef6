"""`op_profile.summarise`: torch.profiler's rows as the update's top operations and FSDP2's
work by phase."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from torch.autograd import DeviceType

from rstar2.learner.op_profile import (
    busy_ms,
    compile_report,
    device_busy,
    fsdp_phase,
    summarise,
)


def row(
    key: str, count: int, self_cpu: float, cpu: float, self_dev: float = 0.0, dev: float = 0.0,
    device_type: DeviceType = DeviceType.CPU, annotation: bool = False,
):  # fmt: skip
    return SimpleNamespace(
        key=key, count=count, self_cpu_time_total=self_cpu, cpu_time_total=cpu,
        self_device_time_total=self_dev, device_time_total=dev, device_type=device_type,
        is_user_annotation=annotation,
    )  # fmt: skip


def kernel(key: str, count: int, ms: float, annotation: bool = False) -> SimpleNamespace:
    """A row of the device's own events: its time is also on the operation that launched it."""
    return row(key, count, 0.0, 0.0, ms * 1e3, ms * 1e3, DeviceType.CUDA, annotation)


ROWS = [
    row("aten::mm", 10, 3000.0, 3000.0, self_dev=9000.0, dev=9000.0),
    row("aten::mul", 40, 5000.0, 5000.0, self_dev=1000.0, dev=1000.0),
    row("aten::copy_", 8, 100.0, 100.0, self_dev=2000.0, dev=2000.0),
    row("FSDP::pre_forward (model.layers.0)", 4, 800.0, 1200.0, dev=500.0),
    row("FSDP::pre_forward (model.layers.1)", 4, 700.0, 1000.0, dev=400.0),
    row("FSDP::pre_forward", 4, 100.0, 150.0),
    row("FSDP::backward_prefetch for model.layers.1", 4, 50.0, 60.0),
    row("Optimizer.step#AdamW.step", 1, 9000.0, 12000.0),
    kernel("sm90_gemm_bf16", 10, 9.0),
    kernel("elementwise_kernel<mul>", 40, 1.0),
    kernel("Memcpy DtoD (Device -> Device)", 8, 2.0),
    kernel("FSDP::pre_forward (model.layers.0)", 4, 0.5, annotation=True),  # a range, on the GPU
]


def test_fsdp_phases_drop_the_module_they_name() -> None:
    assert fsdp_phase("FSDP::pre_forward (model.layers.3)") == "FSDP::pre_forward"
    assert fsdp_phase("FSDP::backward_prefetch for model.layers.2") == "FSDP::backward_prefetch"
    assert fsdp_phase("FSDP::root_pre_forward") == "FSDP::root_pre_forward"


def test_the_top_operations_by_device_time_leave_out_annotated_ranges() -> None:
    got = summarise(ROWS, on_device=True, top=2)
    assert [op["name"] for op in got["ops"]] == ["aten::mm", "aten::copy_"]
    assert got["ops"][0] == {
        "name": "aten::mm", "calls": 10, "self_cpu_ms": 3.0, "self_device_ms": 9.0
    }  # fmt: skip
    # on the CPU, by self CPU time (the optimizer's range is not an operation)
    on_cpu = summarise(ROWS, on_device=False, top=3)
    assert [op["name"] for op in on_cpu["ops"]] == ["aten::mul", "aten::mm", "aten::copy_"]


def test_fsdp2_work_is_summed_by_phase_over_modules() -> None:
    got = summarise(ROWS, on_device=True)["fsdp"]
    assert list(got) == ["FSDP::pre_forward", "FSDP::backward_prefetch"]  # most CPU first
    assert got["FSDP::pre_forward"]["calls"] == 12
    assert got["FSDP::pre_forward"]["cpu_ms"] == pytest.approx(2.35)
    assert got["FSDP::pre_forward"]["device_ms"] == pytest.approx(0.9)


def test_totals_count_each_kernel_once() -> None:
    got = summarise(ROWS, on_device=True)
    assert got["cpu_ms"] == pytest.approx(18.75)
    # the kernels' own rows: not the operations that carry their time too, nor a GPU range
    assert got["device_ms"] == pytest.approx(12.0)


def test_busy_time_is_the_union_of_the_kernels_intervals() -> None:
    assert busy_ms([]) == 0.0
    assert busy_ms([(0.0, 1000.0), (3000.0, 4000.0)]) == pytest.approx(2.0)
    # overlapping (two streams) and nested intervals count once; order does not matter
    assert busy_ms([(500.0, 2000.0), (0.0, 1000.0), (600.0, 700.0)]) == pytest.approx(2.0)
    assert busy_ms([(0.0, 1000.0), (1000.0, 1500.0)]) == pytest.approx(1.5)


def test_device_busy_reads_the_device_work_among_the_events() -> None:
    def event(kind: SimpleNamespace, start: float, end: float) -> SimpleNamespace:
        return SimpleNamespace(**vars(kind), time_range=SimpleNamespace(start=start, end=end))

    host, gpu, gpu_range = row("aten::mm", 1, 0, 0), kernel("gemm", 1, 0), kernel("r", 1, 0, True)
    events = [
        event(host, 0.0, 10_000.0),  # the host's op spans the whole call: not device work
        event(gpu, 1_000.0, 3_000.0),
        event(gpu, 2_000.0, 4_000.0),
        event(gpu_range, 0.0, 10_000.0),  # an annotation on the GPU's timeline: not work either
    ]
    got = device_busy(events, wall_ms=10.0)
    assert got["device_busy_ms"] == pytest.approx(3.0)
    assert got["device_idle_share"] == pytest.approx(0.7)


def test_the_compile_report_counts_graphs_and_breaks_by_their_first_line() -> None:
    counters = {
        "stats": {"unique_graphs": 5, "calls_captured": 40},
        "frames": {"total": 9, "ok": 7},
        "graph_break": {
            "Data dependent operator\n  Explanation: tolist": 4,
            "Data dependent operator\n  Explanation: item": 2,
            "HOP: Unsafe side effect\n  Higher Order Operator: checkpoint": 1,
        },
        # what dynamo could not trace or the backend could not compile: counted here only
        "unimplemented": {"Backend compiler exception\n  Explanation: inductor failed": 1},
        "inductor": {"cudagraph_skips": 3, "cudagraph_recorded_non_static_inputs": 8},
    }
    assert compile_report(counters) == {
        "graphs": 5,
        "graph_breaks": {
            "Data dependent operator": 6,
            "HOP: Unsafe side effect": 1,
            "Backend compiler exception": 1,
        },
        "frames": {"total": 9, "ok": 7},
        "cudagraph_skips": 3,  # graphs reduce-overhead ran without CUDA graphs
    }
    assert compile_report({}) == {
        "graphs": 0, "graph_breaks": {}, "frames": {"total": 0, "ok": 0}, "cudagraph_skips": 0
    }  # fmt: skip
