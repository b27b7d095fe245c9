"""Go clients as test fixtures: the small programs under ``tests/clients/go/``, built once per
run with Debian's golang-go in GOPATH mode against Debian's packaged libraries
(``/usr/share/gocode``), as ``.ci/run`` installs them. A test that needs one is skipped, with
the reason, where the toolchain or the library is not installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "clients" / "go"
GOCODE = Path("/usr/share/gocode")
#: Each fixture's library, as Debian installs it, and the package that brings it.
LIBRARIES = {
    "sarama_group": ("github.com/Shopify/sarama", "golang-github-shopify-sarama-dev"),
    "kafkago_group": ("github.com/segmentio/kafka-go", "golang-github-segmentio-kafka-go-dev"),
}
BUILD_TIMEOUT_S = 600


class GoBuilds:
    """Builds fixtures into a directory of the run, each at most once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._built: dict[str, Path] = {}

    def binary(self, name: str) -> Path:
        if name in self._built:
            return self._built[name]
        library, package = LIBRARIES[name]
        if shutil.which("go") is None:
            pytest.skip("Go is not installed (Debian's golang-go; .ci/run installs it)")
        if not (GOCODE / "src" / library).is_dir():
            pytest.skip(f"{library} is not installed (Debian's {package}; .ci/run installs it)")
        out = self.root / name
        env = {
            **os.environ,
            "GO111MODULE": "off",
            "GOPATH": f"{GOCODE}:{self.root / 'gopath'}",
            "GOCACHE": str(self.root / "cache"),
            "GOFLAGS": "",
        }
        built = subprocess.run(
            ["nice", "-n", "19", "go", "build", "-o", str(out), "."],
            cwd=FIXTURES / name,
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        if built.returncode != 0:
            raise AssertionError(f"go build of {name} failed:\n{built.stderr}")
        self._built[name] = out
        return out


def run_fixture(binary: Path, *args: str, timeout_s: float = 180) -> list[dict[str, Any]]:
    """Run a built fixture to its end; the JSON lines it printed (what it read). A failure
    shows its log (stderr)."""
    done = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise AssertionError(
            f"{binary.name} {' '.join(args)} exited {done.returncode}:\n{done.stderr[-6000:]}"
        )
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
