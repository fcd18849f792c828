"""The simulated disk: a real temporary directory per process, with crash and power-loss models.

A simulated process gets a ``SimDisk``: a ``LocalDisk`` (``ringflow.runtime``) over its own
directory under the simulation's data root, so real SQLite code runs unchanged inside the
simulator. The disk outlives the process: crash and restart hand the same directory to the next
incarnation.

What a crash does (``crash``):

* Every SQLite connection opened through ``open_sqlite``, and every resource passed to
  ``adopt``, is closed without committing. SQLite rolls back an open transaction when its
  connection closes, which is exactly the state its recovery reaches after a ``kill -9``
  (rollback journal: the hot journal is played back; WAL: frames after the last commit frame
  are ignored). So an uncommitted transaction disappears and a committed one survives. The old
  incarnation's connection objects are closed: touching one raises ``sqlite3.ProgrammingError``
  instead of silently writing into the next incarnation's database.
* With ``power_loss=True`` appends that were never ``sync``-ed are cut off: each file is
  truncated to the length it had at its last ``sync`` (or ``write_bytes_atomic``), and a file
  created by ``append_bytes`` and never synced disappears, since its directory entry was not
  made durable either.

What it cannot model, because the bytes live on a real filesystem:

* Loss of SQLite data that was committed but not fsynced (``synchronous=NORMAL``/``OFF``) on
  power loss: SQLite's own files always survive a simulated crash. Likewise files written
  behind the disk's back (through ``path_of``) keep everything on power loss.
* Torn or reordered page writes, bit rot, misdirected writes, a full disk, I/O errors and
  slow I/O: nothing here injects them (a future ``BUGGIFY``-style hook, §A2.1, could).
* fsync cost: the simulator skips real fsyncs by default (``fsync=False``) and tracks
  durability instead, so simulated runs stay fast.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import final

from ringflow.errors import invariant
from ringflow.runtime import MAX_OPEN_RESOURCES, LocalDisk


@final
class SimDisk(LocalDisk):
    """``LocalDisk`` that remembers what is durable and can crash."""

    def __init__(
        self, root: Path, *, fsync: bool = False, max_open_resources: int = MAX_OPEN_RESOURCES
    ) -> None:
        super().__init__(root, fsync=fsync, max_open_resources=max_open_resources)
        self._synced_bytes: dict[str, int] = {}
        self._unsynced: dict[str, None] = {}
        self.crashes = 0

    def append_bytes(self, name: str, data: bytes) -> int:
        length = super().append_bytes(name, data)
        if data:
            self._unsynced[name] = None
        return length

    def synced_bytes(self, name: str) -> int | None:
        """Bytes of ``name`` that would survive a power loss (None: the file would not)."""
        return self._synced_bytes.get(name)

    def _note_synced(self, name: str, length: int) -> None:
        self._synced_bytes[name] = length
        self._unsynced.pop(name, None)

    def _note_removed(self, name: str) -> None:
        self._synced_bytes.pop(name, None)
        self._unsynced.pop(name, None)

    def crash(self, *, power_loss: bool = False) -> None:
        """Lose the process: close owned resources uncommitted; on power loss, unsynced bytes."""
        self.close()
        if power_loss:
            for name in sorted(self._unsynced):
                self._lose_unsynced(name)
            self._unsynced.clear()
        self.crashes += 1
        self._reopen()

    def _lose_unsynced(self, name: str) -> None:
        path = self.path_of(name)
        synced = self._synced_bytes.get(name)
        if not path.exists():
            return
        if synced is None:
            path.unlink()
            return
        invariant(path.stat().st_size >= synced, f"{name} shrank below its synced length")
        os.truncate(path, synced)

    def validate(self) -> None:
        super().validate()
        for name, length in self._synced_bytes.items():
            path = self.path_of(name)
            invariant(path.exists(), f"synced file {name} vanished")
            invariant(path.stat().st_size >= length, f"{name} is shorter than its synced length")
