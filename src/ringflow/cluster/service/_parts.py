"""What a node's request helpers use of it (issue 21 §2: no back-reference to the node).

``PointRequests``, ``RangeReads`` and ``HintDelivery`` are built by ``ClusterNode`` and serve
its verbs; they are given the node's parts, not the node: its host and settings, its store,
processor, clock and offload, the executor of its actions, its state (coordinator, hints,
membership), its replica placement, its messenger and the dispatcher's ``refuse``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ringflow.cluster._messages import Verb
from ringflow.cluster.service._executor import ActionExecutor
from ringflow.cluster.service._messenger import Messenger
from ringflow.cluster.service._node_state import NodeState
from ringflow.cluster.service._placement import ReplicaPlacement
from ringflow.cluster.service._settings import ClusterSettings, Offload
from ringflow.cql import QueryProcessor
from ringflow.ring import Host
from ringflow.runtime import Clock
from ringflow.storage import Store

_log = logging.getLogger(__name__)

Refuse = Callable[[str, int, Verb, str], None]
"""Refuse request ``(source, request_id, verb, reason)``: counted, logged, answered with
FAILURE_RSP (``MessageDispatcher.refuse``)."""


@dataclass(frozen=True, slots=True)
class NodeParts:
    """A node's parts its request helpers are built from (module docstring)."""

    host: Host
    settings: ClusterSettings
    store: Store
    processor: QueryProcessor
    clock: Clock
    offload: Offload
    executor: ActionExecutor
    state: NodeState
    placement: ReplicaPlacement
    messenger: Messenger
    refuse: Refuse


def log_failure(what: str) -> Callable[[object, BaseException | None], None]:
    """An ``Offload`` ``done`` that logs the error of ``what``, if any."""

    def done(_result: object, error: BaseException | None) -> None:
        if error is not None:
            _log.error("%s failed", what, exc_info=error)

    return done
