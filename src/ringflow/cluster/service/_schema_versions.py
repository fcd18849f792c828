"""The schema versions a node sees, pure (seed 004 "announce/push", issue 21 §2): its own, the
ones its peers gossip, when to ask a peer for its schema and who disagrees.

Rules (the shell, ``SchemaSync``, sends, merges and answers the waiters):

* A peer gossiping a version that is not ours is asked for its schema (``PullSchema``) at
  once, but at most once per ``PULL_MIN_GAP_MS`` per peer, however often its version changes.
* ``recheck`` (every gossip round) asks again every live peer that still gossips another
  version, ``SCHEMA_PULL_INTERVAL_MS`` after it was last asked: the periodic safety net for a
  lost push or pull.
* ``disagreement`` names the live nodes gossiping another version than ours, or none yet.
* Our version changes (``changed``) after a DDL here and after a merge that changed the schema;
  the caller gossips it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ringflow.errors import invariant

SCHEMA_PULL_INTERVAL_MS = 2_000
PULL_MIN_GAP_MS = 500
"""Pulls from one peer are at least this far apart, however often it gossips a new version."""


@dataclass(frozen=True, slots=True)
class PullSchema:
    """Ask ``endpoint`` for its schema partitions (SCHEMA_PULL_REQ)."""

    endpoint: str


class SchemaVersions:
    """Our schema version and the pacing of pulls (module docstring)."""

    __slots__ = ("_last_pull_ms", "local_endpoint", "version")

    def __init__(self, local_endpoint: str, version: uuid.UUID) -> None:
        self.local_endpoint = local_endpoint
        self.version = str(version)
        """Ours, as gossiped."""
        self._last_pull_ms: dict[str, int] = {}

    def changed(self, version: uuid.UUID) -> None:
        self.version = str(version)

    def peer_version(self, endpoint: str, version: str, now_ms: int) -> PullSchema | None:
        """``endpoint`` gossips ``version``: a pull when it is not ours and the peer was not
        asked in the last ``PULL_MIN_GAP_MS``."""
        if endpoint == self.local_endpoint or version == self.version:
            return None
        if now_ms - self._last_pull_ms.get(endpoint, -SCHEMA_PULL_INTERVAL_MS) < PULL_MIN_GAP_MS:
            return None
        self._last_pull_ms[endpoint] = now_ms
        return PullSchema(endpoint)

    def recheck(self, gossiped: Iterable[tuple[str, str]], now_ms: int) -> list[PullSchema]:
        """Pulls from the live peers in ``gossiped`` (endpoint, version) that still differ,
        each ``SCHEMA_PULL_INTERVAL_MS`` after its last pull."""
        pulls = []
        for endpoint, version in gossiped:
            last = self._last_pull_ms.get(endpoint, -SCHEMA_PULL_INTERVAL_MS)
            if now_ms - last >= SCHEMA_PULL_INTERVAL_MS:
                pull = self.peer_version(endpoint, version, now_ms)
                if pull is not None:
                    pulls.append(pull)
        return pulls

    def disagreement(
        self,
        live: Iterable[str],
        version_of: Callable[[str], str | None],
        address_of: Callable[[str], str],
    ) -> dict[str, str | None]:
        """The ``live`` peers whose gossiped version (``version_of``) is not ours or not known
        yet, by ``address_of`` them, with the version they gossip."""
        found: dict[str, str | None] = {}
        for endpoint in live:
            gossiped = version_of(endpoint)
            if gossiped != self.version:
                found[address_of(endpoint)] = gossiped
        return found

    def forget(self, endpoints: Iterable[str]) -> None:
        """Endpoints no longer known: their pull times go (the table stays bounded by the
        peers the node knows)."""
        for endpoint in endpoints:
            self._last_pull_ms.pop(endpoint, None)

    def pulled(self) -> frozenset[str]:
        """The peers asked for their schema so far (and not forgotten)."""
        return frozenset(self._last_pull_ms)

    def validate(self) -> None:
        invariant(
            self.local_endpoint not in self._last_pull_ms,
            "the node asked itself for its schema",
        )
