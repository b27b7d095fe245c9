"""A class-data-sharing archive of Spark's classes for the test run's JVMs.

Every Spark test starts a JVM: the shared session of each pytest worker, and every job a test
runs as a subprocess (``coordinator run``, the kill -9 loops' restarts, the service and
ownership tests, notebooks). Most of a short-lived JVM's start is loading and verifying some
15,000 of Spark's classes. A dynamic CDS archive (JDK 13+: ``-XX:ArchiveClassesAtExit`` once,
``-XX:SharedArchiveFile`` after) maps them from one file instead. Measured on the 2-core box
(a ``local[2]`` session, a sum and a group-by, stopped; three runs each, load average about
20): 7.9-8.6 s of the JVM's CPU without the archive, 3.8-4.4 s with it.

The archive is made once per virtualenv (``.venv/spark-cds/``), beside the first tests of the
first run, by running the job for a few idle seconds with ``-XX:ArchiveClassesAtExit``; it is
written under another name and renamed into place once whole, and named after what it depends
on (pyspark's version, the ``java`` binary and the JVM options), so a change of any of them
makes a new one. A JVM that starts before it is in place, or cannot use it (another class
path, other options), starts as it would without it: ``-Xlog:cds*=off`` keeps the JVM from
printing why. The product's JVMs never get it: only
:data:`tests.conftest`'s ``SPARK_SUBMIT_OPTS`` names it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from coordinator.bench.soak import kill_session, session_processes

#: The JVM options of the test run, archive or not (see tests/conftest.py).
BASE_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
#: Keeps a JVM quiet about an archive it cannot use, and the training run about the classes
#: it leaves out.
QUIET = "-Xlog:cds*=off"
#: How long the training job idles before it stops (s): its first batches load the classes.
TRAINING_IDLE_S = 5


def archive_path(options: str = BASE_OPTIONS) -> Path | None:
    """Where this virtualenv's archive for ``options`` lives; None without ``java``."""
    java = shutil.which("java", path=_java_path())
    if java is None:
        return None
    import pyspark

    key = f"{pyspark.__version__}|{os.path.realpath(java)}|{options}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return Path(sys.prefix) / "spark-cds" / f"spark-{pyspark.__version__}-{digest}.jsa"


def java_options(options: str = BASE_OPTIONS) -> str:
    """``options``, plus the archive: a JVM started before it exists starts without it."""
    archive = archive_path(options)
    if archive is None:
        return options
    return f"{options} -XX:SharedArchiveFile={archive} {QUIET}"


def make_in_background(options: str = BASE_OPTIONS) -> threading.Thread | None:
    """Start making the archive beside the tests unless it exists (the JVMs that start before
    it is in place start without it); the thread, to be joined at the end of the run."""
    archive = archive_path(options)
    if archive is None or archive.is_file():
        return None
    thread = threading.Thread(target=ensure_archive, args=(options,), name="spark-cds")
    thread.start()
    return thread


def ensure_archive(options: str = BASE_OPTIONS, timeout_s: float = 600) -> Path | None:
    """Make the archive unless it exists; its path, or None when it could not be made (the
    run then goes on without it)."""
    archive = archive_path(options)
    if archive is None or archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="spark-cds-") as scratch:
        partial = archive.with_suffix(f".{os.getpid()}.partial")
        env = dict(
            os.environ,
            SPARK_SUBMIT_OPTS=f"{options} -XX:ArchiveClassesAtExit={partial} {QUIET}",
        )
        command = [
            sys.executable,
            "-m",
            "coordinator",
            "run",
            "--warehouse",
            str(Path(scratch) / "warehouse"),
            "--stop-when-idle",
            str(TRAINING_IDLE_S),
        ]
        # The JVM writes the archive as it exits, after the driver: the whole session is
        # waited for.
        proc = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        try:
            proc.wait(timeout=timeout_s)
            while session_processes(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
        except subprocess.TimeoutExpired:
            pass
        finished = proc.poll() == 0 and not session_processes(proc.pid)
        kill_session(proc)
        if not finished or not partial.is_file():
            partial.unlink(missing_ok=True)  # none, or its dump cut short
            return None
        partial.replace(archive)
    return archive


def _java_path() -> str:
    java_home = os.environ.get("JAVA_HOME")
    path = os.environ.get("PATH", "")
    return f"{java_home}/bin{os.pathsep}{path}" if java_home else path
