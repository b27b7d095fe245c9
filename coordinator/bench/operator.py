"""Where a request's time goes in the job's state function (``coordinator bench operator``).

The Spark job's capacity is bounded by the Python side of its stateful operator: per batch and
shard, :func:`coordinator.stream.operator.shard_function` turns Spark's pandas frames into inbox
lines, decodes the shard's state, steps every group with lines or a due timer (parse each JSON
line, decode the group's snapshot, run the engine, encode answers and the snapshot, summarise
the group) and hands back a pandas frame of output rows. This module runs exactly that path
without Spark: one shard holding G Stable groups of M members, fed batches of heartbeats (every
member once per batch, one inbox file per ``--lines-per-file`` lines), times it, samples its
stack every few milliseconds of CPU time (the shares of CPU by stage and by line, which a busy
box does not distort) and profiles it with ``cProfile`` (calls, and cumulative times that the
profiler's cost per call and other processes inflate). It prints microseconds per request for
the whole function and per stage, so that the job's top costs can be fixed in order (``coordinator bench operator --groups G --members M``). What Spark adds around it (Arrow transfer between
the JVM and the Python worker, the state store, the shuffle, the sink's Delta writes) is
measured by ``coordinator bench stream``; the two figures side by side say which side bounds the
job.
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from coordinator.bench.engine import CONFIG, Harness
from coordinator.group.snapshot import encode_group
from coordinator.stream import operator
from coordinator.stream.datafiles import OPERATOR_SCHEMA

#: Stages of the state function, by the functions that carry them (cumulative time of the
#: outermost call of each; a stage's own callees that belong to another stage are not
#: subtracted, so the stages may overlap and need not add up to the whole).
STAGES = {
    "frames -> lines (pandas columns, arrival stamps)": ("operator.py", ("_lines",)),
    "shard state decode": ("operator.py", ("decode_shard",)),
    "shard state encode": ("operator.py", ("encode_shard",)),
    "parse a line (JSON, checks)": ("operator.py", ("_read_line",)),
    "group snapshot decode": ("snapshot.py", ("decode_group",)),
    "group snapshot encode": ("snapshot.py", ("encode_group", "encode_classic_group")),
    "engine step (requests -> answers, records)": ("step.py", ("step",)),
    "group summary (before and after)": ("operator.py", ("group_summary",)),
    "answers to JSON": ("jsonio.py", ("dumps", "dumps_response")),
    "output rows -> pandas frame": ("operator.py", ("output_frame",)),
}


@dataclass(frozen=True)
class OperatorBenchOptions:
    groups: int = 200
    members: int = 10
    batches: int = 20
    lines_per_file: int = 100
    #: Times the batches are run (each from a cold worker) while sampled by CPU time: the
    #: kernel's profiling timer ticks about every 4 ms of CPU, so one run gives 150 samples.
    sample_rounds: int = 5
    #: Python workers whose kept groups (``operator.DECODED``) the batches land on, in turn:
    #: 1 is one warm worker; in Spark's ``local[2]`` a shard's task runs on either of two.
    workers: int = 1

    def __post_init__(self) -> None:
        if min(self.groups, self.members, self.batches, self.lines_per_file, self.workers) < 1:
            raise ValueError("every count must be >= 1")


class _State:
    """The slice of Spark's ``GroupState`` that the state function uses."""

    def __init__(self, blob: bytes | None, now_ms: int) -> None:
        self.exists = blob is not None
        self.get = (blob,)
        self.now_ms = now_ms
        self.hasTimedOut = False
        self.updated: bytes | None = None

    def getCurrentProcessingTimeMs(self) -> int:
        return self.now_ms

    def update(self, value: tuple[bytes]) -> None:
        self.updated = value[0]
        self.exists = True
        self.get = value

    def remove(self) -> None:
        self.exists = False

    def setTimeoutDuration(self, duration_ms: int) -> None:
        pass


def _formed(options: OperatorBenchOptions) -> tuple[bytes, list[tuple[str, str, int]], int]:
    """One shard's state blob with ``groups`` Stable groups, every member as (group id, member
    id, generation), and the engine's clock when they were formed."""
    members: list[tuple[str, str, int]] = []
    groups: dict[str, tuple[int | None, bytes]] = {}
    formed_ms = 0
    for g in range(options.groups):
        # Each group on a clock of its own from 0: on one clock, the initial rebalance delay of
        # every later group would expire the sessions of the first ones before the batches.
        harness = Harness()
        group_id = f"bench-{g:05d}"
        ids, generation = harness.form_group(group_id, options.members)
        members.extend((group_id, member_id, generation) for member_id in ids)
        group = harness.c.group(group_id)
        assert group is not None
        groups[group_id] = (None, encode_group(group))
        formed_ms = max(formed_ms, harness.now)
    return operator.encode_shard(groups), members, formed_ms


def _frames(
    members: list[tuple[str, str, int]], batch: int, lines_per_file: int, now_ms: int
) -> Iterator[Any]:
    """A batch's pandas frame: a heartbeat of every member, ``lines_per_file`` per file."""
    import pandas as pd

    values, files, positions, group_ids = [], [], [], []
    for i, (group_id, member_id, generation) in enumerate(members):
        request = {
            "api": "heartbeat",
            "request_id": f"h{batch}.{i}",
            "group_id": group_id,
            "member_id": member_id,
            "generation_id": generation,
        }
        values.append(json.dumps(request, separators=(",", ":")))
        sequence = batch * 1_000_000 + i // lines_per_file
        files.append(f"file:/inbox/{sequence:016d}@{now_ms}-bench.jsonl")
        positions.append(i % lines_per_file)
        group_ids.append(group_id)
    yield pd.DataFrame(
        {
            "value": values,
            "source_file": files,
            "position": positions,
            "group_id": group_ids,
            "terminated": [True] * len(values),
            "valid_utf8": [True] * len(values),
        }
    )


def operator_bench(options: OperatorBenchOptions) -> dict[str, Any]:
    """Run the shard function over ``batches`` batches: timed, sampled by CPU time and under
    ``cProfile``; microseconds per request in all and per stage (:data:`STAGES`), the top
    lines by CPU samples and the top functions by the profiler's own time."""
    settings = operator.OperatorSettings(config=CONFIG, seed=b"bench-operator-seed")
    function = operator.shard_function(settings)
    blob, members, formed_ms = _formed(options)
    now = formed_ms + 1000  # a batch a second: every member well within its session
    frames = [
        list(_frames(members, b, options.lines_per_file, now + 1000 * b))
        for b in range(options.batches)
    ]
    formed = blob
    workers: list[operator.DecodedGroups] = []
    kept = operator.DECODED

    def cold() -> None:
        workers[:] = [operator.DecodedGroups() for _ in range(options.workers)]

    def on_worker(batch: int) -> None:
        operator.DECODED = workers[batch % len(workers)]

    def run_batches() -> None:
        blob = formed
        for b in range(options.batches):
            on_worker(b)
            state = _State(blob, now + 1000 * b + 500)
            list(function(("shard",), iter(frames[b]), state))
            blob = state.updated if state.updated is not None else blob

    try:
        return _measured(options, function, frames, formed, now, cold, on_worker, run_batches)
    finally:
        operator.DECODED = kept


def _measured(
    options: OperatorBenchOptions,
    function: Any,
    frames: list[list[Any]],
    formed: bytes,
    now: int,
    cold: Any,
    on_worker: Any,
    run_batches: Any,
) -> dict[str, Any]:
    members = options.groups * options.members
    # First without the profiler (its per-call cost inflates call-heavy code), from cold
    # workers; then sampled by CPU time; then again under the profiler, for its stages.
    cold()
    started = time.process_time()
    run_batches()
    plain_cpu_s = time.process_time() - started

    def run_rounds() -> None:
        for _ in range(options.sample_rounds):
            cold()
            run_batches()

    started = time.process_time()
    samples = _cpu_samples(run_rounds)
    sampled_cpu_s = (time.process_time() - started) / options.sample_rounds
    blob = formed
    cold()
    profile = cProfile.Profile()
    requests = 0
    rows = 0
    outputs: list[list[Any]] = []
    started = time.process_time()
    for b in range(options.batches):
        on_worker(b)
        state = _State(blob, now + 1000 * b + 500)
        profile.enable()
        out = list(function(("shard",), iter(frames[b]), state))
        profile.disable()
        blob = state.updated if state.updated is not None else blob
        requests += members
        rows += sum(len(frame) for frame in out)
        outputs.append(out)
    cpu_s = time.process_time() - started
    stats = pstats.Stats(profile)
    per_request = 1e6 / requests
    stages = {}
    raw = stats.stats  # type: ignore[attr-defined]
    for stage, (file_end, names) in STAGES.items():
        # Outermost calls only (a name that calls another of the stage, as dumps_response
        # calls dumps, would count twice): cumulative time less what the others spent inside.
        cumulative = sum(
            ct
            for (path, _, fn), (_, _, _, ct, _) in raw.items()
            if fn in names and path.endswith(file_end)
        ) - sum(
            callers_ct
            for (path, _, fn), (_, _, _, _, callers) in raw.items()
            if fn in names and path.endswith(file_end)
            for (caller_path, _, caller_fn), (_, _, _, callers_ct) in callers.items()
            if caller_fn in names and caller_path.endswith(file_end)
        )
        stages[stage] = round(cumulative * per_request, 2)
    sampled: dict[str, float] = {}
    leaves: Counter[str] = Counter()
    if samples:
        # A stage's share of the samples times a round's CPU per request.
        sampled_per_request = sampled_cpu_s * per_request / len(samples)
        for stage, (file_end, names) in STAGES.items():
            hits = sum(
                1
                for stack in samples
                if any(fn in names and path.endswith(file_end) for path, fn, _ in stack)
            )
            sampled[stage] = round(hits * sampled_per_request, 2)
        for stack in samples:
            path, fn, line = stack[0]
            leaves[f"{path.rsplit('/', 1)[-1]}:{line}({fn})"] += 1
    total = sum(tt for (_, _, _), (_, _, tt, _, _) in raw.items())
    top = sorted(raw.items(), key=lambda item: -item[1][2])[:15]
    serializer_s = _serializer_seconds(outputs)
    return {
        "options": options.__dict__,
        "requests": requests,
        "output_rows": rows,
        "us_per_request_profiled": round(total * per_request, 2),
        "us_per_request_cpu": round(cpu_s * per_request, 2),
        "us_per_request_cpu_unprofiled": round(plain_cpu_s * per_request, 2),
        "us_per_request_serializer": None
        if serializer_s is None
        else round(serializer_s * per_request, 2),
        "stages_us_per_request": stages,
        "cpu_samples": len(samples),
        "us_per_request_cpu_sampled": round(sampled_cpu_s * per_request, 2),
        "stages_us_per_request_sampled": sampled,
        "top_sampled_lines": [
            {"line": where, "share": round(count / len(samples), 4)}
            for where, count in leaves.most_common(15)
        ],
        "top_own_time": [
            {
                "function": f"{path.rsplit('/', 1)[-1]}:{line}({fn})",
                "calls_per_request": round(nc / requests, 2),
                "us_per_request": round(tt * per_request, 2),
            }
            for (path, line, fn), (_, nc, tt, _, _) in top
        ],
    }


def _serializer_seconds(outputs: list[list[Any]]) -> float | None:
    """CPU seconds PySpark's own serializer for ``applyInPandasWithState``
    (``ApplyInPandasWithStateSerializer.dump_stream``) takes to turn the state function's
    output frames, one key's call per batch, into the Arrow stream its worker sends the JVM:
    the pandas concatenation with its padding frames and the conversion to Arrow, which the
    Python worker pays beside the function. The best of three runs; None without PySpark."""
    try:
        from pyspark.sql.pandas.serializers import ApplyInPandasWithStateSerializer
        from pyspark.sql.pandas.types import from_arrow_schema
        from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
        from pyspark.sql.types import BinaryType, StructField, StructType
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return None
    output_type = from_arrow_schema(OPERATOR_SCHEMA)  # operator.OUTPUT_DDL, as Spark reads it
    state_type = StructType([StructField("blob", BinaryType())])
    # PySpark's classes are untyped (Any, for mypy).
    serializer_class: Any = ApplyInPandasWithStateSerializer
    state_class: Any = GroupState
    serializer = serializer_class(
        timezone="UTC",
        safecheck=False,
        assign_cols_by_name=True,
        prefer_int_ext_dtype=False,
        state_object_schema=state_type,
        arrow_max_records_per_batch=10_000,  # Spark's default
        prefers_large_var_types=False,
        int_to_decimal_coercion_enabled=False,
    )

    def calls() -> Iterator[Any]:
        for frames in outputs:
            state = state_class(
                optionalValue=None,
                batchProcessingTimeMs=0,
                eventTimeWatermarkMs=-1,
                timeoutConf=GroupStateTimeout.ProcessingTimeTimeout,
                hasTimedOut=False,
                watermarkPresent=False,
                defined=False,
                updated=False,
                removed=False,
                timeoutTimestamp=-1,
                keyAsUnsafe=b"",
                valueSchema=state_type,
            )
            state.update((b"state",))
            # As the worker's mapper packages one call: ((frames, state), the output type).
            yield [((iter(frames), state), output_type)]

    best = None
    for _ in range(3):
        started = time.process_time()
        serializer.dump_stream(calls(), io.BytesIO())
        spent = time.process_time() - started
        best = spent if best is None else min(best, spent)
    return best


#: CPU time between two samples of the state function's stack (the kernel rounds it up to
#: its tick).
SAMPLE_INTERVAL_S = 0.001


def _cpu_samples(run: Any) -> list[list[tuple[str, str, int]]]:
    """Run ``run()`` and sample the main thread's stack every :data:`SAMPLE_INTERVAL_S` of this
    process's CPU time (``ITIMER_PROF``): each sample (file, function, line) from the innermost
    frame out. A sample lands between two bytecodes, so a C call's time (zlib, the JSON
    scanner) is counted on the line that called it. Unlike the profiler's, these shares are
    neither inflated by a cost per call nor by other processes' time on a busy box. Empty where
    the platform has no ``setitimer``."""
    samples: list[list[tuple[str, str, int]]] = []
    if not hasattr(signal, "setitimer"):
        run()
        return samples

    def sample(signum: int, frame: Any) -> None:
        stack = []
        while frame is not None:
            code = frame.f_code
            stack.append((code.co_filename, code.co_name, frame.f_lineno))
            frame = frame.f_back
        samples.append(stack)

    previous = signal.signal(signal.SIGPROF, sample)
    signal.setitimer(signal.ITIMER_PROF, SAMPLE_INTERVAL_S, SAMPLE_INTERVAL_S)
    try:
        run()
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, previous)
    return samples


def format_report(result: dict[str, Any]) -> str:
    o = result["options"]
    lines = [
        f"operator bench: one shard, {o['groups']} groups x {o['members']} members, every member"
        f" heartbeating once per batch, {o['batches']} batches, {o['lines_per_file']} lines per"
        f" inbox file, {o['workers']} Python worker(s) in turn",
        f"  {result['requests']:,} requests, {result['output_rows']:,} output rows",
        f"  the state function: {result['us_per_request_cpu_unprofiled']:.1f} us CPU per request;"
        f" under the profiler {result['us_per_request_cpu']:.1f} us CPU"
        f" ({result['us_per_request_profiled']:.1f} us by its clock)",
    ]
    if result["us_per_request_serializer"] is not None:
        lines.append(
            f"  PySpark's serializer (ApplyInPandasWithStateSerializer.dump_stream of the output"
            f" frames to Arrow), beside it: {result['us_per_request_serializer']:.1f} us CPU"
            " per request"
        )
    lines.append("")
    if result["stages_us_per_request_sampled"]:
        lines += [
            f"  stage (share of {result['cpu_samples']:,} CPU samples x the sampled run's"
            f" {result['us_per_request_cpu_sampled']:.1f} us/request)",
        ]
        for stage, us in sorted(
            result["stages_us_per_request_sampled"].items(), key=lambda kv: -kv[1]
        ):
            lines.append(f"  {stage:<64} {us:>9.2f}")
        lines += ["", "  lines by CPU samples (C calls count on their caller's line)      share"]
        for row in result["top_sampled_lines"]:
            lines.append(f"  {row['line'][:64]:<64} {100 * row['share']:>8.1f}%")
        lines.append("")
    lines += [
        "  stage (cumulative, under the profiler; stages may overlap)       us/request",
    ]
    for stage, us in sorted(result["stages_us_per_request"].items(), key=lambda kv: -kv[1]):
        lines.append(f"  {stage:<64} {us:>9.2f}")
    lines += ["", "  functions by own time                                   calls/req  us/request"]
    for row in result["top_own_time"]:
        lines.append(
            f"  {row['function'][:56]:<56} {row['calls_per_request']:>9.2f} "
            f"{row['us_per_request']:>10.2f}"
        )
    return "\n".join(lines)
