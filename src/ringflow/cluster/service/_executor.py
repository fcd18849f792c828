"""The node's one executor: every action its pure cores decide is carried out here.

The cores (``Gossiper``, ``Coordinator``, ``HintManager``, ``GenerationDecider``) return
actions; the shells that own the effects (sending, store work, timers) register one handler per
action type with the node's ``ActionExecutor`` when they are built, and every batch of actions,
whichever core returned it, goes through ``ActionExecutor.run``. The node process and the
simulator build the same executor (``build_node``), so a seeded run carries out the actions the
way a node process does.

Rules:

* One handler per action type, registered before the node starts; a second registration of a
  type is a wiring fault (``InternalError``), as is an action no handler was registered for: an
  action a core decided is never dropped silently.
* Actions run in the order the core returned them; a handler that raises stops the batch (the
  caller's error handling is what it was for the core's call).
* The table is looked up by the action's exact type (``type(action)``): action types are final
  value classes, and a dictionary lookup costs the same for every action of a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from ringflow.errors import InternalError

A = TypeVar("A")


class ActionExecutor:
    """Carries out actions by type (module rules)."""

    def __init__(self) -> None:
        self._handlers: dict[type, Callable[[Any], None]] = {}

    def register(self, kind: type[A], handler: Callable[[A], None]) -> None:
        """``handler`` carries out every action of type ``kind`` from now on."""
        if kind in self._handlers:
            raise InternalError(f"{kind.__name__} already has a handler")
        self._handlers[kind] = handler

    def register_all(self, handlers: Mapping[type, Callable[[Any], None]]) -> None:
        """``register`` each of ``handlers``."""
        for kind, handler in handlers.items():
            self.register(kind, handler)

    def handles(self, kind: type) -> bool:
        """Whether actions of type ``kind`` have a handler."""
        return kind in self._handlers

    def run(self, actions: Iterable[object]) -> None:
        """Carry out ``actions`` in order."""
        handlers = self._handlers
        for action in actions:
            handler = handlers.get(type(action))
            if handler is None:
                raise InternalError(f"no handler for the action {type(action).__name__}")
            handler(action)
