"""Benchmarks: figures, never tests, kept apart from the product's rooms.

Each module measures one part against a floor or a peer in the same run and prints ratios:

- :mod:`~coordinator.bench.engine`: the engine through its public API (``bench engine``,
  ``bench group``);
- :mod:`~coordinator.bench.assignors`: the client-side assignors (``bench assignors``);
- :mod:`~coordinator.bench.stream`: the Spark job's latency and throughput against floors
  (``bench stream``), with :mod:`~coordinator.bench.tws`, the ``transformWithStateInPandas``
  alternative it measures;
- :mod:`~coordinator.bench.operator`: where a request's CPU goes in the job's state function,
  without Spark (``bench operator``);
- :mod:`~coordinator.bench.soak`: the job under members that crash, minute by minute
  (``bench soak``);
- :mod:`~coordinator.bench.groups`: ``coordinator groups`` on a large warehouse (``bench groups``);
- :mod:`~coordinator.bench.gateway`: the gateway against Kafka-protocol peers
  (``bench gateway``);
- :mod:`~coordinator.bench.delta_log`: a commit's cost against the length of ``_delta_log``,
  and the log's length under the sink's retention (``python -m coordinator.bench.delta_log``).
"""
