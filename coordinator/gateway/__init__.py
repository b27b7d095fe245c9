"""A Kafka wire-protocol gateway in front of the coordinator.

:mod:`codec` frames and decodes with kio, :mod:`apis` translates between Kafka's messages and the
engine's request dicts, :mod:`embedded` runs the engine in process on the wall clock with the
Delta log, :mod:`server` is the asyncio TCP server, :mod:`cli` the ``coordinator gateway``
command."""
