"""Actor runtime: actors with typed ports, wired by ZeroMQ, run under anyio (asyncio or trio).

Public API (see docs/actors.md):
- `Actor`, `port`, `Port`, `Incoming`, `Outputs`: write an actor;
- `ActorContext`, `RemoteError`: what a custom `serve()` uses;
- `GraphConfig`, `ActorConfig`, `graph_config`, `load_graph_config`: declare a graph;
- `open_graph`, `run_graph`, `run_graph_blocking`, `GraphResult`, `RunningGraph`: run it;
- `SocketFactory`, `AsyncSocket`: the socket layer, for code outside actors.
"""

from rstar2.actors.actor import Actor, Incoming, Outputs, Port, port
from rstar2.actors.context import ActorContext
from rstar2.actors.graph import open_graph, run_graph, run_graph_blocking, stats_endpoints
from rstar2.actors.graph_config import ActorConfig, GraphConfig, graph_config, load_graph_config
from rstar2.actors.request_client import RemoteError
from rstar2.actors.running_graph import GraphResult, GraphStartError, RunningGraph
from rstar2.actors.sockets import AsyncSocket, SocketFactory

__all__ = [
    "Actor",
    "ActorConfig",
    "ActorContext",
    "AsyncSocket",
    "GraphConfig",
    "GraphResult",
    "GraphStartError",
    "Incoming",
    "Outputs",
    "Port",
    "RemoteError",
    "RunningGraph",
    "SocketFactory",
    "graph_config",
    "load_graph_config",
    "open_graph",
    "port",
    "run_graph",
    "run_graph_blocking",
    "stats_endpoints",
]
