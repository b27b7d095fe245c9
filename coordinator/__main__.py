"""``python -m coordinator`` is the ``coordinator`` console script."""

import sys

from coordinator.cli import main

# Guarded: a process the CLI spawns (multiprocessing's "spawn") imports this module again.
if __name__ == "__main__":
    sys.exit(main())
