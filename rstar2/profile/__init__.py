"""Profiling of actor graphs: Chrome traces, per-actor load, the bottleneck, live counters.

Public API (commands: `rstar2 profile`, `rstar2 top`):
- `record_graph` / `record_graph_blocking`: run a graph with tracing on -> (GraphResult,
  Recording);
- `Recording`, `Counter`, `Edge`: what a run collected (`extras_from_result` reads the extra
  tracks, counters and step rows a graph hands back in `result["profile"]`);
- `chrome_trace`, `write_chrome_trace`, `check_chrome_trace`: the Perfetto trace;
- `actor_loads`, `ActorLoad`: busy / idle / blocked / other shares, rates, queue depths;
- `find_bottleneck`, `Bottleneck`: the rule (see `bottleneck.py`);
- `build_report`, `report_json`, `format_report`, `Report`;
- `measure_overhead_blocking`, `Overhead`: tracing on vs off;
- `poll_stats`, `live_rows`: what `rstar2 top` shows;
- `synthetic_graph`: a sleep-based train-shaped graph with a chosen actor slowed.
"""

from rstar2.profile.actor_load import ActorLoad, actor_loads
from rstar2.profile.bottleneck import Bottleneck, find_bottleneck
from rstar2.profile.chrome_trace import check_chrome_trace, chrome_trace, write_chrome_trace
from rstar2.profile.live_view import live_rows, poll_stats
from rstar2.profile.overhead import Overhead, measure_overhead_blocking
from rstar2.profile.recording import Counter, Edge, Recording, extras_from_result
from rstar2.profile.report import Report, build_report, format_report, report_json
from rstar2.profile.synthetic import synthetic_graph
from rstar2.profile.workload import record_graph, record_graph_blocking

__all__ = [
    "ActorLoad",
    "Bottleneck",
    "Counter",
    "Edge",
    "Overhead",
    "Recording",
    "Report",
    "actor_loads",
    "build_report",
    "check_chrome_trace",
    "chrome_trace",
    "extras_from_result",
    "find_bottleneck",
    "format_report",
    "live_rows",
    "measure_overhead_blocking",
    "poll_stats",
    "record_graph",
    "record_graph_blocking",
    "report_json",
    "synthetic_graph",
    "write_chrome_trace",
]
