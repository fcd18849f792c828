"""Random change workloads for the differential tests: timestamps drawn from a small range so
equal timestamps (Cassandra's tie rules), late older writes, overlapping deletes and repeated
collection paths are common; a fifth of the changes replayed, all shuffled.
"""

from __future__ import annotations

import random

from ringflow.cdc import CdcOperation
from ringflow.pipeline import Change
from ringflow.schema import INT, TEXT, SetType, Table, timeuuid_from_micros

from ._workload import T0

Op = CdcOperation
KV = Table.create("shop", "kv", [("k", INT)], regular=[("v", TEXT), ("s", SetType(INT))])
_RANGE_OPS = (
    (Op.RANGE_DELETE_START_INCLUSIVE, Op.RANGE_DELETE_END_INCLUSIVE),
    (Op.RANGE_DELETE_START_EXCLUSIVE, Op.RANGE_DELETE_END_EXCLUSIVE),
    (Op.RANGE_DELETE_START_INCLUSIVE, Op.RANGE_DELETE_END_EXCLUSIVE),
)


class ChangeGenerator:
    """Changes of :data:`KV` or the shared workload's table, from a seed."""

    def __init__(self, table: Table, seed: int) -> None:
        self.table = table
        self.rng = random.Random(seed)
        self.bits = 0
        self.paths = [timeuuid_from_micros(T0 + i, 1000 + i) for i in range(4)]

    def _change(self, op: CdcOperation, key: dict[str, object], **fields: object) -> Change:
        self.bits += 1
        ts = T0 + self.rng.randint(1, 60) * 1_000_000 + self.rng.randint(0, 2)
        time = fields.pop("time", None) or timeuuid_from_micros(ts, self.bits)
        return Change(self.table.keyspace, self.table.name, op, time, key, **fields)  # type: ignore[arg-type]

    def _ttl(self) -> int | None:
        return self.rng.choice([None, None, None, 30, 90])

    def _kv(self) -> list[Change]:
        key = {"k": self.rng.randint(1, 12)}
        ops = [Op.INSERT, Op.UPDATE, Op.UPDATE, Op.INSERT, Op.ROW_DELETE, Op.PARTITION_DELETE]
        op = self.rng.choice(ops)
        if op in (Op.ROW_DELETE, Op.PARTITION_DELETE):
            return [self._change(op, key)]
        values: dict[str, object] = {"v": self.rng.choice("pqr")}
        deleted = frozenset(self.rng.sample(["v", "s"], self.rng.randint(0, 1)))
        if "v" in deleted:
            del values["v"]
        if self.rng.random() < 0.6:
            values["s"] = frozenset(self.rng.sample(range(5), self.rng.randint(1, 3)))
        removed = {"s": frozenset({self.rng.randint(0, 4)})} if self.rng.random() < 0.3 else {}
        return [
            self._change(
                op, key, values=values, deleted=deleted, deleted_elements=removed, ttl_s=self._ttl()
            )
        ]

    def _items(self) -> list[Change]:
        pk = {"tenant": self.rng.choice("abcd"), "bucket": 1}
        row = {**pk, "seq": self.rng.randint(1, 3), "tag": self.rng.choice("xy")}
        roll = self.rng.random()
        if roll < 0.03:
            return [self._change(Op.PARTITION_DELETE, pk)]
        if roll < 0.09:
            return self._range(pk)
        if roll < 0.15:
            return [self._change(Op.ROW_DELETE, row)]
        if roll < 0.25:
            return [
                self._change(
                    Op.UPDATE, pk, values={"owner": self.rng.choice("mn")}, ttl_s=self._ttl()
                )
            ]
        op = self.rng.choice([Op.INSERT, Op.UPDATE])
        return [self._change(op, row, **self._item_values())]

    def _item_values(self) -> dict[str, object]:
        rng = self.rng
        values: dict[str, object] = {}
        deleted: set[str] = set()
        if rng.random() < 0.7:
            values["amount"] = rng.randint(1, 3)
        if rng.random() < 0.4:
            values["note"] = rng.choice(["a", "b", "ab"])
        if rng.random() < 0.2:
            deleted.add(rng.choice(["note", "amount", "tags", "attrs", "hist"]))
            values.pop("note", None) if "note" in deleted else None
            values.pop("amount", None) if "amount" in deleted else None
        if rng.random() < 0.4:
            values["tags"] = frozenset(rng.sample("uvw", rng.randint(1, 2)))
        if rng.random() < 0.3:
            values["attrs"] = {k: rng.randint(0, 2) for k in rng.sample("jk", rng.randint(1, 2))}
        if rng.random() < 0.3:
            values["hist"] = {p: rng.randint(0, 9) for p in rng.sample(self.paths, 2)}
        if rng.random() < 0.2:
            values["frozen_l"] = [rng.randint(0, 2) for _ in range(rng.randint(0, 2))] or [1]
        removed: dict[str, frozenset[object]] = {}
        if rng.random() < 0.2:
            removed["tags"] = frozenset({rng.choice("uvw")})
        if rng.random() < 0.1:
            removed["hist"] = frozenset({rng.choice(self.paths)})
        return {
            "values": values,
            "deleted": frozenset(deleted),
            "deleted_elements": removed,
            "ttl_s": self._ttl(),
        }

    def _range(self, pk: dict[str, object]) -> list[Change]:
        start_op, end_op = self.rng.choice(_RANGE_OPS)
        low = self.rng.randint(1, 3)
        start = {"seq": low} if self.rng.random() < 0.8 else {}
        end = {"seq": self.rng.randint(low, 3)} if self.rng.random() < 0.8 else {}
        if end and self.rng.random() < 0.3:
            end["tag"] = self.rng.choice("xy")
        first = self._change(start_op, {**pk, **start}, batch_seq_no=0)
        second = self._change(end_op, {**pk, **end}, batch_seq_no=1, time=first.time)
        return [first, second]

    def workload(self, size: int) -> list[Change]:
        make = self._kv if self.table is KV else self._items
        changes: list[Change] = []
        while len(changes) < size:
            changes += make()
        duplicates = self.rng.sample(changes, size // 5)
        mixed = changes + duplicates
        self.rng.shuffle(mixed)
        return mixed
