"""The Spark key of each offsets partition in shard mode (``job.state.key=shard``).

The stateful operator is keyed by a ``shard`` column, one key per ``__consumer_offsets``
partition, and Spark deals its keys over the state tasks (``job.shards``) by its shuffle's hash
partitioning: Murmur3 (x86, 32 bits, seed 42) of the key, modulo the tasks. With the partition
number itself as the key (layout ``partition``), that deal is uneven: of 50 partitions, 2 tasks
get 19 and 31, so one task carries 62 % of a batch's groups while the other core waits, and the
batch takes as long as the larger task.

Layout ``balanced`` keeps one key per partition but picks its value so that Spark's hash sends
partition ``p`` to task ``p mod shards``: the tasks get the partitions round-robin, as evenly as
the count allows (25 and 25). The operator never reads a key's value (a key's state holds its
groups by group id), so the layout changes only which task steps which partition. It is fixed
per checkpoint, as the keys are the state store's: ``coordinator.json`` records it, and a
checkpoint made before layouts existed reads as ``partition``.
"""

from __future__ import annotations

#: The partition number is the key (every checkpoint made before layouts existed).
PARTITION_LAYOUT = "partition"
#: A key per partition, chosen so Spark deals the partitions round-robin over the tasks.
BALANCED_LAYOUT = "balanced"
LAYOUTS = (BALANCED_LAYOUT, PARTITION_LAYOUT)

_MASK = 0xFFFFFFFF
#: Spark's seed for ``hash()`` and for its shuffle's ``HashPartitioning``.
SPARK_HASH_SEED = 42


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def spark_hash_int(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's ``Murmur3_x86_32.hashInt``: the hash of an ``int`` column, as ``hash()`` and the
    shuffle compute it (a signed 32-bit result)."""
    k1 = (value & _MASK) * 0xCC9E2D51 & _MASK
    k1 = _rotl(k1, 15) * 0x1B873593 & _MASK
    h1 = (seed & _MASK) ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4  # the input's length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def spark_task(key: int, shards: int) -> int:
    """The state task (shuffle partition) Spark sends an ``int`` key to: ``pmod(hash, n)``."""
    return spark_hash_int(key) % shards


def balanced_keys(partitions: int, shards: int) -> tuple[int, ...]:
    """For each offsets partition ``p``, the smallest unused non-negative int that Spark sends
    to task ``p mod shards``: distinct keys, dealt round-robin."""
    if partitions < 1 or shards < 1:
        raise ValueError(f"partitions and shards must be >= 1, got {partitions}, {shards}")
    free: list[list[int]] = [[] for _ in range(shards)]
    keys: list[int] = []
    candidate = 0
    for partition in range(partitions):
        wanted = free[partition % shards]
        while not wanted:
            free[spark_task(candidate, shards)].append(candidate)
            candidate += 1
        keys.append(wanted.pop(0))
    return tuple(keys)


def shard_keys(layout: str, partitions: int, shards: int) -> tuple[int, ...]:
    """The key of each offsets partition under ``layout``."""
    if layout == PARTITION_LAYOUT:
        return tuple(range(partitions))
    if layout == BALANCED_LAYOUT:
        return balanced_keys(partitions, shards)
    raise ValueError(f"job.state.shard.layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
