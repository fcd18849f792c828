"""The backend of a cluster node's CQL shell: statements through the ``QueryProcessor``, a
DDL's answer held until the schema agrees (seed 004).

Loop-agnostic: what a statement leaves pending is a ``concurrent.futures.Future`` chained to
the next step by callbacks, so the asyncio ``CqlServer`` of a node process and the
simulator's ``NetworkCqlShell`` run the same backend.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import TypeVar

from ringflow.cluster.service._node import ClusterNode
from ringflow.cluster.service._plane import ClusterDataPlane, EventLoop
from ringflow.cql import (
    EffectivePermissions,
    Handled,
    ProcessorBackend,
    QueryProcessor,
    Response,
    SchemaChange,
    SchemaReaction,
    SessionState,
    StatementRequest,
    when_answered,
)

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
_U = TypeVar("_U")


def chain(
    source: concurrent.futures.Future[_T],
    target: concurrent.futures.Future[_U],
    then: Callable[[_T], _U],
) -> None:
    """Once ``source`` is done, ``target`` is done with ``then`` of its result, or with its
    error (or ``then``'s); on the thread that finishes ``source``. A ``target`` done already
    (e.g. by a timeout) is left as it is."""

    def finished(done: concurrent.futures.Future[_T]) -> None:
        if target.done():
            return
        try:
            result = then(done.result())
        except BaseException as error:
            with contextlib.suppress(concurrent.futures.InvalidStateError):  # done meanwhile
                target.set_exception(error)
        else:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                target.set_result(result)

    source.add_done_callback(finished)


def _bug(error: BaseException) -> None:
    _log.error("bug: a statement's pending work failed outside its answer", exc_info=error)


class ClusterBackend(ProcessorBackend):
    """``ProcessorBackend`` whose DDL answers wait for schema agreement (seed 004), with a
    warning when it is not reached in time, over the node's ``plane``. Nothing in it waits on
    a thread: what is pending is a future the shell (the ``CqlServer``, or the simulator's
    ``NetworkCqlShell``) waits for with no thread waiting."""

    def __init__(
        self,
        processor: QueryProcessor,
        plane: ClusterDataPlane,
        *,
        on_schema_change: SchemaReaction | None = None,
    ) -> None:
        super().__init__(processor, on_schema_change=on_schema_change)
        self.plane = plane

    def _handle(
        self,
        session: SessionState,
        statement: StatementRequest,
        grants: EffectivePermissions | None,
    ) -> Handled:
        handled = super()._handle(session, statement, grants)
        plane = self.plane
        if not handled.schema_changes:
            return handled
        agreed: concurrent.futures.Future[Response | Handled] = concurrent.futures.Future()

        def answered(done: Handled) -> None:  # the DDL's own answer: then agreement
            def warned(warning: str | None) -> Handled:
                if warning is None:
                    return done
                _log.warning("%s", warning)
                return dataclasses.replace(done, warnings=(*done.warnings, warning))

            chain(plane.schema_agreement_warning(), agreed, warned)

        when_answered(handled, answered, _bug)
        return dataclasses.replace(handled, pending=agreed)


def connect_statement_path(
    node: ClusterNode,
    loop: EventLoop,
    statements: concurrent.futures.Executor,
    auth_submit: Callable[[Callable[[], None]], object],
    on_schema_version: Callable[[], None] | None = None,
) -> ClusterBackend:
    """``node``'s statement path, the same in a node process and in the simulator: its
    processor's writes, reads and auth work go through a ``ClusterDataPlane`` on ``loop``
    (``statements`` goes on with a SELECT that reads the local store, ``auth_submit`` runs
    later runs of auth work), its view of the ring (data centers, DESCRIBE CLUSTER) is the
    node's, the backend's DDL answers wait for schema agreement, and each
    statement's schema changes are announced to the cluster (seed 004) from ``loop``, after
    ``on_schema_version`` (a node process's ``system.local`` row) on the statement's thread."""
    plane = ClusterDataPlane(node, loop, node.store, statements)
    node.processor.use_data_plane(
        plane, plane.submit, plane.submit_read, auth_submit, ring=node.placement
    )

    def schema_changed(_changes: tuple[SchemaChange, ...]) -> None:
        try:
            if on_schema_version is not None:
                on_schema_version()
        finally:
            loop.call_soon_threadsafe(node.on_local_schema_change)

    return ClusterBackend(node.processor, plane, on_schema_change=schema_changed)
