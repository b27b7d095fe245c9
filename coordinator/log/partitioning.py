"""Mapping of group ids to ``__consumer_offsets`` partitions (section 10.1).

Owns Kafka's ``partitionFor``: ``Utils.abs(groupId.hashCode()) % numPartitions``, with Java's
``String.hashCode`` computed over UTF-16 code units in 32-bit two's-complement arithmetic.
"""

from __future__ import annotations

import struct
from functools import lru_cache

__all__ = ["java_string_hashcode", "java_utils_abs", "partition_for"]

_MASK32 = 0xFFFFFFFF
_INT32_MIN = -0x80000000


def java_string_hashcode(s: str) -> int:
    """Java ``String.hashCode``: ``h = 31*h + c`` over UTF-16 code units, wrapped to int32.

    Characters outside the BMP contribute their two surrogate code units; lone surrogates in the
    Python string are taken as the code unit they denote (as a Java string would hold them).
    """
    h = 0
    if s.isascii():
        for c in s.encode("ascii"):
            h = (31 * h + c) & _MASK32
    else:
        data = s.encode("utf-16-be", "surrogatepass")
        for c in struct.unpack(f">{len(data) // 2}H", data):
            h = (31 * h + c) & _MASK32
    return h - 0x1_0000_0000 if h & 0x80000000 else h


def java_utils_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``0`` for ``Integer.MIN_VALUE``, else the absolute value."""
    return 0 if n == _INT32_MIN else abs(n)


@lru_cache(maxsize=65536)
def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition that owns ``group_id``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return java_utils_abs(java_string_hashcode(group_id)) % num_partitions
