"""Hint storage and delivery: the shell that runs ``HintManager``'s actions (seed 003, hinted
handoff; cassandra-core.md on hints).

Owns ``HintDelivery``: storing a hint the coordinator asks for (``StoreHint``, with the unit's CDC
captures, ``Store.store_hint(captures=)``), replaying stored hints as HINT_REQ when the manager
says the target is up and agrees on the schema, deleting delivered or expired ones, and the
HINT_RSP / FAILURE_RSP answers.

Rules:

* Hints survive a restart: every target still holding some is reported to the manager at start
  (its window counts from then, the hints' exact age being unknown).
* At most ``HINT_FETCH_LIMIT`` hints of one target are read from the store at a time.
* A delivery whose answer never comes (lost connection, target crashed mid-delivery) is given
  up after the write timeout, so the target's replay does not stay in flight forever.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from ringflow.cluster._coordinator import CoordinatorEvent, HintStored
from ringflow.cluster._hints import DeleteHint, DeliverHint, ReplayHints
from ringflow.cluster._messages import Verb
from ringflow.cluster._write_path import StoreHint, WriteUnit
from ringflow.cluster.service import _codec
from ringflow.cluster.service._parts import NodeParts, log_failure
from ringflow.errors import RingflowError
from ringflow.storage import Hint

_log = logging.getLogger(__name__)

HINT_FETCH_LIMIT = 64


class HintDelivery:
    """Runs a node's ``HintManager`` actions against its store and the network."""

    def __init__(
        self, parts: NodeParts, coordinator_event: Callable[[CoordinatorEvent], None]
    ) -> None:
        """``coordinator_event`` takes what becomes of a hint the coordinator asked to store
        (``PointRequests.handle``)."""
        self._settings = parts.settings
        self._store = parts.store
        self._processor = parts.processor
        self._clock = parts.clock
        self._offload = parts.offload
        self._executor = parts.executor
        self._hints = parts.state.hints
        self._membership = parts.state.membership
        self._placement = parts.placement
        self._messenger = parts.messenger
        self._coordinator_event = coordinator_event
        self._fetched: dict[int, Hint] = {}

    def on_stored_hint_targets(
        self, targets: list[uuid.UUID] | None, error: BaseException | None
    ) -> None:
        """Hints survive a restart: tell the manager about every target still holding some
        (their exact age is unknown here, so the window counts from now)."""
        if error is not None:
            _log.error("reading the stored hint targets failed", exc_info=error)
        now_ms = self._clock.now_ms()
        for target_id in targets or []:
            self._hints.on_hint_stored(target_id, now_ms)

    def store_hint(self, action: StoreHint) -> None:
        """Store the hint the coordinator asked for, then tell it (``HintStored``)."""
        created_ms = self._clock.now_ms()
        unit, target, request_id = action.unit, action.target, action.request_id

        def work() -> int:
            return self._store.store_hint(
                target.host_id, unit.mutations, created_ms, captures=unit.captures
            )

        def done(_hint_id: int | None, error: BaseException | None) -> None:
            if error is not None:
                _log.error("storing a hint for %s failed", target, exc_info=error)
                return
            self._coordinator_event(HintStored(request_id, target, created_ms))

        self._offload(work, done)

    def action_handlers(self) -> dict[type, Callable[[Any], None]]:
        """What the hint manager's actions, and the coordinator's ``StoreHint``, do here (the
        node's ``ActionExecutor``)."""

        def delete(action: DeleteHint) -> None:
            self._fetched.pop(action.hint_id, None)
            self._delete_hint(action.hint_id)

        return {
            StoreHint: self.store_hint,
            ReplayHints: lambda action: self._fetch_hints(action.target_id),
            DeliverHint: self._deliver_hint,
            DeleteHint: delete,
        }

    def _delete_hint(self, hint_id: int) -> None:
        self._offload(lambda: self._store.delete_hint(hint_id), log_failure("hint delete"))

    def _fetch_hints(self, target_id: uuid.UUID) -> None:

        def done(hints: list[Hint] | None, error: BaseException | None) -> None:
            if error is not None or hints is None:
                hints = []
            for hint in hints:
                self._fetched[hint.hint_id] = hint
            actions = self._hints.on_hints_fetched(
                target_id, hints, self._clock.now_ms(), self._gc_grace_s
            )
            self._executor.run(actions)

        self._offload(lambda: self._store.hints_for(target_id, HINT_FETCH_LIMIT), done)

    def _gc_grace_s(self, keyspace: str, table: str) -> int:
        found = self._processor.schema.tables.get((keyspace, table))
        return 864_000 if found is None else found.options.gc_grace_seconds

    def _deliver_hint(self, action: DeliverHint) -> None:
        hint = self._fetched.get(action.hint_id)
        captures = () if hint is None else hint.captures
        unit = WriteUnit(action.mutations, captures)
        target = self._placement.host_of(action.target_id)
        sent = target is not None and self._messenger.send(
            target.endpoint, Verb.HINT_REQ, action.hint_id, _codec.encode_unit(unit)
        )
        if not sent:
            self._executor.run(
                self._hints.on_hint_delivery_failed(action.target_id, action.hint_id)
            )
            return
        # An answer lost with the connection (or a target that crashed mid-delivery) must not
        # leave the target's replay stuck in flight: give up on it after the write timeout.
        self._clock.call_later(
            self._settings.write_timeout_ms,
            lambda: self._hint_unanswered(action.target_id, action.hint_id),
        )

    def _hint_unanswered(self, target_id: uuid.UUID, hint_id: int) -> None:
        try:
            actions = self._hints.on_hint_delivery_failed(target_id, hint_id)
        except RingflowError:
            return  # answered in time: nothing in flight any more
        self._executor.run(actions)

    def on_hint_answer(self, source: str, hint_id: int, delivered: bool) -> None:
        """``source`` answered HINT_REQ ``hint_id`` (HINT_RSP, or FAILURE_RSP: not delivered)."""
        info = self._membership.members.get(source)
        if info is None:
            return
        target_id = info.host.host_id
        try:
            if delivered:
                actions = self._hints.on_hint_delivered(target_id, hint_id)
            else:
                actions = self._hints.on_hint_delivery_failed(target_id, hint_id)
        except RingflowError:
            _log.debug("late hint answer %s from %s ignored", hint_id, source)
            return
        self._executor.run(actions)
