"""The coordinator job for ``spark-submit``:

    spark-submit --master spark://HOST:7077 jobs/coordinator_job.py --warehouse /shared/wh

The same job as ``coordinator run`` and the same options (``--rebuild-from-log`` included).
The workers need the ``kafka-group-coordinator`` package importable (install it in their
Python, or ship it with ``--py-files``); the warehouse and checkpoint must be on storage every
executor shares.
"""

from __future__ import annotations

import argparse
import sys

from coordinator.cli.run import add_job_options, configure_logging, settings_from
from coordinator.stream import job


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="coordinator_job.py", description=__doc__)
    add_job_options(parser)
    args = parser.parse_args(argv)
    settings = settings_from(args)
    configure_logging(args.quiet, job.log_dir(settings), verbose=args.verbose)
    return job.run(
        settings, args.master, rebuild_from_log=args.rebuild_from_log, verbose=args.verbose
    )


if __name__ == "__main__":
    sys.exit(main())
