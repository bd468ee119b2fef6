"""`rstar2 sim calibrate --engine`: the simulator's fidelity check on the embedded CPU engine.

Fits the cost model to the engine's measured steps (`sim.fidelity`), predicts a different
workload's makespan on that engine and reports the error. Its own module because it needs torch
and the engine, which the rest of `rstar2 sim` does not (`rstar2.commands.sim` loads this one
only for this action).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from rstar2.config import to_dict
from rstar2.engine.benchmark import tiny_random_model
from rstar2.engine.core import load_causal_lm
from sim.fidelity import fidelity
from sim.report import key_value_table


def run(args: argparse.Namespace) -> int:
    """Run the fidelity check with `sim calibrate`'s parsed arguments; print its report."""
    model = load_causal_lm(args.model_dir) if args.model_dir else tiny_random_model()
    r = fidelity(model, threads=args.threads)
    if args.save_points:
        Path(args.save_points).write_text(
            json.dumps([dataclasses.asdict(p) for p in r.calibration.steps], indent=0)
        )
    report = {
        "fit": to_dict(r.cost),
        "calibration_steps": len(r.calibration.steps),
        "fit_step_error": round(r.fit_step_error, 4),
        "check_measured_s": round(r.check.makespan_s, 3),
        "check_predicted_s": round(r.predicted_makespan_s, 3),
        "makespan_error": round(r.makespan_error, 4),
        "check_preemptions": r.check.preemptions,
        "predicted_preemptions": r.predicted_preemptions,
    }
    print(json.dumps(report, indent=2) if args.json else key_value_table(report))
    return 0
