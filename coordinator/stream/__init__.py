"""The Spark Structured Streaming adapter: the job, its inbox, its Delta tables, its clients.

Only this package (and the CLI commands that use it) imports Spark, pandas, pyarrow or delta-rs;
the engine in the rest of :mod:`coordinator` stays pure.
"""
