"""A Jepsen-style checker of a simulated cluster's client history (stdlib only, no ringflow).

The model is one last-write-wins register per key of ``ks.kv (k int PRIMARY KEY, v int)``
(CDC on). Each write op writes one or more cells ``(key, value)`` (several cells: a batch), all
at the op's client timestamp ``ts``. Timestamps and written values are unique across the whole
history (``History.append`` enforces it), so a value names its write. Outcomes: ``ok``
(acknowledged), ``fail`` (definitely not applied), ``info`` (indeterminate). The checks are
lenient: any sent write (ok, fail or info) may be observed; only ``ok`` writes are required.
Reads and scans that are not ``ok`` carry no result and are not checked.

``check_history`` rules, for every observation of an ok read or scan:

1. No phantom: the observed ``(key, value, writetime)`` belongs to a sent write that wrote
   ``value`` to ``key`` with ``ts == writetime``.
2. No value from the future: that write was invoked no later than the read completed.
3. Acknowledged writes are visible: if ok writes of the key completed strictly before the read
   was invoked, the read saw the key with a writetime >= the largest of their timestamps (a
   write completing exactly when the read is invoked is concurrent: not required). A scan is
   checked on every such key: a key missing from it is a lost write.

Per-key linearizability and monotonic reads are not checked. ``check_final`` checks the state
read after the run healed (see its docstring). Both return human-readable violation messages
naming the ops involved (empty: pass), capped at ``max_messages`` plus a ``... N more`` line.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, TypeAlias

Outcome: TypeAlias = Literal["ok", "fail", "info"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "fail", "info")
MAX_MESSAGES = 50


def _check_span(what: str, invoke_ms: int, complete_ms: int, outcome: str) -> None:
    if complete_ms < invoke_ms:
        raise ValueError(f"{what}: complete_ms {complete_ms} < invoke_ms {invoke_ms}")
    if outcome not in OUTCOMES:
        raise ValueError(f"{what}: outcome {outcome!r} is not one of {OUTCOMES}")


@dataclass(frozen=True, slots=True)
class Write:
    """Write op ``op``: each cell ``(key, value)`` (distinct keys) at timestamp ``ts`` (µs)."""

    op: int
    cells: tuple[tuple[int, int], ...]
    ts: int
    invoke_ms: int
    complete_ms: int
    outcome: Outcome

    def __post_init__(self) -> None:
        _check_span(f"write op {self.op}", self.invoke_ms, self.complete_ms, self.outcome)
        keys = [key for key, _ in self.cells]
        if not keys or len(set(keys)) != len(keys):
            raise ValueError(f"write op {self.op}: cells need distinct keys, got {self.cells}")

    def value_of(self, key: int) -> int | None:
        """The value this op wrote to ``key`` (None: it did not write ``key``)."""
        return next((value for k, value in self.cells if k == key), None)


@dataclass(frozen=True, slots=True)
class Read:
    """QUORUM read op ``op`` of ``key``: ``found`` is ``(value, writetime)`` or None (absent)."""

    op: int
    key: int
    invoke_ms: int
    complete_ms: int
    outcome: Outcome
    found: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        _check_span(f"read op {self.op}", self.invoke_ms, self.complete_ms, self.outcome)
        if self.outcome != "ok" and self.found is not None:
            raise ValueError(f"read op {self.op}: a {self.outcome} read carries no result")


@dataclass(frozen=True, slots=True)
class Scan:
    """Full-table scan op ``op``: ``found`` maps every key it saw to ``(value, writetime)``."""

    op: int
    invoke_ms: int
    complete_ms: int
    outcome: Outcome
    found: Mapping[int, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_span(f"scan op {self.op}", self.invoke_ms, self.complete_ms, self.outcome)
        if self.outcome != "ok" and self.found:
            raise ValueError(f"scan op {self.op}: a {self.outcome} scan carries no result")
        object.__setattr__(self, "found", MappingProxyType(dict(self.found)))  # a snapshot


Op: TypeAlias = Write | Read | Scan


@dataclass(frozen=True, slots=True)
class LogRow:
    """One CDC log row read at the end: ``value`` None means the row carries no ``v``."""

    key: int
    value: int | None
    ts: int


class HistoryFullError(RuntimeError):
    """Appending beyond ``History.max_ops``."""


class History:
    """The ops of one run in append order, at most ``max_ops`` of them.

    ``append`` rejects (ValueError) a reused op id, write timestamp or written value: the
    checks rely on a value and a timestamp each naming one write.
    """

    __slots__ = ("_ops", "_ts", "_values", "max_ops")

    def __init__(self, max_ops: int = 100_000) -> None:
        self.max_ops = max_ops
        self._ops: dict[int, Op] = {}
        self._ts: dict[int, int] = {}  # write ts -> op id
        self._values: dict[int, int] = {}  # written value -> op id

    def append(self, op: Op) -> Op:
        """Record ``op`` (returned); HistoryFullError beyond ``max_ops``."""
        if len(self._ops) >= self.max_ops:
            raise HistoryFullError(
                f"history full: {self.max_ops} ops (max_ops) recorded, cannot append op {op.op}"
            )
        if op.op in self._ops:
            raise ValueError(f"op id {op.op} already used")
        if isinstance(op, Write):
            if op.ts in self._ts:
                used = f"already used by op {self._ts[op.ts]}"
                raise ValueError(f"write op {op.op}: ts {op.ts} {used}")
            for _, value in op.cells:
                if value in self._values:
                    used = f"already written by op {self._values[value]}"
                    raise ValueError(f"write op {op.op}: value {value} {used}")
            if len({value for _, value in op.cells}) != len(op.cells):
                raise ValueError(f"write op {op.op}: a value repeats in {op.cells}")
            self._ts[op.ts] = op.op
            self._values.update((value, op.op) for _, value in op.cells)
        self._ops[op.op] = op
        return op

    @property
    def ops(self) -> tuple[Op, ...]:
        return tuple(self._ops.values())

    def writes(self) -> tuple[Write, ...]:
        return tuple(op for op in self._ops.values() if isinstance(op, Write))

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)


@dataclass(frozen=True, slots=True)
class _Acked:
    """One key's ok writes by complete_ms; ``latest[i]``: max-ts write among the first i+1."""

    completes: tuple[int, ...]
    latest: tuple[Write, ...]

    def before(self, invoke_ms: int) -> Write | None:
        """The max-ts ok write that completed strictly before ``invoke_ms``, if any."""
        count = bisect_left(self.completes, invoke_ms)
        return self.latest[count - 1] if count else None


@dataclass(frozen=True, slots=True)
class _Index:
    by_value: dict[int, Write]
    by_ts: dict[int, Write]
    acked: dict[int, _Acked]

    @staticmethod
    def of(history: History) -> _Index:
        writes = history.writes()
        per_key: dict[int, list[Write]] = {}
        for write in writes:
            if write.outcome == "ok":
                for key, _ in write.cells:
                    per_key.setdefault(key, []).append(write)
        acked: dict[int, _Acked] = {}
        for key, oks in per_key.items():
            oks.sort(key=lambda w: w.complete_ms)
            latest: list[Write] = []
            for write in oks:
                latest.append(write if not latest or write.ts > latest[-1].ts else latest[-1])
            acked[key] = _Acked(tuple(w.complete_ms for w in oks), tuple(latest))
        by_value = {value: w for w in writes for _, value in w.cells}
        return _Index(by_value, {w.ts: w for w in writes}, acked)

    def source(self, key: int, value: int, writetime: int) -> Write | str:
        """The write of ``(key, value, writetime)``, or why there is none (rule 1)."""
        write = self.by_value.get(value)
        if write is None:
            return f"no op wrote value {value}"
        if write.value_of(key) != value:
            return f"op {write.op} wrote value {value} to key(s) {[k for k, _ in write.cells]}"
        if write.ts != writetime:
            return f"op {write.op} wrote value {value} with ts {write.ts}"
        return write

    def name_ts(self, ts: int) -> str:
        write = self.by_ts.get(ts)
        return f"ts {ts} (op {write.op})" if write else f"ts {ts} (no op)"


def _capped(messages: list[str], max_messages: int) -> list[str]:
    if len(messages) <= max_messages:
        return messages
    return [*messages[:max_messages], f"... {len(messages) - max_messages} more violations"]


def _observe(
    index: _Index, op: Read | Scan, key: int, seen: tuple[int, int] | None, out: list[str]
) -> None:
    """Rules 1-3 for what ``op`` saw of ``key`` (``seen`` None: nothing)."""
    what = f"{type(op).__name__.lower()} op {op.op}"
    if seen is not None:
        value, writetime = seen
        source = index.source(key, value, writetime)
        if isinstance(source, str):
            out.append(f"phantom: {what} saw key {key} = {value} @ {writetime}, but {source}")
        elif source.invoke_ms > op.complete_ms:
            out.append(
                f"future: {what} (completed {op.complete_ms}ms) saw key {key} = {value} of "
                f"write op {source.op}, invoked later at {source.invoke_ms}ms"
            )
    acked = index.acked.get(key)
    need = acked.before(op.invoke_ms) if acked else None
    if need is not None and (seen is None or seen[1] < need.ts):
        got = "nothing" if seen is None else f"{seen[0]} @ {seen[1]}"
        out.append(
            f"lost write: {what} (invoked {op.invoke_ms}ms) saw {got} for key {key}, but ok "
            f"write op {need.op} ({need.value_of(key)} @ {need.ts}) completed at "
            f"{need.complete_ms}ms"
        )


def check_history(history: History, max_messages: int = MAX_MESSAGES) -> list[str]:
    """Violations of rules 1-3 (module docstring) by the ok reads and scans of ``history``."""
    index = _Index.of(history)
    out: list[str] = []
    for op in history:
        if op.outcome != "ok" or isinstance(op, Write):
            continue
        if isinstance(op, Read):
            _observe(index, op, op.key, op.found, out)
            continue
        required = {k for k, acked in index.acked.items() if acked.before(op.invoke_ms)}
        for key in sorted(required | set(op.found)):
            _observe(index, op, key, op.found.get(key), out)
    return _capped(out, max_messages)


def check_final(
    history: History,
    final: Mapping[int, tuple[int, int]],
    log: Sequence[LogRow],
    max_messages: int = MAX_MESSAGES,
) -> list[str]:
    """Violations by the healed state: ``final`` (base table read at ALL, key -> (value,
    writetime), absent: no row) and ``log`` (every CDC log row).

    a. Every final row belongs to a sent write; every ok write's ts is <= the final writetime
       of each key it wrote (such a key must have a row).
    b. Every log row matches a sent write of its key with its ts, and carries that write's value.
    c. No write has more than one log row per key.
    d. Every ok write has a log row for each key it wrote.
    e. Per key, the newest log row's ts equals the final writetime; a key has log rows if and
       only if it has a final row.
    """
    index = _Index.of(history)
    out: list[str] = []
    for key, (value, writetime) in sorted(final.items()):
        source = index.source(key, value, writetime)
        if isinstance(source, str):
            out.append(f"phantom final row: key {key} = {value} @ {writetime}, but {source}")
    rows = Counter((entry.key, entry.ts) for entry in log)
    ok_cells = [(w, k, v) for w in history.writes() if w.outcome == "ok" for k, v in w.cells]
    for write, key, value in ok_cells:
        base = final.get(key)
        if base is None or base[1] < write.ts:
            got = "no final row" if base is None else f"an older final row {base[0]} @ {base[1]}"
            out.append(f"lost write: ok write op {write.op} ({key} = {value} @ {write.ts}): {got}")
    for entry in dict.fromkeys(log):  # b: each distinct row once
        source_ts = index.by_ts.get(entry.ts)
        what = f"phantom log row: key {entry.key} = {entry.value} @ {entry.ts}"
        wrote = None if source_ts is None else source_ts.value_of(entry.key)
        if source_ts is None:
            out.append(f"{what}, but no op wrote ts {entry.ts}")
        elif wrote is None:
            out.append(f"{what}, but op {source_ts.op} did not write key {entry.key}")
        elif wrote != entry.value:
            out.append(f"{what}, but op {source_ts.op} wrote {wrote} to it")
    for (key, ts), count in sorted(rows.items()):
        if count > 1:
            out.append(f"duplicate log rows: {count} rows of key {key} at {index.name_ts(ts)}")
    for write, key, value in ok_cells:
        if (key, write.ts) not in rows:
            out.append(f"missing log row: ok write op {write.op} ({key} = {value} @ {write.ts})")
    newest: dict[int, int] = {}
    for entry in log:
        newest[entry.key] = max(entry.ts, newest.get(entry.key, entry.ts))
    for key in sorted(set(final) | set(newest)):
        base, logged = final.get(key), newest.get(key)
        if logged is not None and base is None:
            newest_row = index.name_ts(logged)
            out.append(f"base/log: key {key} has log rows (newest {newest_row}) but no final row")
        elif base is not None and logged is None:
            out.append(f"base/log: key {key} = {base[0]} @ {base[1]} but has no log row")
        elif base is not None and logged is not None and base[1] != logged:
            out.append(
                f"base/log: key {key} final {base[0]} @ {index.name_ts(base[1])}, but newest "
                f"log row at {index.name_ts(logged)}"
            )
    return _capped(out, max_messages)


def summary(history: History) -> str:
    """Op counts by kind and outcome, and the written cells and batches, e.g.
    ``5 ops: 4 writes (ok=2 info=2), 1 reads (ok=1), cells=5 batches=1``."""
    counts = Counter((type(op).__name__.lower(), op.outcome) for op in history)
    parts = []
    for kind in ("write", "read", "scan"):
        total = sum(counts[kind, outcome] for outcome in OUTCOMES)
        if total:
            by = " ".join(f"{o}={counts[kind, o]}" for o in OUTCOMES if counts[kind, o])
            parts.append(f"{total} {kind}s ({by})")
    writes = history.writes()
    if writes:
        batches = sum(len(w.cells) > 1 for w in writes)
        cells = sum(len(w.cells) for w in writes)
        parts.append(f"cells={cells} batches={batches}")
    return f"{len(history)} ops: " + (", ".join(parts) if parts else "none")
