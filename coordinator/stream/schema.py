"""One module for every shape the Spark job reads or writes: the warehouse layout, the inbox
rows, the stateful operator's output and state, and the five Delta tables (contract, section 5).

Arrow schemas are the source of truth for the tables (delta-rs writes them, Spark reads them);
Spark schemas are for the stream itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from coordinator import jsonio

# --- where things live ------------------------------------------------------------------------

CONSUMER_OFFSETS = "consumer_offsets"
RESPONSES = "responses"
GROUP_STATE = "group_state"
GROUP_HISTORY = "group_history"
REJECTED_REQUESTS = "rejected_requests"
#: Written in this order: the log first, so that no response is visible before what it
#: acknowledges is in the log (contract, section 5); ``responses`` last, as the batch-complete
#: marker (:mod:`coordinator.stream.sink`).
TABLES = (CONSUMER_OFFSETS, REJECTED_REQUESTS, GROUP_HISTORY, GROUP_STATE, RESPONSES)


@dataclass(frozen=True, slots=True)
class Warehouse:
    """The job's directories: ``inbox/`` (request files), ``archive/`` (processed ones),
    ``tables/<name>`` (Delta tables), ``checkpoints/coordinator`` (Spark's checkpoint),
    ``status/`` (the last progress, for ``coordinator status``) and ``topics/`` (the topics
    consumer groups are assigned from)."""

    root: Path
    inbox: Path
    checkpoint: Path

    @classmethod
    def at(
        cls, root: str | Path, inbox: str | Path | None = None, checkpoint: str | Path | None = None
    ) -> Warehouse:
        base = Path(root).absolute()
        return cls(
            base,
            Path(inbox).absolute() if inbox else base / "inbox",
            Path(checkpoint).absolute() if checkpoint else base / "checkpoints" / "coordinator",
        )

    @property
    def tables(self) -> Path:
        return self.root / "tables"

    def table(self, name: str) -> Path:
        return self.tables / name

    @property
    def archive(self) -> Path:
        return self.root / "archive"

    @property
    def status(self) -> Path:
        return self.root / "status"

    @property
    def topics(self) -> Path:
        """The topic store (:mod:`coordinator.stream.topic_store`)."""
        return self.root / "topics"


# --- the Delta tables -------------------------------------------------------------------------

LOG_MEMBER = pa.struct(
    [
        ("member_id", pa.string()),
        ("group_instance_id", pa.string()),
        ("client_id", pa.string()),
        ("client_host", pa.string()),
        ("rebalance_timeout_ms", pa.int32()),
        ("session_timeout_ms", pa.int32()),
        ("subscription", pa.binary()),
        ("assignment", pa.binary()),
    ]
)

#: The log (contract, section 3), one row per record, partitioned by ``offsets_partition``.
CONSUMER_OFFSETS_SCHEMA = pa.schema(
    [
        ("record_type", pa.string()),
        ("group_id", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offsets_partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp_ms", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("committed_offset", pa.int64()),
        ("leader_epoch", pa.int32()),
        ("metadata", pa.string()),
        ("commit_timestamp_ms", pa.int64()),
        ("expire_timestamp_ms", pa.int64()),
        ("protocol_type", pa.string()),
        ("generation_id", pa.int32()),
        ("protocol_name", pa.string()),
        ("leader", pa.string()),
        ("current_state_timestamp_ms", pa.int64()),
        ("members", pa.list_(LOG_MEMBER)),
        ("batch_id", pa.int64()),
        ("written_at_ms", pa.int64()),
    ]
)
CONSUMER_OFFSETS_PARTITION_BY = ["offsets_partition"]

#: Every response (contract, section 1); ``body`` is the whole response as JSON (bytes base64).
#: ``request_id`` is the id itself when it is a string, else its JSON text.
RESPONSES_SCHEMA = pa.schema(
    [
        ("api", pa.string()),
        ("request_id", pa.string()),
        ("group_id", pa.string()),
        ("error_code", pa.int32()),
        ("error", pa.string()),
        ("body", pa.string()),
        ("batch_id", pa.int64()),
        ("emitted_at_ms", pa.int64()),
        ("written_at_ms", pa.int64()),
    ]
)

SUMMARY_MEMBER = pa.struct(
    [
        ("member_id", pa.string()),
        ("group_instance_id", pa.string()),
        ("client_id", pa.string()),
        ("client_host", pa.string()),
        ("session_timeout_ms", pa.int32()),
        ("rebalance_timeout_ms", pa.int32()),
    ]
)

#: One current row per live group (a group that dies loses its row). ``group_type`` says
#: classic or consumer (tables written before it gain it, null: classic). ``rebalance_reason`` is
#: why the latest rebalance began (Kafka's ``prepareRebalance`` reason); tables written before
#: it existed gain it when the sink opens them (null in their old rows).
GROUP_STATE_SCHEMA = pa.schema(
    [
        ("group_id", pa.string()),
        ("offsets_partition", pa.int32()),
        ("state", pa.string()),
        ("protocol_type", pa.string()),
        ("protocol_name", pa.string()),
        ("generation_id", pa.int32()),
        ("leader", pa.string()),
        ("num_members", pa.int32()),
        ("members", pa.list_(SUMMARY_MEMBER)),
        ("num_committed_offsets", pa.int32()),
        ("state_timestamp_ms", pa.int64()),
        ("rebalance_reason", pa.string()),
        # "classic" or "consumer" (KIP-848); null in rows written before it existed: classic.
        ("group_type", pa.string()),
        ("updated_at_ms", pa.int64()),
        ("batch_id", pa.int64()),
    ]
)

#: Every change of a group's summary, append-only: ``group_state``'s columns, one row per group
#: per batch in which its summary changed, Dead rows included (state "Dead", the summary's
#: other columns null). A group's rebalances read as its PreparingRebalance ->
#: CompletingRebalance -> Stable rows; changes within one batch show as the batch's last one.
GROUP_HISTORY_SCHEMA = GROUP_STATE_SCHEMA

#: Lines that could not be read as a request at all (no request id to answer to).
REJECTED_REQUESTS_SCHEMA = pa.schema(
    [
        ("raw", pa.string()),
        ("source_file", pa.string()),
        ("reason", pa.string()),
        ("batch_id", pa.int64()),
        ("rejected_at_ms", pa.int64()),
    ]
)

TABLE_SCHEMAS: dict[str, pa.Schema] = {
    CONSUMER_OFFSETS: CONSUMER_OFFSETS_SCHEMA,
    RESPONSES: RESPONSES_SCHEMA,
    GROUP_STATE: GROUP_STATE_SCHEMA,
    GROUP_HISTORY: GROUP_HISTORY_SCHEMA,
    REJECTED_REQUESTS: REJECTED_REQUESTS_SCHEMA,
}
PARTITION_BY: dict[str, list[str]] = {CONSUMER_OFFSETS: CONSUMER_OFFSETS_PARTITION_BY}

#: The column of each append-only table that holds its batch's clock: Spark's batch timestamp,
#: the ``now`` the engine acted at, the same when Spark re-runs the batch (the log's records are
#: stamped with it, as Kafka stamps a record with the time it appends it). Retention ages rows
#: by it and ``--as-of TIME`` finds the last batch at or before a time by it
#: (:mod:`coordinator.admin.tables`). ``written_at_ms`` is the wall clock of the write instead.
BATCH_CLOCK: dict[str, str] = {
    CONSUMER_OFFSETS: "timestamp_ms",
    GROUP_HISTORY: "updated_at_ms",
    RESPONSES: "emitted_at_ms",
    REJECTED_REQUESTS: "rejected_at_ms",
}


def response_request_id(request_id: object) -> str | None:
    """How a request id is stored in the ``responses`` table (and looked up by clients)."""
    if request_id is None or isinstance(request_id, str):
        return request_id
    return jsonio.dumps(request_id)


#: Table property of ``responses``: the application ids writing a warehouse together (a
#: gateway cluster's nodes and its group tables' writer), comma separated; readers take the
#: newest batch of any of them as "now".
WRITER_APP_IDS_PROPERTY = "coordinator.writer.app.ids"
