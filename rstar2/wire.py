"""The wire protocol: every message that crosses a ZeroMQ socket, as a typed msgpack struct.

One module for all of it (vLLM v1 `serial_utils` style):
- every message is a `msgspec.Struct` subclass of `Message`, array-like (compact: fields by
  position) with an explicit small integer tag that must be unique; a single decoder for the
  tagged union of all registered kinds turns bytes back into the right class or raises
  `WireError` (never pickle, never `eval`);
- components append their messages in a section of their own below, each decorated with
  `@register`;
- tensors travel as separate zero-copy frames (`rstar2.frames`: how a message becomes ZeroMQ
  frames, and how small ones are packed together), never inside msgpack.

What it does not do: transport, retries or size limits (the actor runtime enforces the limit).
"""

from __future__ import annotations

from typing import Any, TypeVar, Union, get_args

import msgspec
import numpy as np

M = TypeVar("M", bound="Message")


class WireError(ValueError):
    """Bytes that do not decode into a known message."""


class Message(msgspec.Struct, array_like=True, omit_defaults=True, tag_field="t"):
    """Base of every message. Subclasses must pass `tag=<unique int>` in the class statement."""


_REGISTRY: dict[int, type[Message]] = {}
_version = 0
"""Bumped by every `register`: decoders built from the registry (here and in
`rstar2.frames`) are rebuilt when it changed."""
_decoder: msgspec.msgpack.Decoder | None = None
_encoder = msgspec.msgpack.Encoder()


def register(cls: type[M]) -> type[M]:
    """Class decorator: add a message kind to the decodable union (tags must be unique ints)."""
    global _decoder
    tag = cls.__struct_config__.tag
    if not isinstance(tag, int):
        raise TypeError(f"{cls.__name__} needs an explicit integer tag")
    if tag in _REGISTRY and _REGISTRY[tag] is not cls:
        raise TypeError(f"tag {tag} of {cls.__name__} is taken by {_REGISTRY[tag].__name__}")
    _REGISTRY[tag] = cls
    global _version
    _version += 1
    _decoder = None
    return cls


def encode(msg: Message) -> bytes:
    return _encoder.encode(msg)


encode_body = _encoder.encode
"""`encode` without the call around it, for the runtime's per-message path; raises TypeError
for a message with array fields (those go through `to_frames`)."""


def decode(data: bytes | memoryview) -> Message:
    """Decode one message; anything malformed or unknown raises WireError."""
    global _decoder
    if _decoder is None:
        _decoder = msgspec.msgpack.Decoder(message_union())
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise WireError(str(e)) from None


def message_union() -> Any:
    """The tagged union of every registered message kind (what the decoders decode)."""
    return Union[tuple(_REGISTRY.values())]  # noqa: UP007 - runtime union of classes


def registry_version() -> int:
    """Changes whenever a message kind is registered."""
    return _version


# --- runtime (tags 1-19) -------------------------------------------------------------------


@register
class Hello(Message, tag=1):
    """Sent by a child process when its actors are wired; answered by Ready."""

    process: str
    actors: list[str]


@register
class Ready(Message, tag=2):
    process: str


@register
class Shutdown(Message, tag=3):
    reason: str = ""


@register
class ActorFailed(Message, tag=4):
    """An actor raised: its instance name, the traceback text and whether it will be restarted."""

    actor: str
    traceback: str
    restarting: bool = False
    restarts: int = 0


@register
class StopGraph(Message, tag=5):
    """An actor asked the whole graph to stop; `result` is any msgpack-able value it hands back."""

    actor: str
    reason: str = ""
    result: Any = None


class ActorStats(msgspec.Struct, array_like=True, omit_defaults=True):
    """Counters of one actor instance (cumulative since the graph started)."""

    actor: str
    process: str
    received: int = 0
    sent: int = 0
    handled: int = 0
    malformed: int = 0
    oversized: int = 0
    restarts: int = 0
    busy_s: float = 0.0
    wait_s: float = 0.0
    blocked_s: float = 0.0
    queue_depth: int = 0
    alive: bool = True
    reply_s: float = 0.0
    """Time with at least one of its requests waiting for the service's reply."""


class Span(msgspec.Struct, array_like=True):
    """One traced interval: kind is "handle", "wait" (for input), "blocked" (on output) or
    "reply" (one or more of its requests awaiting a service's reply)."""

    actor: str
    kind: str
    start: float
    end: float
    port: str = ""
    queue_depth: int = 0


@register
class StatsRequest(Message, tag=6):
    """Ask a graph (or one process of it) for counters, and spans when `spans` is true."""

    spans: bool = False


@register
class StatsReply(Message, tag=7):
    process: str
    actors: list[ActorStats]
    spans: list[Span] = []


@register
class ActorFinished(Message, tag=8):
    """An actor's serve() returned normally (the graph ends when every actor has)."""

    actor: str


@register
class Item(Message, tag=10):
    """A generic numbered payload, used by the demo actors, the tests and `rstar2 bench bus`."""

    seq: int
    value: int = 0
    payload: bytes = b""
    sent_at: float = 0.0


# --- sandbox (tags 20-39) ------------------------------------------------------------------

EXEC_STATUSES = ("ok", "error", "timeout", "memory", "output_limit", "killed", "rejected")


@register
class ExecRequest(Message, tag=20):
    """Run `code` once with `stdin`; limits of None take the server's defaults (and are capped)."""

    id: str
    code: str
    stdin: str = ""
    timeout_s: float | None = None
    memory_mb: int | None = None
    seed: int | None = None
    """The caller's seed for this call (the agent loop sends its turn seed): keys the
    sandbox's seeded fault injection (`sandbox.fault_rate`, `rstar2.sandbox.faults`), so a
    rerun meets the same faults whatever the timing; None: the request id keys it instead."""


@register
class ExecResult(Message, tag=21):
    """Exactly one per ExecRequest. `status` is one of EXEC_STATUSES; `exit_code` is -signal
    when the process died by a signal; `truncated` marks output cut at the server's cap.
    `infra` is empty when the status is the code's own doing (it ran, or was refused for its
    size), else a short reason naming the infrastructure failure behind it ("queue_full",
    "sandbox_died", "no_sandbox", "transport_timeout", ...): the trajectory that made the call
    is then not trained on (`Trajectory.infra_failure`; the table in docs/usage.md)."""

    id: str
    status: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    wall_s: float = 0.0
    truncated: bool = False
    infra: str = ""


@register
class ExecCancel(Message, tag=22):
    """Kill a running or queued request; its result (status `killed`) is still sent."""

    id: str


@register
class SandboxPing(Message, tag=23):
    """Liveness probe from a sandbox client; the service answers SandboxPong at once."""

    seq: int


@register
class SandboxPong(Message, tag=24):
    """A sandbox service's answer to SandboxPing, with its load (requests admitted, not done)."""

    seq: int
    outstanding: int = 0
    capacity: int = 0


# --- reward (tags 60-69) ---------------------------------------------------------------------


@register
class VerifyRequest(Message, tag=60):
    """Parent -> verifier worker: is `extracted` equivalent to `reference` (math-verify)?"""

    id: int
    extracted: str
    reference: str
    timeout_s: float


@register
class VerifyReply(Message, tag=61):
    """Verifier worker -> parent, one per VerifyRequest. `status`: "equal", "unequal",
    "timeout" (the worker's own alarm fired) or "error" (`message` says why)."""

    id: int
    status: str
    message: str = ""


@register
class VerifierReady(Message, tag=62):
    """Sent once by a verifier worker when its imports are done and it reads requests."""

    pid: int


@register
class RewardResult(Message, tag=63):
    """The outcome of scoring one response: `reward` 0.0 or 1.0, the extracted answer (None when
    there was none), `status` one of "ok", "no_answer", "timeout", "error", and a `message`
    saying what went wrong for "error"."""

    reward: float
    extracted: str | None
    status: str
    message: str = ""


# --- train: learner <-> scheduler <-> rollout workers <-> reward (tags 70-89) -----------------


class EngineLoad(msgspec.Struct, array_like=True, frozen=True):
    """A snapshot of one rollout engine's load: the one record every engine (embedded, vLLM,
    simulated) reports and every scheduling policy reads. Not a message of its own: it travels
    inside `EngineReport`, `TurnEnded` and `TrajectoryResult`."""

    kv_capacity_tokens: int
    """Tokens the engine's KV cache holds when full."""
    kv_free_tokens: int
    """Tokens of KV cache free right now."""
    running: int
    """Requests decoding."""
    waiting: int
    """Requests queued for KV blocks (submitted, not yet running)."""
    preemptions: int = 0
    """Cumulative count of requests evicted from the KV cache."""
    recomputed_tokens: int = 0
    """Cumulative tokens prefilled again because their request had been preempted."""
    generated_tokens: int = 0
    """Cumulative sampled tokens."""
    steps: int = 0
    """Cumulative engine steps (the embedded engine; 0 where an engine does not count them)."""
    step_s: float = 0.0
    """Cumulative wall seconds inside engine steps (the rest of the time it had nothing to run)."""
    wait_s: float = 0.0
    """Of `step_s`, the host's wait for the device in each step's one transfer (the embedded
    engine's fixed-shape path; `rstar2.engine.core.StepClock`)."""
    round_steps: int = 0
    """Of `steps`, those run inside rounds of several decode steps (`engine.decode_steps`)."""
    prefill_steps: int = 0
    """Of `steps`, those that prefilled a prompt or a continuation."""
    prefill_s: float = 0.0
    """Of `step_s`, the seconds of the `prefill_steps`."""


@register
class RolloutTask(Message, tag=70):
    """One trajectory to roll out (learner -> scheduler -> a rollout worker)."""

    traj_id: str
    prompt_id: str
    sample: int
    step: int
    prompt_ids: list[int]
    answer: str
    seed: int
    kind: str = "train"  # "train" | "eval" | "filter"
    temperature: float = 1.0
    max_response_tokens: int = 0  # 0 = the worker's configured budget
    max_turns: int = 0  # 0 = the worker's configured limit
    prompt: int = -1
    """The prompt's index in its batch (`prompt_id`'s number; -1: not in a batch): what the
    learner groups results by, never parsed back out of `prompt_id`."""


class Trajectory(msgspec.Struct, array_like=True, omit_defaults=True):
    """A finished rollout: the agent loop's record (`rstar2.rollout.trajectory` builds it turn
    by turn and its docstring says what each counter counts). `token_ids`, `loss_mask` and
    `logprobs` have the same length. Not a message of its own: it travels inside
    `TrajectoryResult`, and evaluation scores it in place."""

    prompt_id: str
    sample: int
    token_ids: list[int]
    loss_mask: list[int]
    """1 for a sampled token, 0 for a prompt or forced (tool response) token."""
    logprobs: list[float]
    """The behaviour policy's logprob of each token (0.0 where masked)."""
    prompt_len: int
    response_text: str
    turns: int
    tool_calls: int
    tool_errors: int
    tool_timeouts: int
    answer_tags: int
    finish_reason: str
    """Why the rollout ended (`rstar2.finish_reason`)."""
    reward: float = 0.0
    reward_status: str = ""
    infra_failure: str = ""
    """Empty, or why an infrastructure failure spoiled this trajectory: "tool:<reason>" (a
    tool call's `ExecResult.infra`, set by the agent loop) or "reward:<status>" (the
    verification timed out or failed, set by the reward actor or evaluation). Its reward says
    nothing about the model, so RL masks it out of the loss
    (`rstar2.rl.resampling.build_training_batch`)."""
    policy_versions: list[int] = msgspec.field(default_factory=list)
    """The policy version that generated each turn, in turn order (every token of a turn comes
    from one version: updates load between turns, `rstar2.rollout.weight_gate`); -1 for a turn
    generated before the first push. Its minimum is the trajectory's oldest token's version
    (`rstar2.rl.staleness`)."""
    tool_latencies: list[float] = msgspec.field(default_factory=list)
    """Wall seconds of each turn's tool call, in turn order (0.0 for a turn that ran none, e.g.
    a malformed call): the rollout trace's tool latencies. A measurement, so two trajectories
    compare equal without it (`__eq__`)."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trajectory):
            return NotImplemented
        return _compared(self) == _compared(other)

    @property
    def response_tokens(self) -> int:
        """Tokens after the prompt (model and tool tokens)."""
        return len(self.token_ids) - self.prompt_len

    @property
    def failed_tool_calls(self) -> int:
        """Calls whose response was a failure of any kind (errors and timeouts)."""
        return self.tool_errors + self.tool_timeouts


def _compared(t: Trajectory) -> tuple[Any, ...]:
    """What trajectory equality compares: every field but the measured `tool_latencies`."""
    return msgspec.structs.astuple(msgspec.structs.replace(t, tool_latencies=[]))


@register
class TrajectoryResult(Message, tag=71):
    """A finished trajectory, scored once it has passed the reward actor: the agent loop's
    record (`trajectory`, its reward set by the reward actor) and what only the result has:
    the task's identity and the worker's measurements."""

    traj_id: str
    step: int
    kind: str
    answer: str
    trajectory: Trajectory
    engine: int = -1
    gen_s: float = 0.0
    tool_s: float = 0.0
    reward_s: float = 0.0
    load: EngineLoad | None = None
    """The serving engine's load when the trajectory finished (None: no engine reported)."""
    moved_turns: int = 0
    """Turns generated on another engine than `engine` (the scheduler moved them there)."""
    prompt: int = -1
    """The task's `RolloutTask.prompt`: its prompt's index in the batch."""
    loop_cpu_s: float = 0.0
    """CPU seconds of the worker's event-loop thread from its first task of this step and
    kind to this result (`rstar2.rollout.loop_clock`; 0.0: not measured)."""


@register
class EngineReportRequest(Message, tag=72):
    """Ask a rollout worker for its engine's KV stats."""


@register
class EngineReport(Message, tag=73):
    """Engine `engine`'s load, as the scheduler reads it."""

    engine: int
    load: EngineLoad


@register
class WeightUpdate(Message, tag=74):
    """New policy weights for the rollout engines: all tensors flattened into one buffer."""

    version: int
    names: list[str]
    shapes: list[list[int]]
    flat: np.ndarray
    final: bool = True
    """The last bucket of `version`: the worker loads the buckets staged since the previous
    final one at once, at a turn boundary (`rstar2.rollout.weight_gate`). A synchronous run
    marks every bucket final (each loads as it comes, engine memory bounded by one bucket); an
    asynchronous one only the last, so no turn ever sees half an update."""
    bucket: int = 0
    """This bucket's place in `version`'s push: 0, 1, ... in the order sent (an asynchronous
    push's empty final one included); the worker refuses a duplicate or one out of order
    (`rstar2.weights.update_receiver`)."""


@register
class WeightAck(Message, tag=75):
    version: int
    engine: int
    load_s: float = 0.0


@register
class RolloutBatch(Message, tag=76):
    """All trajectories of one RL step (or one evaluation), learner -> scheduler."""

    step: int
    tasks: list[RolloutTask]


@register
class WeightGroupJoin(Message, tag=77):
    """Learner -> each rollout worker, once, with `cluster.weight_sync = "broadcast"` on vLLM
    engines: the learner is rank 0 of one weight group (a TCPStore at host:port, then gloo);
    this worker's engine brings its `workers` workers in as ranks `first_rank ..
    first_rank + workers - 1` of `world_size`. Answered by WeightGroupJoined once they joined."""

    host: str
    port: int
    world_size: int
    first_rank: int
    workers: int
    bucket_bytes: int
    timeout_s: float


@register
class WeightGroupJoined(Message, tag=78):
    engine: int
    first_rank: int
    workers: int
    join_s: float = 0.0


@register
class WeightBroadcast(Message, tag=79):
    """Learner -> each rollout worker, per update, in the learner's weight group: the manifest
    of the tensors the learner broadcasts right after (no tensor bytes on the bus). Answered by
    WeightAck once the engine has loaded them."""

    version: int
    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]


@register
class TurnRoute(Message, tag=80):
    """Rollout worker -> scheduler, before each later turn of a trajectory (`move_turns`): where
    should turn `turn` (the one after the `turn`-th tool call) run? `report` is the asking
    worker's engine report when that engine ran the previous turn (None when a peer's did: no
    fresh report). Answered by `TurnRouted`."""

    traj_id: str
    turn: int
    context_tokens: int
    report: EngineReport | None = None


@register
class TurnRouted(Message, tag=81):
    engine: int


@register
class TurnEnded(Message, tag=84):
    """Rollout worker -> scheduler, when a turn of trajectory `traj_id` ended in a tool call
    (its engine is free of it while the tool runs): the scheduler's policy closes the turn
    (`on_turn_end`). `report` is the worker's engine report when its own engine ran the turn
    (None when a peer's did). Fire and forget; a late or duplicate one is ignored."""

    traj_id: str
    turn: int
    report: EngineReport | None = None


@register
class PeerGenerate(Message, tag=82):
    """Rollout worker -> another rollout worker: one turn's generation on that worker's engine
    (a turn the scheduler moved there). The prompt is the whole trajectory so far. Answered by
    `PeerGenerated`."""

    request_id: str
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    stop_token_ids: list[int]
    seed: int | None = None


@register
class PeerGenerated(Message, tag=83):
    request_id: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    policy_version: int = -1
    """The policy version that generated the turn on the peer's engine (-1: unknown)."""


@register
class EngineSleep(Message, tag=85):
    """Learner -> each rollout worker, with `cluster.colocate`, once the step's rollouts are in
    and before the learner's update: free the GPUs the engine shares with the learner (vLLM
    sleep mode, `level` 1: weights copied to host memory, KV cache dropped). No trajectory may
    be in flight. Answered by `EngineSleepAck` once the memory is free."""

    level: int = 1


@register
class EngineWake(Message, tag=86):
    """Learner -> each rollout worker, with `cluster.colocate`, after the learner's update and
    before it pushes the new weights (`WeightUpdate` / `WeightBroadcast`): take the GPU memory
    back (weights restored from host memory, KV cache allocated again). Answered by
    `EngineSleepAck` once the engine can generate."""


@register
class EngineSleepAck(Message, tag=87):
    """A rollout worker's answer to `EngineSleep` / `EngineWake`: engine `engine` is now asleep
    (`sleeping`) or awake, after `seconds` of work."""

    engine: int
    sleeping: bool
    seconds: float = 0.0


# --- the rollout worker's ports for the learner (declared once, used by both ends) ------------

WeightRequest = WeightUpdate | WeightGroupJoin | WeightBroadcast
"""The "weights" port: an update over the bus, or joining and receiving through the learner's
weight group."""
WeightReply = WeightAck | WeightGroupJoined
EngineControl = EngineSleep | EngineWake
"""The "control" port (`cluster.colocate`): free the engine's GPU memory or take it back;
answered by `EngineSleepAck`."""
WEIGHT_REQUESTS: tuple[type[Message], ...] = get_args(WeightRequest)
WEIGHT_REPLIES: tuple[type[Message], ...] = get_args(WeightReply)
ENGINE_CONTROL: tuple[type[Message], ...] = get_args(EngineControl)
