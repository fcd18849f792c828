"""Base mutations and their CDC log rows are written in one transaction, images read inside it.

Checks: the log rows of an insert and an update (operations, pre-image before the write,
post-image after it); a pre-image sees the earlier mutations of the same batch; a post-image is
the reconciled row read back; a failure after the base write leaves neither base nor log rows
(seed 000: both writes or none); bad capture arguments are refused before any write; a group
of batches (``apply_group``, the replicas' group commit) commits together, refuses a bad batch
alone, and writes none of itself on a storage failure.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ringflow.cdc._log_rows import CdcCapture
from ringflow.cdc._log_schema import cdc_log_table
from ringflow.errors import InvalidRequest
from ringflow.schema import (
    INT,
    TEXT,
    CdcOptions,
    Cell,
    ClusteringOrder,
    Mutation,
    PreimageMode,
    Row,
    Table,
    TableOptions,
)
from ringflow.schema._codec import deserialize
from ringflow.storage import Store, UnknownTable, _cdc_apply
from tests.unit.storage._tables import CDC_BASE, KV, i32, insert, open_store, txt

NOW = 1_000
STREAM = bytes(range(16))
LOG = cdc_log_table(CDC_BASE)
PK = (i32(1),)


def _capture(low_bits: int) -> CdcCapture:
    return CdcCapture(STREAM, low_bits)


def _update(clustering: int, timestamp_us: int, **values: bytes) -> Mutation:
    cells = {name: Cell.live(timestamp_us, value) for name, value in values.items()}
    return Mutation("ks", "orders", PK, rows=(Row((i32(clustering),), None, None, cells),))


def _log(store: Store) -> list[tuple[int, dict[str, object]]]:
    """(cdc$operation, decoded values without cdc$ metadata) of every log row, in log order."""
    found = []
    for row in store.read_partition(LOG, (STREAM,), now_s=NOW):
        values = {k: deserialize(LOG.column(k).type, v) for k, v in row.values.items()}
        operation = values.pop("cdc$operation")
        values = {k: v for k, v in values.items() if not k.startswith("cdc$")}
        found.append((int(operation), values))  # type: ignore[call-overload]
    return found


def _broken_log_builder(*args: object, **kwargs: object) -> list[Mutation]:
    raise RuntimeError("log builder failed")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(tmp_path, CDC_BASE, LOG, KV)


def test_insert_then_update_log_delta_and_images(store: Store) -> None:
    store.apply(
        [insert(CDC_BASE, PK, (i32(1),), {"v": txt("a"), "w": i32(1)}, 10)],
        now_s=NOW,
        cdc={0: _capture(1)},
    )
    store.apply([_update(1, 20, w=i32(2))], now_s=NOW, cdc={0: _capture(2)})
    keys = {"pk": 1, "ck": 1}
    assert _log(store) == [
        (2, {**keys, "v": "a", "w": 1}),  # insert delta (no pre-image: the row did not exist)
        (9, {**keys, "v": "a", "w": 1}),  # post-image
        (0, {**keys, "v": "a", "w": 1}),  # pre-image (full)
        (1, {**keys, "w": 2}),  # update delta
        (9, {**keys, "v": "a", "w": 2}),  # post-image
    ]


def test_preimage_sees_earlier_mutations_of_the_batch(store: Store) -> None:
    first = insert(CDC_BASE, PK, (i32(1),), {"v": txt("a")}, 10)
    store.apply([first, _update(1, 20, v=txt("b"))], now_s=NOW, cdc={1: _capture(1)})
    operations = _log(store)
    assert operations[0] == (0, {"pk": 1, "ck": 1, "v": "a"})
    assert operations[-1] == (9, {"pk": 1, "ck": 1, "v": "b"})


def test_postimage_is_the_reconciled_row(store: Store) -> None:
    """An update that loses last-write-wins: the post-image shows the stored, newer value."""
    store.apply([_update(1, 50, v=txt("new"))], now_s=NOW)
    store.apply([_update(1, 10, v=txt("old"))], now_s=NOW, cdc={0: _capture(1)})
    assert _log(store)[-1] == (9, {"pk": 1, "ck": 1, "v": "new"})
    row = store.read_row(CDC_BASE, PK, (i32(1),), now_s=NOW)
    assert row is not None and row.values["v"] == txt("new")


def test_failure_after_base_write_rolls_back_base_and_log(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_cdc_apply, "build_log_mutations", _broken_log_builder)
    other = insert(KV, (txt("k"),), (), {"v": b"v"})
    with pytest.raises(RuntimeError, match="log builder failed"):
        store.apply([other, _update(1, 20, v=txt("b"))], now_s=NOW, cdc={1: _capture(1)})
    assert store.read_mutation(CDC_BASE, PK) is None
    assert store.read_mutation(KV, (txt("k"),)) is None
    assert _log(store) == []


def test_bad_captures_are_refused_before_writing(tmp_path: Path) -> None:
    store = open_store(tmp_path, CDC_BASE, KV)  # log table not registered
    update = _update(1, 20, v=txt("b"))
    with pytest.raises(UnknownTable, match="orders_scylla_cdc_log"):
        store.apply([update], now_s=NOW, cdc={0: _capture(1)})
    store.register_table(LOG)
    with pytest.raises(InvalidRequest, match="has no CDC"):
        store.apply(
            [insert(KV, (txt("k"),), (), {"v": b""}), update], now_s=NOW, cdc={0: _capture(1)}
        )
    with pytest.raises(InvalidRequest):
        store.apply([update], now_s=NOW, cdc={1: _capture(1)})
    assert store.read_mutation(CDC_BASE, PK) is None
    assert store.read_mutation(KV, (txt("k"),)) is None


def test_log_table_schema_types(store: Store) -> None:
    """The log table is an ordinary registered table; its clustering (timeuuid, int) sorts."""
    for index in range(3):
        store.apply(
            [_update(index, 100 - index, w=i32(index))], now_s=NOW, cdc={0: _capture(index)}
        )
    rows = store.read_partition(LOG, (STREAM,), now_s=NOW)
    times = [deserialize(LOG.column("cdc$time").type, r.clustering[0]) for r in rows]
    assert times == sorted(times, key=lambda t: t.time)  # type: ignore[attr-defined]
    assert isinstance(LOG, Table) and LOG.column("w").type == INT


def test_log_rows_are_packed_and_read_like_per_cell_rows(tmp_path: Path) -> None:
    """The log table is packed by default (one atom per log row, kept across reopen) and reads
    exactly like the same log stored per cell."""
    import sqlite3

    (tmp_path / "packed").mkdir()
    (tmp_path / "cells").mkdir()
    packed = open_store(tmp_path / "packed", CDC_BASE, LOG)
    per_cell = Store(tmp_path / "cells" / "node.sqlite", synchronous="NORMAL")
    per_cell.register_table(CDC_BASE)
    per_cell.register_table(LOG, packed_rows=False)
    for store in (packed, per_cell):
        store.apply(
            [insert(CDC_BASE, PK, (i32(1),), {"v": txt("a")}, 10)], now_s=NOW, cdc={0: _capture(1)}
        )
        store.apply([_update(1, 20, w=i32(2))], now_s=NOW, cdc={0: _capture(2)})
    assert _log(packed) == _log(per_cell) and len(_log(packed)) == 5
    assert packed.read_mutation(LOG, (STREAM,)) == per_cell.read_mutation(LOG, (STREAM,))
    packed.close()
    per_cell.close()
    with (
        Store(tmp_path / "packed" / "node.sqlite") as reopened,
        Store(tmp_path / "cells" / "node.sqlite") as other,
    ):
        assert _log(reopened) == _log(other)
    database = sqlite3.connect(tmp_path / "packed" / "node.sqlite")
    kinds = database.execute("SELECT DISTINCT kind FROM atoms WHERE tid = 2").fetchall()
    database.close()
    assert kinds == [(5,)]


def test_a_group_commits_its_batches_together_and_refuses_a_bad_one_alone(store: Store) -> None:
    """``apply_group``: one transaction for several batches; a batch the store refuses fails
    alone; a later batch's pre-image sees an earlier batch of the group."""
    unknown = Mutation("ks", "missing", (i32(1),), rows=(Row((), None, None, {}),))
    outcomes = store.apply_group(
        [
            ([insert(CDC_BASE, PK, (i32(1),), {"v": txt("a")}, 10)], {0: _capture(1)}),
            ([unknown], {}),
            ([_update(1, 20, v=txt("b"))], {0: _capture(2)}),
            ([insert(KV, (txt("k"),), (), {"v": b"v"})], {}),
        ],
        now_s=NOW,
    )
    assert outcomes[0] is None and outcomes[2] is None and outcomes[3] is None
    assert isinstance(outcomes[1], UnknownTable)
    keys = {"pk": 1, "ck": 1}
    assert _log(store) == [
        (2, {**keys, "v": "a"}),
        (9, {**keys, "v": "a"}),
        (0, {**keys, "v": "a"}),  # the second batch's pre-image: the first batch's row
        (1, {**keys, "v": "b"}),
        (9, {**keys, "v": "b"}),
    ]
    assert store.read_mutation(KV, (txt("k"),)) is not None


def test_a_storage_failure_in_a_group_writes_none_of_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_cdc_apply, "build_log_mutations", _broken_log_builder)
    with pytest.raises(RuntimeError, match="log builder failed"):
        store.apply_group(
            [
                ([insert(KV, (txt("k"),), (), {"v": b"v"})], {}),
                ([_update(1, 20, v=txt("b"))], {0: _capture(1)}),
            ],
            now_s=NOW,
        )
    assert store.read_mutation(KV, (txt("k"),)) is None
    assert store.read_mutation(CDC_BASE, PK) is None


@pytest.mark.parametrize("preimage", [PreimageMode.OFF, PreimageMode.FULL])
def test_replicas_applying_at_different_times_hold_byte_identical_log_rows(
    tmp_path: Path, preimage: PreimageMode
) -> None:
    """The log rows' TTL counts from the coordinator's clock carried by the capture, so two
    replicas applying the same write 7 s apart (a hint, a clock skew) hold the same log rows,
    as Scylla's, whose coordinator builds the log mutation. Before, each counted from its own
    clock: the rows differed in their expiry, QUORUM log reads saw digest mismatches and every
    repair streamed the log. A capture without the clock (an older peer) keeps the replica's.
    Both the one-row fast path (no images) and the general path (pre-image)."""
    base = Table.create(
        "ks",
        "expiring",
        partition_key=[("pk", INT)],
        clustering=[("ck", INT, ClusteringOrder.ASC)],
        regular=[("v", TEXT)],
        options=TableOptions(cdc=CdcOptions(enabled=True, preimage=preimage, ttl_s=3_600)),
        table_id=uuid.UUID(int=40),
    )
    log = cdc_log_table(base)
    write = Row((i32(1),), cells={"v": Cell.live(10, txt("a"))})
    mutation = Mutation("ks", "expiring", (i32(1),), rows=(write,))

    def held(capture: CdcCapture) -> list[Mutation | None]:
        found = []
        for replica_now_s in (5_000, 5_007):
            directory = tmp_path / f"{capture.now_s}-{replica_now_s}"
            directory.mkdir()
            store = open_store(directory, base, log)
            store.apply([mutation], now_s=replica_now_s, cdc={0: capture})
            found.append(store.read_mutation(log, (STREAM,)))
            store.close()
        return found

    first, second = held(CdcCapture(STREAM, 7, 5_000))
    assert first is not None and first == second
    expiries = {c.local_deletion_time_s for r in first.rows for c in r.cells.values()}
    assert expiries == {5_000 + 3_600}
    first, second = held(CdcCapture(STREAM, 7))
    assert first is not None and second is not None and first != second
