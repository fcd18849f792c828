"""A node's view of the replication channels, and each table's slicing from them (issue 14 §1,
REPLICATION.md decisions 2 and 4).

Every ``interval_ms`` (default 2 s) the node reads ``system_replication.channels`` through its
coordinator at QUORUM (a full scan: the table holds a row per channel) and slices each source
table as its channels say (``replication.table_slice_settings``), so every replica of a table
slices it the same way; a table without a channel keeps the node's default (``--slice-width-s``,
``--slice-count``). The settings apply to rows captured from then on (``StoreCapture.
update_settings``, on the storage thread): a row a replica captured just before its read and
another just after may land in slices of different widths, which costs a digest mismatch (a
send of each copy), never a loss. The store keeps the slicing, so a restarted node slices as
before from its first row on, not by its default until its first read.

A failed read changes nothing (the last settings stay; logged on the first failure of a run
and counted). Channels that disagree on a table's slicing (``channel create`` refuses that)
keep the last settings too, with an error logged. A row that does not decode as a channel is
named in ``unreadable``: the synch-delete round refuses to drop anything while one exists (it
could be a channel that holds data back).

``refresh(done)`` reads now (synch-delete asks for a fresh read every round; the periodic
read is skipped when one is younger than the interval, so a node reads the channels about
once per interval either way).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ringflow.cluster._consistency import ConsistencyLevel
from ringflow.cluster.service._cdc_tables import RowValues, scan_rows
from ringflow.cluster.service._periodic import PeriodicRounds
from ringflow.cql import DISTRIBUTED_TABLES
from ringflow.errors import RingflowError
from ringflow.replication import (
    CHANNELS_TABLE,
    REPLICATION_KEYSPACE,
    Channel,
    SliceSettings,
    channel_from_row,
    table_slice_settings,
)

if TYPE_CHECKING:
    from ringflow.cluster.service._node import ClusterNode

_log = logging.getLogger(__name__)

CHANNEL_WATCH_INTERVAL_MS: Final = 2_000
CHANNELS_MAX: Final = 10_000
"""Most channel rows a read keeps (more is an operator's mistake; the rest are unreadable)."""


@dataclass(frozen=True, slots=True)
class ChannelRead:
    """One read of the channels table: the channels that decode, by name, the names (or keys)
    of the rows that do not, and when."""

    channels: tuple[Channel, ...]
    unreadable: tuple[str, ...]
    read_ms: int


ChannelsDone = Callable[[ChannelRead | None, BaseException | None], None]


class ChannelWatch:
    """The node's channels and the per-table slicing they imply (module docstring)."""

    def __init__(
        self,
        cluster: ClusterNode,
        default: SliceSettings,
        *,
        interval_ms: int = CHANNEL_WATCH_INTERVAL_MS,
    ) -> None:
        self._cluster = cluster
        self.default = default
        self._table = DISTRIBUTED_TABLES[REPLICATION_KEYSPACE, CHANNELS_TABLE]
        self.last: ChannelRead | None = None
        self.table_settings: dict[tuple[str, str], SliceSettings] = {}
        """The slicing applied to the capture, by (keyspace, table) (others: ``default``)."""
        self.reads = 0
        self.failures = 0
        self.last_error: str | None = None
        self._interval_ms = interval_ms
        self._rounds = PeriodicRounds(cluster.clock, interval_ms, self._round, "channel watch")

    def start(self) -> None:
        # the slicing the store kept from before a restart is in force until the first read
        self.table_settings = self._cluster.store.capture.table_settings()
        self._rounds.start()

    def stop(self) -> None:
        self._rounds.stop()

    def settings_for(self, keyspace: str, table: str) -> SliceSettings:
        return self.table_settings.get((keyspace, table), self.default)

    def _round(self, finish: Callable[[], None]) -> None:
        last = self.last
        if last is not None and self._cluster.clock.now_ms() - last.read_ms < self._interval_ms:
            finish()  # read meanwhile (synch-delete refreshes every round): not again
            return
        self.refresh(lambda _read, _error: finish())

    def refresh(self, done: ChannelsDone) -> None:
        """Read the channels now at QUORUM; apply their slicing; ``done(read, error)``."""

        def read(rows: list[RowValues] | None, error: BaseException | None) -> None:
            if error is not None or rows is None:
                self._failed(error or RingflowError("no answer"))
                done(None, error or RingflowError("channels read without an answer"))
                return
            found = self._decoded(rows)
            self.last = found
            self.reads += 1
            if self.last_error is not None:
                _log.info("replication channels read again (%d)", len(found.channels))
                self.last_error = None
            self._apply(found.channels)
            done(found, None)

        scan_rows(self._cluster, self._table, ConsistencyLevel.QUORUM, read)

    def _decoded(self, rows: list[RowValues]) -> ChannelRead:
        channels: list[Channel] = []
        unreadable: list[str] = []
        for row in rows[:CHANNELS_MAX]:
            try:
                channels.append(channel_from_row(row))
            except RingflowError as error:
                name = str(row.get("name"))
                unreadable.append(name)
                _log.warning("replication channel %r is unreadable: %s", name, error)
        unreadable.extend(str(row.get("name")) for row in rows[CHANNELS_MAX:])
        channels.sort(key=lambda channel: channel.name)
        now_ms = self._cluster.clock.now_ms()
        return ChannelRead(tuple(channels), tuple(unreadable), now_ms)

    def _failed(self, error: BaseException) -> None:
        self.failures += 1
        if self.last_error is None:
            _log.warning("reading the replication channels failed (retrying): %s", error)
        self.last_error = f"{type(error).__name__}: {error}"

    def _apply(self, channels: tuple[Channel, ...]) -> None:
        try:
            wanted = table_slice_settings(channels)
        except RingflowError as error:
            _log.error("replication channels disagree, slicing unchanged: %s", error)
            return
        if wanted == self.table_settings:
            return
        capture = self._cluster.store.capture

        def applied(_result: object, error: BaseException | None) -> None:
            if error is not None:
                _log.error("applying the channels' slicing failed", exc_info=error)
                return
            for (keyspace, table), settings in sorted(wanted.items()):
                if self.table_settings.get((keyspace, table)) != settings:
                    _log.info(
                        "table %s.%s sliced %d s x %d from now on (its channels)",
                        keyspace, table, settings.slice_width_s, settings.slice_count,
                    )  # fmt: skip
            self.table_settings = wanted

        self._cluster.offload(lambda: capture.update_settings(wanted), applied)

    def status(self) -> dict[str, object]:
        last = self.last
        return {
            "channels": None if last is None else len(last.channels),
            "unreadable": [] if last is None else list(last.unreadable),
            "read_ms": None if last is None else last.read_ms,
            "reads": self.reads,
            "failures": self.failures,
            "last_error": self.last_error,
            "sliced_by_channels": _described(self.table_settings),
        }


def _described(settings: Mapping[tuple[str, str], SliceSettings]) -> dict[str, str]:
    return {
        f"{keyspace}.{table}": f"{value.slice_width_s} s x {value.slice_count}"
        for (keyspace, table), value in sorted(settings.items())
    }
