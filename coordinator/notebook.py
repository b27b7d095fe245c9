"""Executing ``notebooks/offsets_history.ipynb`` against a warehouse, with its pictures kept.

``make notebook`` and ``tests/test_notebook.py`` both come here, so the notebook runs the one
way everywhere::

    python -m coordinator.notebook --warehouse warehouse/demo \\
        --topic-offsets warehouse/demo/topic_offsets.csv --output docs/offsets_history.ipynb

With ``--upstream HOST:PORT`` instead of ``--topic-offsets``, the lag plot's log ends are asked
of the cluster holding the topics (ListOffsets by time, :mod:`coordinator.admin.upstream_offsets`).

The notebook takes its parameters from environment variables (``COORDINATOR_WAREHOUSE``,
``COORDINATOR_TOPIC_OFFSETS``, ``COORDINATOR_UPSTREAM``, ``COORDINATOR_GROUP``), so a person opening it in Jupyter sets
them the same way. It runs in a fresh ipykernel of this very interpreter (ipykernel's own
``python3`` spec: not one a ``jupyter kernelspec install`` left on the machine for another
Python), from the repository's root. The first cell that fails stops the run with
:class:`nbclient.exceptions.CellExecutionError`. The kernel's Spark driver logs to this
process's terminal, not into the notebook.

Needs the ``dev`` extra (nbclient, nbformat, ipykernel, matplotlib); no Spark in this process.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "offsets_history.ipynb"
#: Where ``make notebook`` keeps the executed copy, pictures included.
EXECUTED = ROOT / "docs" / "offsets_history.ipynb"
#: A cell's time limit: Spark's start in the kernel and the first queries take the longest.
CELL_TIMEOUT_S = 300


def execute(
    warehouse: str | Path,
    *,
    topic_offsets: str | Path | None = None,
    upstream: str | None = None,
    group: str | None = None,
    notebook: Path = NOTEBOOK,
    output: Path | None = None,
    timeout_s: int = CELL_TIMEOUT_S,
) -> Any:
    """Run every cell of ``notebook`` on ``warehouse`` and return the executed notebook
    (an ``nbformat.NotebookNode``), also written to ``output`` when given. Raises
    ``CellExecutionError`` on the first failing cell (and writes nothing)."""
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    env = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    env["COORDINATOR_WAREHOUSE"] = str(Path(warehouse).resolve())
    if topic_offsets is not None:
        env["COORDINATOR_TOPIC_OFFSETS"] = str(Path(topic_offsets).resolve())
    if upstream is not None:
        env["COORDINATOR_UPSTREAM"] = upstream
    if group is not None:
        env["COORDINATOR_GROUP"] = group
    env.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"  # figures into the cells

    nb = nbformat.read(notebook, as_version=4)
    # No kernel directories: only ipykernel's native spec, which runs sys.executable.
    specs = KernelSpecManager(kernel_dirs=[], ensure_native_kernel=True)
    client = NotebookClient(
        nb,
        km=AsyncKernelManager(kernel_name="python3", kernel_spec_manager=specs),
        timeout=timeout_s,
        resources={"metadata": {"path": str(ROOT)}},
        # The JVM writes its log to the kernel's stderr: keep it out of the cells' outputs (and
        # ipykernel's warning that its sockets are local TCP, unencrypted, out of the terminal).
        extra_arguments=["--IPKernelApp.capture_fd_output=False", "--IPKernelApp.log_level=ERROR"],
    )
    client.execute(env=env)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, output)
    return nb


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m coordinator.notebook",
        description="Execute notebooks/offsets_history.ipynb on a warehouse and keep the "
        "executed copy with its pictures.",
    )
    parser.add_argument("--warehouse", default="warehouse/demo", metavar="DIR")
    parser.add_argument(
        "--topic-offsets",
        metavar="FILE",
        help="log-end samples (CSV, JSON lines or a Delta table); the notebook's default: "
        "the warehouse's topic_offsets.csv when there is one",
    )
    parser.add_argument(
        "--upstream",
        metavar="HOST:PORT[,...]",
        help="the cluster holding the topics: the lag plot's log ends asked of it (ListOffsets)",
    )
    parser.add_argument("--group", help="the group to plot (default: most rebalances)")
    parser.add_argument("--output", type=Path, default=EXECUTED, metavar="FILE")
    args = parser.parse_args(argv)
    execute(
        args.warehouse,
        topic_offsets=args.topic_offsets,
        upstream=args.upstream,
        group=args.group,
        output=args.output,
    )
    size = args.output.stat().st_size
    print(f"executed {NOTEBOOK.relative_to(ROOT)} -> {args.output} ({size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
