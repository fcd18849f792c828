"""One channel of ``ringflow replicate`` through schema changes of its source (issue 15).

A :class:`ChannelRun` is what the job keeps of a channel: its destination, built for one version
of the source table, the query reading that version, and, while the destination cannot take the
source table, why (``waiting``) and when to look again.

Rules:

- A query that failed with :class:`~ringflow.pipeline.SourceSchemaChanged` is followed
  (:func:`follow_source`): the source table is loaded again, the destination rebuilt for it (the
  hub and PostgreSQL get the new columns when the channel may alter them, the lake takes a new
  schema version) and the job restarts the query from its checkpoint with that table. It is not
  a failure: it counts no retry. The job stops and follows the other channels reading another
  table at the same time: they would meet the change at their next batch.
- A destination that cannot take the table (altering not allowed, a clashing column) leaves
  the channel waiting with the destination's message (the statements to run); so does a source
  that cannot be loaded. The job looks again after ``recheck_delay_s``, doubling from
  ``RECHECK_MIN_S`` to ``recheck_max_s`` (default ``RECHECK_MAX_S``), and restarts the query
  once it can: from its checkpoint, so the changes of the waiting time are all delivered.
  Other channels go on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cassandra.cluster import Cluster

from ringflow.pipeline._cluster_client import cluster_options, connect, load_table
from ringflow.pipeline._destinations import Destination, destination
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.pipeline._evolution import describe_change
from ringflow.schema import Table

RECHECK_MIN_S = 1.0
RECHECK_MAX_S = 15.0


@dataclass(slots=True)
class ChannelRun:
    """A channel's destination (built for ``table``), its query (None while waiting) and, while
    it waits, why and when to look again (monotonic seconds)."""

    destination: Destination
    table: Table
    query: Any | None = None
    waiting: str | None = None
    recheck_at_s: float = 0.0
    recheck_delay_s: float = RECHECK_MIN_S
    recheck_max_s: float = RECHECK_MAX_S

    def __post_init__(self) -> None:
        self.waiting = self.destination.blocked

    @property
    def channel(self) -> str:
        return self.destination.channel

    def wait(self, now_s: float) -> None:
        """Look again later: after the current delay, doubled for the next time (bounded)."""
        self.recheck_at_s = now_s + self.recheck_delay_s
        self.recheck_delay_s = min(self.recheck_max_s, self.recheck_delay_s * 2)

    def due(self, now_s: float) -> bool:
        return self.waiting is not None and now_s >= self.recheck_at_s


class SourceTables:
    """The source table as it is now, for the channels that follow a change: loaded through
    one driver connection kept for the job (the table's schema metadata refreshed first), at
    most once per round of the job's loop (``new_round``), however many channels ask."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._settings = cluster_options(options)
        self._cluster: Cluster | None = None
        self._table: Table | None = None

    def new_round(self) -> None:
        self._table = None

    def load(self) -> Table:
        """The table; PipelineConfigError when it cannot be loaded or has no CDC."""
        if self._table is not None:
            return self._table
        settings = self._settings
        try:
            if self._cluster is None:
                self._cluster = connect(settings)[0]
            self._cluster.refresh_table_metadata(settings.keyspace, settings.table)
        except PipelineConfigError:
            raise
        except Exception as error:  # the driver's many errors: the source is not there now
            self.close()
            raise PipelineConfigError(f"cannot load {settings.table_name}: {error}") from None
        table = load_table(self._cluster, settings.keyspace, settings.table)
        if not table.options.cdc.enabled:
            raise PipelineConfigError(f"table {settings.table_name} does not have CDC enabled")
        self._table = table
        return table

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None


def follow_source(run: ChannelRun, tables: SourceTables) -> str | None:
    """Load the source table again and rebuild the destination for it (module rules); sets
    ``waiting`` (None when the query may start). The change from the table the channel had
    (``describe_change``), or None when its columns did not change or the source could not be
    loaded."""
    try:
        table = tables.load()
    except PipelineConfigError as error:
        run.waiting = f"the source table cannot be loaded: {error}"
        return None
    before = run.table
    old = run.destination
    run.destination = destination(
        old.url,
        table,
        allow_alter=old.allow_alter,
        channel=old.channel,
        dead_letters=old.dead_letters,
        default_tls=old.default_tls,
        dead_letters_access=old.dead_letters_access,
    )
    run.table = table
    run.waiting = run.destination.blocked
    if run.waiting is None:
        run.recheck_delay_s = RECHECK_MIN_S
    change = describe_change(before, table)
    return None if change == describe_change(table, table) else change
