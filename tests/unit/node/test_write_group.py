"""A single node's writes committed in groups (``ringflow.node._write_group``): writes queued
while a commit is running go together in the next one, each future ends with its own write's
outcome only once its group is committed, a lone write is committed in the call, and the queue
is bounded. A real store and a real one-thread storage executor; ``GatedStore`` only holds a
commit until the test lets it go, so that writes gather behind it."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from ringflow.errors import Consistency, InvalidRequest, Overloaded
from ringflow.node._write_group import GroupCommitPlane, StorageExecutor
from ringflow.schema import Mutation
from ringflow.storage import Store, UnknownTable
from tests.unit.storage._tables import KV, insert, txt


class GatedStore(Store):
    """A store whose group commits wait for ``gate`` while ``hold`` is set (and record their
    sizes)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, synchronous="NORMAL")
        self.hold = threading.Event()
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.group_sizes: list[int] = []

    def apply_group(self, batches: Sequence[Any], **kwargs: Any) -> Any:
        self.entered.set()
        if self.hold.is_set():
            assert self.gate.wait(10), "the test never opened the gate"
        self.group_sizes.append(len(batches))
        return super().apply_group(batches, **kwargs)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[GatedStore]:
    gated = GatedStore(tmp_path / "node.sqlite")
    gated.register_table(KV)
    yield gated
    gated.close()


@pytest.fixture
def storage() -> Iterator[StorageExecutor]:
    executor = StorageExecutor("test-storage")
    yield executor
    executor.shutdown(wait=True)


def _kv(key: str, value: bytes = b"v") -> Mutation:
    return insert(KV, (txt(key),), (), {"v": value})


def _submit(plane: GroupCommitPlane, mutation: Mutation) -> Future[None]:
    return plane.submit([mutation], {}, Consistency.ONE, 1_000_000_000)


def _held_commit(
    plane: GroupCommitPlane, store: GatedStore, storage: StorageExecutor
) -> Future[None]:
    """A first write submitted by a statement on the storage thread, nothing else waiting: it
    commits there at once, and the gate holds that commit (what the test then queues waits for
    the next one)."""
    store.hold.set()
    submitted: Future[Future[None]] = storage.submit(_submit, plane, _kv("k0", b"k0"))
    assert store.entered.wait(10)
    assert not submitted.done()  # the statement's thread is inside the commit
    return _result_of(submitted)


def _result_of(submitted: Future[Future[None]]) -> Future[None]:
    outer: Future[None] = Future()
    submitted.add_done_callback(
        lambda done: done.result().add_done_callback(
            lambda inner: (
                outer.set_exception(error)
                if (error := inner.exception()) is not None
                else outer.set_result(None)
            )
        )
    )
    return outer


def _stored(store: Store, key: str) -> bytes | None:
    row = store.read_row(KV, (txt(key),), (), now_s=1_000)
    return None if row is None else row.values["v"]


def test_writes_queued_during_a_commit_share_the_next_one(
    store: GatedStore, storage: StorageExecutor
) -> None:
    plane = GroupCommitPlane(store, storage, max_delayed=1_000)
    first = _held_commit(plane, store, storage)
    keys = [f"k{i}" for i in range(1, 160)]
    futures = [_submit(plane, _kv(key, key.encode())) for key in keys]
    assert not any(future.done() for future in (first, *futures))  # nothing answered yet
    store.gate.set()
    for future in (first, *futures):
        assert future.result(timeout=30) is None
    assert store.group_sizes == [1, 159] and plane.groups == 2
    assert all(_stored(store, key) == key.encode() for key in ["k0", *keys])


def test_a_write_waits_behind_the_statements_queued_before_it(
    store: GatedStore, storage: StorageExecutor
) -> None:
    """With statements waiting for the storage thread, the commit is scheduled after them, so
    their writes join the same group."""
    plane = GroupCommitPlane(store, storage)
    release = threading.Event()
    blocker = storage.submit(release.wait, 10)
    later: Future[Future[None]] = storage.submit(_submit, plane, _kv("second"))
    assert storage.waiting == 1
    first = _submit(plane, _kv("first"))  # a statement is waiting: scheduled, not committed
    assert not first.done() and store.group_sizes == []
    release.set()
    assert blocker.result(timeout=10)
    assert first.result(timeout=10) is None and _result_of(later).result(timeout=10) is None
    assert store.group_sizes == [2]


def test_a_write_finding_max_delayed_queued_commits_them_at_once(
    store: GatedStore, storage: StorageExecutor
) -> None:
    """Writes queued behind waiting statements do not wait for them past ``max_delayed``:
    their timestamps are taken, and a CDC reader trusts them to be readable soon after."""
    plane = GroupCommitPlane(store, storage, max_delayed=3)
    release = threading.Event()
    blocker = storage.submit(release.wait, 10)
    waiting = storage.submit(lambda: None)  # a statement waiting for the storage thread
    first, second = _submit(plane, _kv("a")), _submit(plane, _kv("b"))
    assert not first.done() and not second.done() and store.group_sizes == []
    third = _submit(plane, _kv("c"))  # the third queued: committed now, on this thread
    assert all(future.done() for future in (first, second, third))
    assert store.group_sizes == [3]
    release.set()
    assert blocker.result(timeout=10) and waiting.result(timeout=10) is None
    storage.submit(lambda: None).result(timeout=10)  # the scheduled commit ran: nothing left
    assert store.group_sizes == [3] and plane.groups == 1
    assert _submit(plane, _kv("d")).done()  # none scheduled any more: a lone write goes at once


def test_a_refused_batch_fails_alone_in_its_group(
    store: GatedStore, storage: StorageExecutor
) -> None:
    plane = GroupCommitPlane(store, storage)
    first = _held_commit(plane, store, storage)
    good, bad, late = (
        _submit(plane, _kv("good")),
        _submit(plane, Mutation("ks", "nowhere", (txt("x"),))),
        _submit(plane, _kv("late")),
    )
    store.gate.set()
    for future in (first, good, late):
        assert future.result(timeout=10) is None
    assert isinstance(bad.exception(timeout=10), UnknownTable | InvalidRequest)
    assert store.group_sizes == [1, 3]
    assert all(_stored(store, key) == b"v" for key in ("good", "late"))


def test_writes_past_the_queue_limit_are_refused(
    store: GatedStore, storage: StorageExecutor
) -> None:
    plane = GroupCommitPlane(store, storage, max_queued=2, max_delayed=1_000)
    first = _held_commit(plane, store, storage)  # "k0" left the queue with the running commit
    queued = [_submit(plane, _kv(key)) for key in ("b", "c")]
    with pytest.raises(Overloaded, match="2 writes are waiting"):
        _submit(plane, _kv("d"))
    store.gate.set()
    for future in (first, *queued):
        assert future.result(timeout=10) is None
    assert _stored(store, "d") is None and store.group_sizes == [1, 2]


def test_a_lone_write_is_committed_at_once(store: GatedStore, storage: StorageExecutor) -> None:
    plane = GroupCommitPlane(store, storage)
    done = _submit(plane, _kv("alone"))
    assert done.done() and done.result() is None  # nothing waited: committed in the call
    assert _stored(store, "alone") == b"v" and store.group_sizes == [1]
    plane.write([_kv("direct", b"d")], {}, Consistency.ONE, 1_000_000_000)  # no queue
    assert _stored(store, "direct") == b"d" and store.group_sizes == [1, 1]
