"""A node's replica-side capture (seed 002; REPLICATION.md decisions 1-2; issue 14 §1): the
configuration the node gives its store, the range resolver, and the seal timer.

``ReplicaCapture`` wires the storage layer's capture (``Store.capture``) into a cluster node:

* ``prepare()`` (on the storage thread, before the node listens): indexes the CDC generations'
  descriptions the node has (the ones ``CdcMetadata`` holds, and every generation whose internal
  description rows the store keeps, ``system_distributed_everywhere.
  cdc_generation_descriptions_v2``, so rows of older generations, replayed as hints or streamed,
  still find their range) and enables capture with ``CaptureConfig(node id, settings,
  resolver, clock, cap)``.
* The resolver (``StreamRangeResolver``) maps a log row's stream to the vnode range of its
  generation (``replication.StreamRanges``); a stream it does not know makes it index the
  metadata's current descriptions again (a generation learnt since), and if that does not help
  the store files the row under the whole ring and counts it (``unresolved_rows``).
* ``start()``: every ``SEAL_INTERVAL_MS``, off the node's thread (``offload``, like all store
  work): index new generations, seal every due slice (by the node's clock, so an idle table
  seals too), apply the cap's ``drop-oldest`` policy. The slices sealed go to ``on_sealed``
  listeners on the node's thread; every sealed slice also stays listed by
  ``store.capture.slices(sealed=True)`` until dropped, and by ``store.capture.unpublished()``
  until the node published it (``_publication.SlicePublisher`` reads the store, durable across
  a restart, rather than these listeners).
* ``status()``: what the node reports in ``status.json``: ``store.capture.status`` as of the
  last seal round (taken on the storage thread, so the node's thread never waits for the
  store's lock), plus the timer's own counts.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from ringflow.cdc import CdcMetadata, TopologyDescription, description_from_generation_v2_rows
from ringflow.cluster.service._cdc_local import read_generation_v2_rows
from ringflow.errors import RingflowError
from ringflow.replication import SealedSlice, StreamRanges
from ringflow.ring import MIN_TOKEN
from ringflow.runtime import TimerHandle
from ringflow.schema import deserialize
from ringflow.storage import CaptureConfig, CapturedSlice, CaptureStatus, Store, UnknownTable

if TYPE_CHECKING:
    from ringflow.cluster.service._node import ClusterNode
    from ringflow.cluster.service._settings import CaptureSettings

_log = logging.getLogger(__name__)

SEAL_INTERVAL_MS: Final = 1_000
_DESCRIPTION_PAGE_ROWS: Final = 1_000
_STORED_GENERATIONS_MAX: Final = 1_000
_GENERATION_TABLE: Final = ("system_distributed_everywhere", "cdc_generation_descriptions_v2")

SealedListener = Callable[[Sequence[SealedSlice]], None]


def stored_descriptions(store: Store, now_us: int) -> list[TopologyDescription]:
    """Every generation description whose internal v2 rows the store holds (at most
    ``_STORED_GENERATIONS_MAX``; a partial one is skipped with a log line)."""
    try:
        table = store.table(*_GENERATION_TABLE)
    except UnknownTable:  # a store without the system tables (a bare simulated node)
        return []
    id_type = table.column("id").type
    generation_ids: dict[uuid.UUID, None] = {}
    state = None
    while len(generation_ids) < _STORED_GENERATIONS_MAX:
        page = store.scan(
            table, MIN_TOKEN, MIN_TOKEN, page_size=_DESCRIPTION_PAGE_ROWS, paging_state=state,
            columns=("id",), now_s=now_us // 1_000_000,
        )  # fmt: skip
        for row in page.rows:
            value = deserialize(id_type, row.partition_key[0], "id")
            if isinstance(value, uuid.UUID):
                generation_ids[value] = None
        state = page.paging_state
        if state is None:
            break
    descriptions = []
    for generation_id in generation_ids:
        try:
            rows = read_generation_v2_rows(store, generation_id, now_us)
            descriptions.append(description_from_generation_v2_rows(rows))
        except RingflowError as error:
            _log.info("CDC generation %s not indexed for capture: %s", generation_id, error)
    return descriptions


class StreamRangeResolver:
    """``RangeResolver`` of a node: stream -> vnode range of its generation (module docstring).
    Called by the store on the storage thread; ``refresh`` runs there too."""

    def __init__(self, cdc: CdcMetadata) -> None:
        self._cdc = cdc
        self.ranges = StreamRanges()

    def add(self, descriptions: Sequence[TopologyDescription]) -> None:
        for description in descriptions:
            self.ranges.add(description)

    def refresh(self) -> None:
        """Index every description the metadata holds (new ones only cost anything)."""
        cdc = self._cdc
        for timestamp_us in cdc.generation_timestamps_us:
            description = cdc.description_at(timestamp_us // 1000)
            if description is not None:
                self.ranges.add(description)

    def __call__(
        self, _keyspace: str, stream_id: bytes, _write_ts_us: int
    ) -> tuple[int, int] | None:
        found = self.ranges.range_of(stream_id)
        if found is None:
            self.refresh()
            found = self.ranges.range_of(stream_id)
        return found


class ReplicaCapture:
    """A cluster node's capture: config, resolver, seal timer (module docstring)."""

    def __init__(self, cluster: ClusterNode, cdc: CdcMetadata, settings: CaptureSettings) -> None:
        self._cluster = cluster
        self.settings = settings
        self.resolver = StreamRangeResolver(cdc)
        self.on_sealed: list[SealedListener] = []
        """Called on the node's thread with the slices each seal round sealed (publication)."""
        self.sealed_slices = 0
        self.seal_failures = 0
        self._timer: TimerHandle | None = None
        self._stopped = False
        self._busy = False
        self._status: CaptureStatus | None = None

    def prepare(self) -> None:
        """Index the stored generations and enable the store's capture. Blocking: call it on
        the storage thread, before the node accepts writes."""
        cluster = self._cluster
        store = cluster.store
        self.resolver.add(stored_descriptions(store, cluster.clock.now_us()))
        self.resolver.refresh()
        settings = self.settings
        store.capture.enable(
            CaptureConfig(
                cluster.host.host_id,
                self.resolver,
                cluster.clock.now_ms,
                settings.slice_settings,
                cap=settings.cap,
            )
        )

    def start(self) -> None:
        self._schedule()

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()

    def _schedule(self) -> None:
        if not self._stopped:
            self._timer = self._cluster.clock.call_later(SEAL_INTERVAL_MS, self._tick)

    def _tick(self) -> None:
        if self._stopped:
            return
        if self._busy:  # the last round is still running (a slow disk): skip this one
            self._schedule()
            return
        self._busy = True
        self._cluster.offload(self._seal_round, self._sealed)
        self._schedule()

    def _seal_round(self) -> tuple[list[SealedSlice], list[CapturedSlice], CaptureStatus]:
        """On the storage thread: new generations, due slices, the cap, the status."""
        self.resolver.refresh()
        capture = self._cluster.store.capture
        return capture.seal_due(), capture.enforce_cap(), capture.status()

    def _sealed(
        self,
        result: tuple[list[SealedSlice], list[CapturedSlice], CaptureStatus] | None,
        error: BaseException | None,
    ) -> None:
        self._busy = False
        if error is not None or result is None:
            self.seal_failures += 1
            _log.error("sealing captured slices failed", exc_info=error)
            return
        sealed, _dropped, self._status = result
        self.sealed_slices += len(sealed)
        if sealed:
            for listener in self.on_sealed:
                try:
                    listener(sealed)
                except Exception:
                    _log.exception("a sealed-slice listener failed")

    def status(self) -> dict[str, object]:
        """The capture's status for ``status.json``, as of the last seal round (read on the
        node's thread without touching the store)."""
        found = {} if self._status is None else self._status.as_dict()
        return {
            **found,
            "slice_width_s": self.settings.slice_width_s,
            "slice_count": self.settings.slice_count,
            "streams_indexed": len(self.resolver.ranges),
            "sealed_slices": self.sealed_slices,
            "seal_failures": self.seal_failures,
        }
