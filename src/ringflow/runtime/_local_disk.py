"""The real disk: one directory per node, whole files, append-only files and SQLite databases.

The asyncio shell's implementation of ``Disk`` (``_interfaces.py``); the simulator's ``SimDisk``
(``ringflow.sim._disk``) extends it with crash and power-loss modelling. Rules:

* **Names, not paths.** Callers pass relative names of ``[A-Za-z0-9_.-]`` segments joined by
  ``/``; ``..``, absolute paths and hidden names are refused, so node code cannot escape its
  directory. Temporary files of atomic writes use a hidden ``.tmp`` suffix that listing skips.
* **Durability.** ``write_bytes_atomic`` writes a temporary file, fsyncs it, renames it over the
  target and fsyncs the directory (the classic recipe; rename is atomic on POSIX), so a reader
  sees the old or the new content, never a mix. ``append_bytes`` goes to the page cache only;
  ``sync`` fsyncs the file (and its directory, for a file that was just created).
* **Ownership.** ``open_sqlite`` connections and ``adopt``-ed resources belong to the disk and are
  closed by ``close``. A SQLite connection closed with a transaction open rolls it back, which is
  also what SQLite's recovery does after a crash.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Final

from ringflow.errors import invariant
from ringflow.runtime._interfaces import Disk, DiskError, SupportsClose

_SEGMENT_RE: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_TMP_SUFFIX: Final = ".tmp"
MAX_NAME_LENGTH: Final = 255
MAX_OPEN_RESOURCES: Final = 1024
"""Connections and adopted resources one disk may own at once (a leak fails loudly)."""


def check_name(name: object) -> str:
    """Validate a disk file name (see the module docstring); return it."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_LENGTH:
        raise DiskError(f"a disk name is a non-empty str of <= {MAX_NAME_LENGTH} chars: {name!r}")
    for segment in name.split("/"):
        if not _SEGMENT_RE.match(segment) or segment.endswith(_TMP_SUFFIX):
            raise DiskError(
                f"disk name {name!r}: segment {segment!r} must match {_SEGMENT_RE.pattern} "
                f"and not end with {_TMP_SUFFIX}"
            )
    return name


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class LocalDisk:
    """``Disk`` over a real directory (created if missing)."""

    def __init__(
        self, root: Path, *, fsync: bool = True, max_open_resources: int = MAX_OPEN_RESOURCES
    ) -> None:
        self._root = Path(root)
        self._root.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._max_open_resources = max_open_resources
        self._resources: list[SupportsClose] = []
        self._closed = False

    @property
    def root(self) -> Path:
        return self._root

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise DiskError(f"disk {self._root} is closed")

    def path_of(self, name: str) -> Path:
        """The real path behind ``name`` (for code that opens files itself; prefer ``adopt``)."""
        return self._root / check_name(name)

    def open_sqlite(self, name: str) -> sqlite3.Connection:
        """Open (creating) the SQLite database ``name``; autocommit mode, the disk owns it."""
        path = self._prepare(name)
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.adopt(connection)
        return connection

    def adopt(self, resource: SupportsClose) -> None:
        """Make the disk close ``resource`` when it closes (or, simulated, crashes)."""
        self._check_open()
        self._resources = [r for r in self._resources if not _is_closed(r)]
        if len(self._resources) >= self._max_open_resources:
            raise DiskError(f"disk {self._root} owns {len(self._resources)} open resources")
        self._resources.append(resource)

    def read_bytes(self, name: str) -> bytes:
        self._check_open()
        path = self.path_of(name)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise DiskError(f"no file {name!r} on disk {self._root}") from None

    def write_bytes_atomic(self, name: str, data: bytes) -> None:
        """Replace ``name`` with ``data``; durable (and all-or-nothing) when this returns."""
        path = self._prepare(name)
        temporary = path.with_name(path.name + _TMP_SUFFIX)
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            if self._fsync:
                os.fsync(handle.fileno())
        os.replace(temporary, path)
        if self._fsync:
            _fsync_directory(path.parent)
        self._note_synced(name, len(data))

    def append_bytes(self, name: str, data: bytes) -> int:
        """Append ``data`` to ``name`` (created if missing); not durable until ``sync``.

        Returns the file's length after the append.
        """
        path = self._prepare(name)
        with open(path, "ab") as handle:
            handle.write(data)
            return handle.tell()

    def sync(self, name: str) -> None:
        """Make everything appended to ``name`` so far durable."""
        self._check_open()
        path = self.path_of(name)
        try:
            with open(path, "rb+") as handle:
                if self._fsync:
                    os.fsync(handle.fileno())
                length = handle.seek(0, os.SEEK_END)
        except FileNotFoundError:
            raise DiskError(f"no file {name!r} on disk {self._root}") from None
        if self._fsync:
            _fsync_directory(path.parent)
        self._note_synced(name, length)

    def exists(self, name: str) -> bool:
        self._check_open()
        return self.path_of(name).is_file()

    def list_names(self) -> list[str]:
        """Every file name on the disk, sorted (temporary files excluded)."""
        self._check_open()
        names = []
        for path in self._root.rglob("*"):
            relative = path.relative_to(self._root).as_posix()
            if path.is_file() and not path.name.endswith(_TMP_SUFFIX):
                names.append(relative)
        return sorted(names)

    def remove(self, name: str) -> None:
        self._check_open()
        try:
            self.path_of(name).unlink()
        except FileNotFoundError:
            raise DiskError(f"no file {name!r} on disk {self._root}") from None
        self._note_removed(name)

    def close(self) -> None:
        """Close every owned resource (uncommitted SQLite transactions roll back)."""
        resources, self._resources = self._resources, []
        for resource in reversed(resources):
            resource.close()
        self._closed = True

    def validate(self) -> None:
        invariant(self._root.is_dir(), f"disk root {self._root} is not a directory")
        invariant(
            len(self._resources) <= self._max_open_resources,
            f"disk {self._root} owns {len(self._resources)} resources",
        )

    # --- hooks for the simulated disk ----------------------------------------------------------

    def _prepare(self, name: str) -> Path:
        self._check_open()
        path = self.path_of(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _note_synced(self, name: str, length: int) -> None:
        """``name`` is durable up to ``length`` bytes (the simulator tracks this)."""

    def _note_removed(self, name: str) -> None:
        """``name`` was removed (the simulator tracks this)."""

    def _reopen(self) -> None:
        """Forget owned resources after they were closed, and accept calls again."""
        self._resources = []
        self._closed = False


def _is_closed(resource: SupportsClose) -> bool:
    if isinstance(resource, sqlite3.Connection):
        try:
            resource.total_changes  # noqa: B018 - raises ProgrammingError when closed
        except sqlite3.ProgrammingError:
            return True
    return False


def _conforms(disk: LocalDisk) -> Disk:
    """Never called: makes mypy prove ``LocalDisk`` implements ``Disk``."""
    return disk
