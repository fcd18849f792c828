"""Group commit of replica writes (``ringflow.cluster.service._group_commit``) over a real store.

The offload is a hand-run queue (what the simulator does: store work runs when the test says),
so the tests control when the storage thread "finishes". Checks: a lone unit goes to the store
at once; units arriving while a group is applied gather into the next group, which is one
transaction, and each is answered only when its group is done; a unit the store refuses fails
alone; a storage failure fails every unit of its group and none of it is written; past
``max_queued`` units are refused at once with the OVERLOADED code; ``max_group`` caps a group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from ringflow.cluster._write_path import WriteUnit
from ringflow.cluster.service._group_commit import GroupCommit, ReplicaOverloaded
from ringflow.errors import ErrorCode
from ringflow.schema import Mutation, Row
from ringflow.storage import Store, UnknownTable
from tests.unit.storage._tables import KV, insert, open_store, txt

NOW_S = 1_000


class QueuedOffload:
    """An ``Offload`` whose work runs when the test calls ``run_next``."""

    def __init__(self) -> None:
        self.pending: list[tuple[Callable[[], Any], Callable[[Any, BaseException | None], None]]]
        self.pending = []

    def __call__(
        self, work: Callable[[], Any], done: Callable[[Any, BaseException | None], None]
    ) -> None:
        self.pending.append((work, done))

    def run_next(self) -> None:
        work, done = self.pending.pop(0)
        try:
            result = work()
        except Exception as error:
            done(None, error)
        else:
            done(result, None)


class Replica:
    """A real store behind a ``GroupCommit``; records each group's size and each answer."""

    def __init__(self, tmp_path: Path, **limits: int) -> None:
        self.store: Store = open_store(tmp_path, KV)
        self.offload = QueuedOffload()
        self.groups: list[int] = []
        self.answers: dict[str, BaseException | None] = {}
        self.commit = GroupCommit(self.offload, self._apply, **limits)

    def _apply(self, units: Sequence[WriteUnit]) -> list[Any]:
        self.groups.append(len(units))
        return self.store.apply_group([(u.mutations, u.captures) for u in units], now_s=NOW_S)

    def submit(self, key: str, unit: WriteUnit | None = None) -> None:
        def done(error: BaseException | None) -> None:
            self.answers[key] = error

        self.commit.submit(unit or _unit(key), done)

    def stored(self, key: str) -> bool:
        return self.store.read_mutation(KV, (txt(key),)) is not None


def _unit(key: str) -> WriteUnit:
    return WriteUnit((insert(KV, (txt(key),), (), {"v": key.encode()}),))


def test_units_arriving_during_a_group_share_the_next_transaction(tmp_path: Path) -> None:
    replica = Replica(tmp_path)
    replica.submit("a")
    assert len(replica.offload.pending) == 1  # a lone unit goes at once
    for key in ("b", "c", "d"):
        replica.submit(key)
    assert len(replica.offload.pending) == 1 and replica.commit.queued == 3
    replica.offload.run_next()
    assert replica.answers == {"a": None} and replica.stored("a") and not replica.stored("b")
    assert len(replica.offload.pending) == 1  # the gathered units, as one group
    replica.offload.run_next()
    assert replica.answers == {key: None for key in "abcd"}
    assert all(replica.stored(key) for key in "abcd")
    assert replica.groups == [1, 3] and (replica.commit.groups, replica.commit.units) == (2, 4)
    assert not replica.offload.pending


def test_a_refused_unit_fails_alone(tmp_path: Path) -> None:
    replica = Replica(tmp_path)
    replica.submit("first")
    unknown = WriteUnit((Mutation("ks", "missing", (txt("x"),), rows=(Row((), None, None, {}),)),))
    replica.submit("bad", unknown)
    replica.submit("good")
    replica.offload.run_next()
    replica.offload.run_next()
    assert isinstance(replica.answers["bad"], UnknownTable)
    assert replica.answers["good"] is None and replica.stored("good")


def test_a_storage_failure_fails_the_whole_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replica = Replica(tmp_path)
    replica.submit("first")
    replica.submit("b")
    replica.submit("c")
    replica.offload.run_next()

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(replica.store, "apply_group", broken)
    replica.offload.run_next()
    assert isinstance(replica.answers["b"], OSError) and isinstance(replica.answers["c"], OSError)
    assert not replica.stored("b") and not replica.stored("c")


def test_the_queue_and_the_group_are_bounded(tmp_path: Path) -> None:
    replica = Replica(tmp_path, max_group=2, max_queued=3)
    replica.submit("k0")  # in flight, not queued
    for index in range(1, 5):
        replica.submit(f"k{index}")
    refused = replica.answers.get("k4")
    assert isinstance(refused, ReplicaOverloaded) and refused.code == ErrorCode.OVERLOADED
    while replica.offload.pending:
        replica.offload.run_next()
    assert replica.groups == [1, 2, 1]
    assert [replica.stored(f"k{index}") for index in range(5)] == [True] * 4 + [False]
