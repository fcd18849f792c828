"""Dead letters applied again to their destination without Spark (``ringflow replication
dead-letters replay``), with the sinks' own appliers.

:class:`DestinationAppliers` is the ``apply`` of :func:`~ringflow.pipeline._dead_letters.
replay_dead_letters` for one destination URL: per source table (loaded from the edge: the table
as it is now; a change naming a column it no longer has is refused with that reason), a
PostgreSQL target (``ChangeApplier``, one transaction per change, a data error is a refusal) or a
hub target (``HubApplier``, one change at a time, the hub's ``InvalidRequest`` (0x2200) is a
refusal). Anything else (the destination unreachable, a target that cannot take the table)
raises: the replay stops and the dead letters not yet applied stay. A lake takes every change, so
nothing is replayed to one.

A range delete is two changes (start and end bound); the hub applies the pair together, so a
single bound replayed to a hub is refused again ("without their pair"), and stays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from cassandra import InvalidRequest as CqlInvalidRequest

from ringflow.errors import ClientError
from ringflow.pipeline._changes import Change, table_to_json
from ringflow.pipeline._cluster_client import DriverTls
from ringflow.pipeline._destinations import hub_access
from ringflow.pipeline._errors import InvalidChange, PipelineConfigError
from ringflow.pipeline._hub import HubApplier, hub_options
from ringflow.pipeline._hub import connect as connect_hub
from ringflow.pipeline._hub import parse_options as parse_hub_options
from ringflow.pipeline._pg_sql import Target
from ringflow.pipeline._postgres import (
    ChangeApplier,
    apply_each,
    prepare_target,
    redact,
)
from ringflow.pipeline._postgres import connect as connect_postgres
from ringflow.pipeline._postgres import parse_options as parse_postgres_options
from ringflow.replication import DestinationKind, DestinationUrl, parse_destination
from ringflow.schema import Table

_Apply = Callable[[Change], str | None]


def check_destination(url: str) -> DestinationUrl:
    """The parsed URL of a replay destination; PipelineConfigError for a bad URL or a lake."""
    try:
        parsed = parse_destination(url)
    except ClientError as error:
        raise PipelineConfigError(str(error)) from None
    if parsed.kind is DestinationKind.LAKE:
        raise PipelineConfigError(
            f"{parsed.display}: a lake takes every change, it has no dead letters to replay"
        )
    return parsed


class DestinationAppliers:
    """The ``apply`` of a replay to ``url`` (module docstring): None when the destination took
    the change, else why it refused it. ``target`` names the destination table (default: the
    sink's, from the change's table); ``load_table`` gives the source table as it is now."""

    def __init__(
        self,
        url: str,
        load_table: Callable[[str, str], Table],
        target: str | None = None,
        default_tls: DriverTls | None = None,
    ) -> None:
        self.destination = check_destination(url)
        self.url = url
        self.default_tls = default_tls
        """A hub URL's ``ssl=true`` without ``ca=``: this TLS (the command's ``--ssl-ca``)."""
        self.target = target
        self.load_table = load_table
        self._appliers: dict[tuple[str, str], _Apply] = {}
        self._closers: list[Callable[[], None]] = []

    def __call__(self, change: Change) -> str | None:
        key = (change.keyspace, change.table)
        apply = self._appliers.get(key)
        if apply is None:
            table = self.load_table(*key)
            if self.destination.kind is DestinationKind.POSTGRES:
                apply = self._postgres(table)
            else:
                apply = self._hub(table)
            self._appliers[key] = apply
        return apply(change)

    def _postgres(self, table: Table) -> _Apply:
        target = self.target or f"{table.keyspace}_{table.name}"
        options = {"url": self.url, "table": target, "schema": table_to_json(table)}
        config = parse_postgres_options(options)
        prepare_target(config)
        connection = connect_postgres(config.url)
        self._closers.append(connection.close)
        applier = ChangeApplier(Target(target, table))

        def apply(change: Change) -> str | None:
            try:
                refused = apply_each(applier, connection, [change])
            except psycopg.OperationalError as error:
                raise PipelineConfigError(
                    f"PostgreSQL at {redact(self.url)}: {' '.join(str(error).split())}"
                ) from None
            return refused[0][1] if refused else None

        return apply

    def _hub(self, table: Table) -> _Apply:
        destination = self.destination
        keyspace, _, name = (
            destination.table or self.target or f"{table.keyspace}.{table.name}"
        ).partition(".")
        tls, login = hub_access(self.url, self.default_tls)
        options = hub_options(
            destination.hosts,
            keyspace,
            name,
            table,
            port=destination.port or 9042,
            consistency=destination.consistency or "QUORUM",
            tls=tls,
            login=login,
        )
        config = parse_hub_options(options)
        cluster, session = connect_hub(config)
        self._closers.append(cluster.shutdown)

        def apply(change: Change) -> str | None:
            applier = HubApplier(config, session)
            try:
                applier.add(change)
                applier.flush()
            except (CqlInvalidRequest, InvalidChange) as error:
                return f"{type(error).__name__}: {' '.join(str(error).split())}"
            return None

        return apply

    def close(self) -> None:
        for close in self._closers:
            close()
        self._closers.clear()
        self._appliers.clear()

    def __enter__(self) -> DestinationAppliers:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()
