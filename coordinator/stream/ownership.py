"""One writer per warehouse: an owner epoch, a lease, and a fence in every Delta commit.

Kafka keeps one leader per partition and fences a stale one with its leader epoch: a leader
that was paused while another took over has its appends refused once the new epoch is in place.
The warehouse's writers (``coordinator run``, its ``--rebuild-from-log``, and a gateway's
embedded engine with ``--log-warehouse``) do the same here, in three parts:

**The claim** (who owns the warehouse, in which epoch). ``<warehouse>/owner/epoch-N.json`` holds
the owner of epoch N: its kind, pid, host, start time and lease timeout. A new owner creates the
next epoch's file with ``link()``, which fails when the name exists, so of two processes starting
together exactly one gets epoch N; the other reads the winner's claim and is refused. The
newest file is the current owner; files are never rewritten, so the directory is the history.

**The lease** (whether the owner is alive). The owner rewrites ``owner/lease-N.json`` (its last
heartbeat, wall clock) every quarter of its lease timeout, and marks it released when it stops
cleanly. A process starting on the warehouse is refused while the current owner's lease runs
(last heartbeat + the owner's own ``lease_timeout_ms`` is in the future), with who owns it and
what to do. It takes over at once when the owner released its lease, or when the owner ran on
this machine (same host, boot and pid namespace) and its pid is gone (``kill -9``, a crash);
otherwise once the lease has expired. The heartbeat thread also watches for a newer claim and
reports the loss (the job and the gateway then stop, with "lost ownership of the warehouse to
...").

**The fence** (what makes a stale owner harmless, whatever the clocks say). Each Delta table
of the warehouse carries its owner's epoch as the table property ``coordinator.owner.epoch``. A
new owner first commits its epoch to every existing table (a metadata-only commit: the fence),
and every writer checks, right before each commit, that the table's snapshot it commits on
carries its own epoch. delta-rs commits optimistically (put-if-absent of the next
``_delta_log/N.json``) and refuses a commit whose read version precedes a metadata change
("Metadata changed since last commit"): appends, the ``group_state`` MERGE, empty marker
commits, compaction and schema changes alike (deltalake 1.6; ``tests/test_ownership.py``
checks each). So a writer that read its snapshot before the fence cannot commit after it, and
one that reads after the fence sees the newer epoch and stops. Every commit of a batch's rows,
and every fence, also records its epoch in the commit info (``custom_metadata``), so each
table's history tells which owner wrote each batch (housekeeping commits carry none).

**Partition writers** (the nodes of ``coordinator gateway --processes``, which all write under
their supervisor's claim). ``consumer_offsets`` also names the node that writes each offsets
partition and each node's incarnation (:func:`writers_properties`), changed by the supervisor
with a metadata commit; a node's commit is checked against them on the snapshot it commits on
(:class:`PartitionWriter`), so the same delta-rs rule refuses a paused node's commit once its
partitions moved, and it finds out on reading again.

Assumptions. The lease needs host clocks within a small fraction of the lease timeout (NTP):
a skewed clock can only make a process take over from a live owner (which is then fenced and
stops) or wait longer; it never lets two owners write. The claim needs a filesystem where
``link()`` to an existing name fails atomically (local disks, NFSv3+, CephFS, Lustre; the same
atomic put-if-absent delta-rs relies on for its own local commits); on an object store the
claim would need a conditional put instead. The pid shortcut is taken only on the very same
machine and pid namespace. Spark's checkpoint is not under the fence: a stale job that resumes
may plan one more batch in it before it stops (its Delta writes are refused); a new owner whose
next batch id collides stops with Spark's "Multiple streaming jobs detected" and re-runs that
batch when restarted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from coordinator.stream.client import wall_clock_ms

log = logging.getLogger(__name__)

#: The table property (and commit-info key) holding the owner epoch of a Delta table.
EPOCH_PROPERTY = "coordinator.owner.epoch"
#: Kafka's KRaft brokers are fenced after 9 s without a heartbeat; a Spark driver's Python
#: thread can pause longer (GC, a loaded box), so the default is more generous.
DEFAULT_LEASE_TIMEOUT_MS = 20_000
#: Claims kept in ``owner/`` (older ones are pruned by each new owner).
CLAIMS_KEPT = 20

OWNER_DIR = "owner"
_CLAIM = re.compile(r"^epoch-(\d+)\.json$")

#: A wall clock in milliseconds (a fake one in tests).
WallClock = Callable[[], int]


def owner_dir(warehouse_root: str | Path) -> Path:
    return Path(warehouse_root) / OWNER_DIR


class OwnershipError(RuntimeError):
    """The warehouse cannot be written by this process."""


class WarehouseOwned(OwnershipError):
    """Refused at start: another live process owns the warehouse."""


class OwnershipLost(OwnershipError):
    """A newer owner fenced this one: it must not write again."""


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


def _machine() -> str:
    """This machine and pid namespace: a pid means the same process only within both."""
    parts = []
    for path in ("/proc/sys/kernel/random/boot_id",):
        with contextlib.suppress(OSError):
            parts.append(Path(path).read_text().strip())
    with contextlib.suppress(OSError):
        parts.append(os.readlink("/proc/self/ns/pid"))
    return "/".join(parts)


@dataclass(frozen=True)
class Claim:
    """The owner of one epoch, as written to ``owner/epoch-N.json`` (never rewritten)."""

    epoch: int
    owner_id: str
    kind: str
    pid: int
    host: str
    machine: str
    started_at_ms: int
    lease_timeout_ms: int

    def describe(self) -> str:
        return (
            f"{self.kind} (pid {self.pid} on {self.host}, epoch {self.epoch}, "
            f"since {_iso(self.started_at_ms)})"
        )


@dataclass(frozen=True)
class Lease:
    """The owner's heartbeat, ``owner/lease-N.json`` (rewritten by the owner only)."""

    epoch: int
    owner_id: str
    heartbeat_at_ms: int
    released: bool = False


@dataclass(frozen=True)
class Verdict:
    """Whether a process may claim the warehouse now (:func:`assess`)."""

    free: bool
    reason: str
    owner: Claim | None = None
    #: When the owner's lease runs out unless it heartbeats again (held only).
    expires_at_ms: int | None = None


def assess(
    owner: Claim | None,
    lease: Lease | None,
    now_ms: int,
    *,
    host: str,
    machine: str,
    pid: int,
    process_alive: Callable[[int], bool],
    held_here: Callable[[str], bool],
) -> Verdict:
    """The rules for taking over, on the caller's clock (pure; see the module docstring)."""
    if owner is None:
        return Verdict(True, "the warehouse has no owner yet")
    if lease is not None and lease.owner_id != owner.owner_id:
        lease = None  # a stale owner's heartbeat, or none yet
    if lease is not None and lease.released:
        return Verdict(True, f"{owner.describe()} released it", owner)
    if owner.host == host and owner.machine == machine and machine:
        if owner.pid == pid and not held_here(owner.owner_id):
            return Verdict(True, f"{owner.describe()} was this process, no longer owning", owner)
        if owner.pid != pid and not process_alive(owner.pid):
            return Verdict(True, f"{owner.describe()} is gone (no such process)", owner)
    last_seen = owner.started_at_ms if lease is None else lease.heartbeat_at_ms
    expires = max(owner.started_at_ms, last_seen) + owner.lease_timeout_ms
    if now_ms >= expires:
        return Verdict(
            True, f"the lease of {owner.describe()} expired at {_iso(expires)}", owner, expires
        )
    return Verdict(False, "its lease runs", owner, expires)


def refusal(root: Path, verdict: Verdict, now_ms: int) -> str:
    """The message a refused process prints: who owns the warehouse and what to do."""
    owner = verdict.owner
    assert owner is not None and verdict.expires_at_ms is not None
    left = max(0.0, (verdict.expires_at_ms - now_ms) / 1000)
    return (
        f"the warehouse {root} is owned by {owner.describe()}; only one process may write it. "
        f"Stop that process first (kill {owner.pid} on {owner.host}). If it is gone already, "
        f"its lease expires at {_iso(verdict.expires_at_ms)} (in {left:.1f} s, lease "
        f"{owner.lease_timeout_ms} ms): start again after that, and this process takes over "
        f"and fences it (records in {owner_dir(root)})"
    )


# --- the files --------------------------------------------------------------------------------


def _claim_path(directory: Path, epoch: int) -> Path:
    return directory / f"epoch-{epoch:010d}.json"


def _lease_path(directory: Path, epoch: int) -> Path:
    return directory / f"lease-{epoch:010d}.json"


def _epochs(directory: Path) -> list[int]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for m in map(_CLAIM.match, names) if m)


def read_claim(directory: Path, epoch: int) -> Claim | None:
    try:
        return Claim(**json.loads(_claim_path(directory, epoch).read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None


def newest_claim(directory: Path) -> Claim | None:
    """The current owner: the claim of the highest epoch (None when never owned)."""
    epochs = _epochs(directory)
    return read_claim(directory, epochs[-1]) if epochs else None


def read_lease(directory: Path, epoch: int) -> Lease | None:
    try:
        return Lease(**json.loads(_lease_path(directory, epoch).read_text(encoding="utf-8")))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _write_claim(directory: Path, claim: Claim) -> bool:
    """Create ``epoch-N.json`` whole or not at all: False when that epoch is taken."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".epoch-{claim.epoch:010d}.{claim.owner_id}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(asdict(claim), indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, _claim_path(directory, claim.epoch))
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink()


def _write_lease(directory: Path, lease: Lease) -> None:
    tmp = directory / f".lease-{lease.epoch:010d}.{lease.owner_id}.tmp"
    tmp.write_text(json.dumps(asdict(lease)) + "\n", encoding="utf-8")
    os.replace(tmp, _lease_path(directory, lease.epoch))


def _prune(directory: Path, epoch: int) -> None:
    for old in _epochs(directory):
        if old <= epoch - CLAIMS_KEPT:
            with contextlib.suppress(OSError):
                _claim_path(directory, old).unlink()
            with contextlib.suppress(OSError):
                _lease_path(directory, old).unlink()


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- the fence on Delta tables -----------------------------------------------------------------


def table_epoch(table: Any) -> int:
    """The owner epoch a Delta table's snapshot carries (0: never fenced)."""
    return int(table.metadata().configuration.get(EPOCH_PROPERTY, 0))


def epoch_commit_metadata(epoch: int) -> dict[str, str]:
    """Commit-info entries naming the owner epoch of a commit (``DeltaTable.history()``)."""
    return {EPOCH_PROPERTY: str(epoch)}


# --- owning -----------------------------------------------------------------------------------

_held: dict[str, Ownership] = {}
_held_lock = threading.Lock()


def _held_here(owner_id: str) -> bool:
    with _held_lock:
        return owner_id in _held


class Ownership:
    """This process owns the warehouse in ``claim.epoch``: heartbeats, checks, fences.

    ``on_lost`` is called once (from the heartbeat thread, or from whoever found out first)
    with the :class:`OwnershipLost` error when a newer owner took over."""

    def __init__(self, root: Path, claim: Claim, clock: WallClock = wall_clock_ms) -> None:
        self.root = Path(root)
        self.directory = owner_dir(root)
        self.claim = claim
        self.clock = clock
        self.on_lost: Callable[[OwnershipLost], None] | None = None
        self.lost: OwnershipLost | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        with _held_lock:
            _held[claim.owner_id] = self

    @property
    def epoch(self) -> int:
        return self.claim.epoch

    @property
    def heartbeat_interval_s(self) -> float:
        return self.claim.lease_timeout_ms / 4000

    # --- the lease ---

    def start_heartbeat(self) -> None:
        self._thread = threading.Thread(
            target=self._heartbeats, name=f"warehouse-owner-epoch-{self.epoch}", daemon=True
        )
        self._thread.start()

    def _heartbeats(self) -> None:
        while not self._stop.wait(self.heartbeat_interval_s):
            try:
                if not self.heartbeat():
                    return
            except OSError:  # the lease lapses if this goes on; the fence keeps writes safe
                log.warning("the warehouse owner's heartbeat failed", exc_info=True)

    def heartbeat(self) -> bool:
        """Renew the lease, unless a newer owner claimed the warehouse (then report the loss
        and return False)."""
        newest = newest_claim(self.directory)
        if newest is not None and newest.epoch > self.epoch:
            self._lose(newest)
            return False
        _write_lease(self.directory, Lease(self.epoch, self.claim.owner_id, self.clock()))
        return True

    def release(self) -> None:
        """Stop heartbeating and, unless superseded, mark the lease released: the next
        process takes over at once."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)
        with _held_lock:
            _held.pop(self.claim.owner_id, None)
        if self.lost is None:
            newest = newest_claim(self.directory)
            if newest is None or newest.epoch == self.epoch:
                lease = Lease(self.epoch, self.claim.owner_id, self.clock(), released=True)
                with contextlib.suppress(OSError):
                    _write_lease(self.directory, lease)

    # --- the fence ---

    def lost_to(self, newer: Claim | None, epoch: int | None = None) -> OwnershipLost:
        whom = newer.describe() if newer is not None else f"epoch {epoch}"
        return OwnershipLost(
            f"lost ownership of the warehouse {self.root} to {whom}; this process "
            f"(epoch {self.epoch}) has stopped writing it"
        )

    def _lose(self, newer: Claim | None, epoch: int | None = None) -> OwnershipLost:
        with self._lock:
            first = self.lost is None
            if first:
                self.lost = self.lost_to(newer, epoch)
            error = self.lost
        assert error is not None
        if first:
            self._stop.set()
            log.error("%s", error)
            if self.on_lost is not None:
                self.on_lost(error)
        return error

    def superseded(self) -> OwnershipLost | None:
        """The loss, if a newer epoch was claimed (read from the claims, not the tables)."""
        if self.lost is not None:
            return self.lost
        newest = newest_claim(self.directory)
        if newest is not None and newest.epoch > self.epoch:
            return self._lose(newest)
        return None

    def check(self) -> None:
        """Raise :class:`OwnershipLost` if this process no longer owns the warehouse."""
        error = self.superseded()
        if error is not None:
            raise error

    def fence_table(self, table: Any) -> None:
        """Make ``table``'s snapshot carry this epoch before committing on it: nothing when it
        does (an in-memory read), a fence commit when it carries an older one, and
        :class:`OwnershipLost` when it carries a newer one. A later commit on this snapshot
        then fails if anyone fences the table meanwhile."""
        from deltalake import CommitProperties
        from deltalake.exceptions import CommitFailedError

        if self.lost is not None:
            raise self.lost
        while True:
            current = table_epoch(table)
            if current == self.epoch:
                return
            if current > self.epoch:
                raise self._lose(read_claim(self.directory, current), current)
            try:
                table.alter.set_table_properties(
                    {EPOCH_PROPERTY: str(self.epoch)},
                    raise_if_not_exists=False,
                    commit_properties=CommitProperties(
                        custom_metadata=epoch_commit_metadata(self.epoch)
                    ),
                )
            except CommitFailedError:
                table.update_incremental()  # someone committed meanwhile: look again

    def fence_tables(self, paths: Iterable[Path]) -> None:
        """The takeover's fence: every existing table of the warehouse gets this epoch."""
        from deltalake import DeltaTable

        for path in paths:
            if DeltaTable.is_deltatable(str(path)):
                self.fence_table(DeltaTable(str(path)))


def current_verdict(
    root: str | Path,
    now_ms: int | None = None,
    *,
    host: str | None = None,
    pid: int | None = None,
    machine: str | None = None,
    process_alive: Callable[[int], bool] = _process_alive,
) -> Verdict:
    """Whether this process could take the warehouse at ``root`` now, and who owns it."""
    directory = owner_dir(root)
    current = newest_claim(directory)
    lease = None if current is None else read_lease(directory, current.epoch)
    return assess(
        current,
        lease,
        wall_clock_ms() if now_ms is None else now_ms,
        host=host or socket.gethostname(),
        machine=_machine() if machine is None else machine,
        pid=os.getpid() if pid is None else pid,
        process_alive=process_alive,
        held_here=_held_here,
    )


def acquire(
    root: str | Path,
    kind: str,
    lease_timeout_ms: int = DEFAULT_LEASE_TIMEOUT_MS,
    *,
    tables: Iterable[Path] = (),
    clock: WallClock = wall_clock_ms,
    heartbeat: bool = True,
    host: str | None = None,
    pid: int | None = None,
    process_alive: Callable[[int], bool] = _process_alive,
) -> Ownership:
    """Claim the warehouse at ``root`` for this process, fence ``tables`` (the Delta tables it
    will write) and start heartbeating; :class:`WarehouseOwned` while a live owner holds it.

    ``host``, ``pid`` and ``process_alive`` are for tests (another "process" in this one)."""
    if lease_timeout_ms < 1:
        raise ValueError("the owner lease timeout must be at least 1 ms")
    root = Path(root).absolute()
    directory = owner_dir(root)
    tables = list(tables)
    host = host or socket.gethostname()
    pid = os.getpid() if pid is None else pid
    machine = _machine()
    table_epoch_floor = _highest_table_epoch(tables)
    while True:
        now = clock()
        verdict = current_verdict(
            root, now, host=host, pid=pid, machine=machine, process_alive=process_alive
        )
        if not verdict.free:
            raise WarehouseOwned(refusal(root, verdict, now))
        current = verdict.owner
        epoch = max(0 if current is None else current.epoch, table_epoch_floor) + 1
        claim = Claim(epoch, uuid.uuid4().hex, kind, pid, host, machine, now, lease_timeout_ms)
        if _write_claim(directory, claim):
            break
        # Another process claimed this epoch first: judge its claim like any other.
    log.info("%s owns the warehouse %s (%s)", claim.describe(), root, verdict.reason)
    ownership = Ownership(root, claim, clock)
    try:
        _write_lease(directory, Lease(epoch, claim.owner_id, clock()))
        ownership.fence_tables(tables)
    except BaseException:
        ownership.release()
        raise
    _prune(directory, epoch)
    if heartbeat:
        ownership.start_heartbeat()
    return ownership


def _highest_table_epoch(tables: list[Path]) -> int:
    """The highest epoch a table carries: a new claim goes above it even if ``owner/`` was
    lost (a new epoch below it would be fenced out by its own tables)."""
    from deltalake import DeltaTable

    highest = 0
    for path in tables:
        if DeltaTable.is_deltatable(str(path)):
            highest = max(highest, table_epoch(DeltaTable(str(path))))
    return highest


# --- one writer per offsets partition (the nodes of a gateway cluster) --------------------------

#: Table property of ``consumer_offsets``: the node that may write each offsets partition, as
#: ``node,node,...`` by partition (``-``: none), set by the supervisor of a gateway cluster.
PARTITION_WRITERS_PROPERTY = "coordinator.partition.writers"
#: Table property of ``consumer_offsets``: the current incarnation of each node, ``i,i,...`` by
#: node id; a node started again (or fenced) gets the next one, so the old process is refused.
NODE_INCARNATIONS_PROPERTY = "coordinator.node.incarnations"


class WriterFenced(OwnershipLost):
    """A node of a gateway cluster may no longer write an offsets partition it tried to."""


def writers_properties(
    writers: dict[int, int | None], incarnations: dict[int, int]
) -> dict[str, str]:
    """The two table properties naming each partition's writer and each node's incarnation."""
    return {
        PARTITION_WRITERS_PROPERTY: ",".join(
            "-" if writers[p] is None else str(writers[p]) for p in sorted(writers)
        ),
        NODE_INCARNATIONS_PROPERTY: ",".join(
            str(incarnations[n]) for n in range(max(incarnations, default=-1) + 1)
        ),
    }


def parse_writers(configuration: dict[str, str]) -> tuple[list[int | None], list[int]] | None:
    """(writer by partition, incarnation by node) from a table's properties (None: unset)."""
    writers = configuration.get(PARTITION_WRITERS_PROPERTY)
    incarnations = configuration.get(NODE_INCARNATIONS_PROPERTY)
    if writers is None or incarnations is None:
        return None
    return (
        [None if w == "-" else int(w) for w in writers.split(",")],
        [int(i) for i in incarnations.split(",") if i],
    )


@dataclass(frozen=True)
class PartitionWriter:
    """Node ``node_id`` (in ``incarnation``) of a gateway cluster, writing under its
    supervisor's claim: before each commit of records, the table's snapshot must name it
    (in this incarnation) the writer of every partition the records are in. The supervisor
    changes the writers with a metadata commit, so a commit read before the change fails
    (``Metadata changed since last commit``) and, read again, is refused here: a paused node
    that wakes after its partitions moved writes nothing."""

    node_id: int
    incarnation: int

    def check(self, table: Any, partitions: Iterable[int]) -> None:
        parsed = parse_writers(table.metadata().configuration)
        if parsed is None:
            raise WriterFenced(
                f"node {self.node_id}: the log names no partition writers; not writing"
            )
        writers, incarnations = parsed
        current = incarnations[self.node_id] if self.node_id < len(incarnations) else None
        if current != self.incarnation:
            raise WriterFenced(
                f"node {self.node_id} (incarnation {self.incarnation}) was fenced: the log's "
                f"writers are of incarnation {current}; this process has stopped writing"
            )
        foreign = sorted(
            p for p in set(partitions) if p >= len(writers) or writers[p] != self.node_id
        )
        if foreign:
            raise WriterFenced(
                f"node {self.node_id} no longer writes offsets partitions {foreign}; "
                "this process has stopped writing them"
            )

    def check_node(self, table: Any) -> None:
        """Only the incarnation (a commit with no records, e.g. a batch marker)."""
        self.check(table, ())


def set_properties(ownership: Ownership, table: Any, properties: dict[str, str]) -> None:
    """Commit table ``properties`` fenced by the warehouse claim: on ``consumer_offsets`` the
    partition writers (:func:`writers_properties`), so that from this version on only the named
    nodes' commits go through."""
    from deltalake import CommitProperties
    from deltalake.exceptions import CommitFailedError

    while True:
        ownership.fence_table(table)
        try:
            table.alter.set_table_properties(
                properties,
                raise_if_not_exists=False,
                commit_properties=CommitProperties(
                    custom_metadata=epoch_commit_metadata(ownership.epoch)
                ),
            )
            return
        except CommitFailedError:
            table.update_incremental()
