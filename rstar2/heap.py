"""The process's garbage-collected heap: frozen while RL steps run, so collections skip it.

A trainer process holds about 450,000 objects that the garbage collector tracks once torch,
transformers and the actors are imported and the models built, and nearly all of them live
for the whole run. CPython's full collections walk every one of them: measured on the
`gpu_20m` rollout settings on this project's 2-core CPU (`docs/production.md`, issue 31),
a full collection took 0.4 s and two came in every ten RL steps, with the interpreter lock
held, so the event loop and the engine's thread both stood still. `gc.freeze()` (the
standard library's) moves every tracked object into a permanent generation that collections
do not walk; vLLM does the same once its engine has started (`freeze_gc_heap`).

- `freeze`: collect first (what is garbage now would otherwise stay frozen for good), then
  freeze; returns how many objects are frozen. The learner actor calls it as the RL steps
  begin (`EnterPhase("rl")`), when the graph has started and the policy is loaded.
- `thaw`: put the frozen objects back under collection (`gc.unfreeze()`), when the run
  ends, so that a process running several trainings (`rstar2 experiment`, the tests) can
  reclaim one run's objects after it.

What it does not do: tune the collector's thresholds or disable it (objects made during the
run are still collected as usual).
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)


def freeze() -> int:
    """Collect, then freeze every tracked object; the number now frozen."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug("heap: %d objects frozen in %.2fs", frozen, time.perf_counter() - started)
    return frozen


def thaw() -> None:
    """Return the frozen objects to the collector's oldest generation."""
    gc.unfreeze()
