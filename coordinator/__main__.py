"""``python -m coordinator`` is the ``coordinator`` console script."""

import sys

from coordinator.cli import main

sys.exit(main())
