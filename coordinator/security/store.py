"""Where ACLs and SCRAM credentials live: one JSON document in the warehouse,
``<warehouse>/security/security.json``, replaced atomically.

A change is made under an exclusive ``flock`` on ``security/.lock`` (so two gateways, or a
gateway and ``coordinator acls``, on one warehouse never lose each other's changes): the file
is read again, changed, written to a temporary file in the same directory, flushed to disk
(``fsync``), renamed over the old one and the directory synced. A reader sees the old
document or the new one, never half of one. The directory is created ``0700`` and the file
``0600``: SCRAM credentials are salted and hashed (never the password), but a StoredKey lets
anyone who reads it attack the password offline, as Kafka's own metadata log does.

Gateways notice a change made elsewhere within ``reload_interval_s`` (they stat the file).
Without a warehouse the store lives in memory and is lost when the gateway stops.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from coordinator.security.acl import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from coordinator.security.scram import ScramCredential

FORMAT_VERSION = 1
DIRECTORY = "security"
FILE = "security.json"


def _acl_to_json(acl: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": acl.resource_type.name,
        "resource_name": acl.resource_name,
        "pattern_type": acl.pattern_type.name,
        "principal": acl.principal,
        "host": acl.host,
        "operation": acl.operation.name,
        "permission": acl.permission.name,
    }


def _acl_from_json(data: dict[str, Any]) -> AclBinding:
    return AclBinding(
        ResourceType[data["resource_type"]],
        data["resource_name"],
        PatternType[data["pattern_type"]],
        data["principal"],
        data["host"],
        Operation[data["operation"]],
        Permission[data["permission"]],
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _credential_to_json(c: ScramCredential) -> dict[str, Any]:
    return {
        "salt": _b64(c.salt),
        "stored_key": _b64(c.stored_key),
        "server_key": _b64(c.server_key),
        "iterations": c.iterations,
    }


def _credential_from_json(mechanism: str, data: dict[str, Any]) -> ScramCredential:
    return ScramCredential(
        mechanism,
        base64.b64decode(data["salt"]),
        base64.b64decode(data["stored_key"]),
        base64.b64decode(data["server_key"]),
        int(data["iterations"]),
    )


class SecurityStore:
    """ACLs and SCRAM credentials, durable in a warehouse (``warehouse`` None: in memory)."""

    def __init__(self, warehouse: str | Path | None = None, reload_interval_s: float = 0.5):
        self.directory = None if warehouse is None else Path(warehouse) / DIRECTORY
        self.reload_interval_s = reload_interval_s
        self._acls: list[AclBinding] = []
        #: user -> mechanism name -> credential
        self._scram: dict[str, dict[str, ScramCredential]] = {}
        #: grows with every change seen (readers rebuild what they derive from it)
        self.generation = 0
        self._stamp: tuple[int, int, int] | None = None
        self._checked = 0.0
        if self.directory is not None:
            self._load()

    @property
    def path(self) -> Path | None:
        return None if self.directory is None else self.directory / FILE

    # --- reading --------------------------------------------------------------------------

    def acls(self) -> list[AclBinding]:
        self.refresh()
        return list(self._acls)

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        self.refresh()
        return self._scram.get(user, {}).get(mechanism)

    def credentials(self) -> dict[str, dict[str, ScramCredential]]:
        self.refresh()
        return {user: dict(by) for user, by in self._scram.items()}

    def refresh(self, force: bool = False) -> None:
        """Read the file again if it changed (checked at most every ``reload_interval_s``)."""
        if self.directory is None:
            return
        now = time.monotonic()
        if not force and now - self._checked < self.reload_interval_s:
            return
        self._checked = now
        if self._file_stamp() != self._stamp:
            self._load()

    def _file_stamp(self) -> tuple[int, int, int] | None:
        assert self.path is not None
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _load(self) -> None:
        assert self.path is not None
        stamp = self._file_stamp()
        data: dict[str, Any] = {}
        if stamp is not None:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("format_version") != FORMAT_VERSION:
                raise ValueError(f"{self.path}: unknown format {data.get('format_version')}")
        self._acls = [_acl_from_json(a) for a in data.get("acls", [])]
        self._scram = {
            user: {m: _credential_from_json(m, c) for m, c in by.items()}
            for user, by in data.get("scram_credentials", {}).items()
        }
        self._stamp = stamp
        self.generation += 1

    # --- changing -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _change(self) -> Iterator[None]:
        """Hold the lock, start from the latest document, and write it back at the end."""
        if self.directory is None:
            yield
            self.generation += 1
            return
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._load()
            yield
            self._write()
            self._load()
        finally:
            os.close(lock)  # releases the lock

    def _write(self) -> None:
        assert self.directory is not None and self.path is not None
        document = {
            "format_version": FORMAT_VERSION,
            "acls": [_acl_to_json(a) for a in sorted(set(self._acls))],
            "scram_credentials": {
                user: {m: _credential_to_json(c) for m, c in sorted(by.items())}
                for user, by in sorted(self._scram.items())
                if by
            },
        }
        fd, temporary = tempfile.mkstemp(prefix=".security-", dir=self.directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(document, out, indent=1)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(temporary, 0o600)
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def add_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Add ACLs (already validated); an ACL already present stays once."""
        with self._change():
            present = set(self._acls)
            for binding in bindings:
                if binding not in present:
                    self._acls.append(binding)
                    present.add(binding)

    def delete_acls(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Delete the ACLs each filter matches; per filter, the ACLs it matched."""
        with self._change():
            matched = [[a for a in self._acls if f.matches(a)] for f in filters]
            gone = {a for group in matched for a in group}
            self._acls = [a for a in self._acls if a not in gone]
        return matched

    def alter_scram(
        self,
        upsertions: Iterable[tuple[str, ScramCredential]],
        deletions: Iterable[tuple[str, str]],
    ) -> None:
        """Set (user, credential) pairs and delete (user, mechanism) pairs, in one change."""
        with self._change():
            for user, mechanism in deletions:
                self._scram.get(user, {}).pop(mechanism, None)
                if not self._scram.get(user, True):
                    del self._scram[user]
            for user, credential in upsertions:
                self._scram.setdefault(user, {})[credential.mechanism] = credential
