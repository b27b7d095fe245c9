"""Operator tools over the Spark job's warehouse: no Spark, answers in about a second.

- :mod:`~coordinator.admin.tables` reads the Delta tables with delta-rs and pyarrow, at a
  consistent cut (a whole micro-batch), now or as of a time or a log version;
- :mod:`~coordinator.admin.history` derives committed offsets, generations and rebalances
  from log and history rows (pure: the Spark queries of :mod:`coordinator.queries` run the
  same functions per group);
- :mod:`~coordinator.admin.topic_offsets` reads what the coordinator cannot know: the topics'
  log start and end offsets over time, as the operator supplies them;
- :mod:`~coordinator.admin.upstream_offsets` asks them of the cluster that holds the topics
  (ListOffsets), as Kafka's tool asks its brokers;
- :mod:`~coordinator.admin.groups` is ``coordinator groups``: Kafka's
  ``kafka-consumer-groups.sh`` over the tables, with changes sent to the job as requests.
"""
