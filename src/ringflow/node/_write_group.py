"""A single node's data plane: statement writes committed in groups, without a thread waiting.

A single node runs its statements on its storage thread, one at a time. A statement's write
(its mutations with their CDC captures) is not applied there and then: ``submit`` queues it and
returns a future, the statement's thread goes on to the next statement, and the server sends
the answer when the future is done. The first write queued while no commit is pending schedules
one on the storage thread behind the statements already waiting there (``StorageExecutor``
counts them), or, when none waits, commits at once on the calling thread (a lone write costs no
extra hand-off). A commit takes every queued write (at most ``MAX_GROUP``) and applies them
with ``Store.apply_group``: one SQLite transaction, one WAL fsync for the group, each write with
its own outcome (a batch the store refuses fails alone; a storage failure fails the group),
then the next group until the queue is empty. A write that finds ``MAX_DELAYED`` queued commits
them at once, without waiting for the scheduled commit: its statement's timestamp is already
taken. Acknowledged still means durable (the answer waits for its group's COMMIT); under load
the COMMIT and its fsync are shared. At most
``MAX_QUEUED`` writes wait; more are refused (Overloaded), though the server's
``max_pending_requests`` bounds them first.

``write`` (the ``DataPlane`` call a caller that must wait makes, e.g. a role statement's
``system_auth`` rows) and reads are ``LocalDataPlane``'s: the batch applied at once on the
calling thread, the local store read.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar

from ringflow.cdc import CdcCapture
from ringflow.cql import LocalDataPlane
from ringflow.errors import Consistency, Overloaded
from ringflow.schema import Mutation
from ringflow.storage import Store

_T = TypeVar("_T")

MAX_GROUP: Final = 256
"""At most this many writes in one transaction."""
MAX_QUEUED: Final = 1024
"""At most this many writes waiting for the store; more are refused."""
MAX_DELAYED: Final = 32
"""A write that finds this many queued (a commit scheduled behind statements still waiting)
commits them at once: a write's timestamp, its ``cdc$time``, is taken before it is queued, and
a CDC reader trusts a log row to be readable within its confidence window of that time, so the
queue may not grow with the statements the server admits (up to ``max_pending_requests``)."""


class StorageExecutor(concurrent.futures.ThreadPoolExecutor):
    """The node's storage thread, knowing how many submitted calls have not started yet."""

    def __init__(self, thread_name_prefix: str) -> None:
        super().__init__(1, thread_name_prefix=thread_name_prefix)
        self._count_lock = threading.Lock()
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Calls submitted that have not started."""
        return self._waiting

    def submit(
        self, fn: Callable[..., _T], /, *args: object, **kwargs: object
    ) -> concurrent.futures.Future[_T]:
        with self._count_lock:
            self._waiting += 1

        def started() -> _T:
            with self._count_lock:
                self._waiting -= 1
            return fn(*args, **kwargs)

        try:
            return super().submit(started)
        except BaseException:
            with self._count_lock:
                self._waiting -= 1
            raise


@dataclass(slots=True)
class _Write:
    batch: Sequence[Mutation]
    captures: Mapping[int, CdcCapture]
    now_s: int
    done: concurrent.futures.Future[None] = field(default_factory=concurrent.futures.Future)


class GroupCommitPlane(LocalDataPlane):
    """``DataPlane`` of a single node (see the module docstring); group commits run on
    ``storage`` (the node's storage thread)."""

    def __init__(
        self,
        store: Store,
        storage: StorageExecutor,
        *,
        max_group: int = MAX_GROUP,
        max_queued: int = MAX_QUEUED,
        max_delayed: int = MAX_DELAYED,
    ) -> None:
        super().__init__(store)
        self._storage = storage
        self._max_group = max_group
        self._max_queued = max_queued
        self._max_delayed = max_delayed
        self._lock = threading.Lock()
        self._queue: deque[_Write] = deque()
        self._scheduled = False
        self.groups = 0
        """Groups committed so far (each one transaction)."""

    def submit(
        self,
        batch: Sequence[Mutation],
        captures: Mapping[int, CdcCapture],
        consistency: Consistency,
        now_us: int,
    ) -> concurrent.futures.Future[None]:
        """Queue a statement's write; its future is done when its group is committed (with
        the error that refused it, if one did)."""
        write = _Write(batch, captures, now_us // 1_000_000)
        with self._lock:
            if len(self._queue) >= self._max_queued:
                raise Overloaded(f"{self._max_queued} writes are waiting for the store already")
            self._queue.append(write)
            queued = len(self._queue)
            schedule = not self._scheduled
            self._scheduled = True
        if schedule and not self._storage.waiting:  # nothing else to wait for: commit now
            self._commit_queued()
        elif schedule:  # statements wait: they may add their writes first
            self._storage.submit(self._commit_queued)
        elif queued >= self._max_delayed:  # enough wait: their timestamps are getting old
            self._commit_groups()
        return write.done

    def _commit_queued(self) -> None:
        """The scheduled commit: groups until the queue is empty, then none is scheduled."""
        self._commit_groups(last=True)

    def _commit_groups(self, last: bool = False) -> None:
        """Commit groups until the queue is empty (``last``: and mark none scheduled)."""
        while True:
            with self._lock:
                if not self._queue:
                    if last:
                        self._scheduled = False
                    return
                count = min(len(self._queue), self._max_group)
                group = [self._queue.popleft() for _ in range(count)]
            outcomes: Sequence[BaseException | None]
            try:
                outcomes = self._store.apply_group(
                    [(write.batch, write.captures) for write in group],
                    now_s=max(write.now_s for write in group),
                )
            except BaseException as error:  # a storage failure: none of them is written
                outcomes = [error] * len(group)
            self.groups += 1
            for write, outcome in zip(group, outcomes, strict=True):
                if outcome is None:
                    write.done.set_result(None)
                else:
                    write.done.set_exception(outcome)
