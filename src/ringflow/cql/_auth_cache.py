"""A bounded cache of auth data with a validity period (Cassandra's ``AuthCache``).

Cassandra caches roles and permissions for ``roles_validity`` / ``permissions_validity``
(2000 ms by default): an entry older than that is loaded again, so a change made through any
node is seen by every node within the validity at worst, and the node that made a change drops
its whole cache at once (``invalidate_all``). Rules:

* The clock is passed in (milliseconds, monotonic); nothing here sleeps or spawns.
* At most ``max_entries`` entries (Cassandra's ``roles_cache_max_entries``, 1000): past that the
  oldest entry goes first.
* A load that finds nothing (``None``: no such role) is not cached, so a role created
  elsewhere can log in as soon as its row reaches this node.
* ``validity_ms == 0`` disables caching (Cassandra's behaviour for a zero validity).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from ringflow.errors import InvalidRequest, invariant

K = TypeVar("K")
V = TypeVar("V")

DEFAULT_VALIDITY_MS = 2000
DEFAULT_MAX_ENTRIES = 1000


class ExpiringCache(Generic[K, V]):
    """``get(key, load)``: the cached value while younger than ``validity_ms``, else
    ``load(key)`` (cached unless None)."""

    def __init__(
        self,
        clock_ms: Callable[[], float],
        *,
        validity_ms: int = DEFAULT_VALIDITY_MS,
        max_entries: int = DEFAULT_MAX_ENTRIES,
    ) -> None:
        if validity_ms < 0 or max_entries < 1:
            raise InvalidRequest(
                f"cache validity_ms must be >= 0 and max_entries >= 1, got {validity_ms} and "
                f"{max_entries}"
            )
        self._clock_ms = clock_ms
        self.validity_ms = validity_ms
        self.max_entries = max_entries
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()
        self.loads = 0
        self.hits = 0

    def get(self, key: K, load: Callable[[K], V | None]) -> V | None:
        now = self._clock_ms()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and now - entry[0] < self.validity_ms:
                self.hits += 1
                return entry[1]
        value = load(key)  # outside the lock: a load may read through the cluster
        with self._lock:
            self.loads += 1
            if value is None or self.validity_ms == 0:
                self._entries.pop(key, None)
                return value
            self._entries[key] = (now, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return value

    def cached(self, key: K) -> V | None:
        """What ``get(key, ...)`` would answer from the cache now, or None (it would load)."""
        now = self._clock_ms()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or now - entry[0] >= self.validity_ms:
                return None
            self.hits += 1
            return entry[1]

    def invalidate_all(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def validate(self) -> None:
        invariant(
            len(self._entries) <= self.max_entries,
            f"{len(self._entries)} cache entries over the limit {self.max_entries}",
        )
