"""The Jepsen-style history checker (tests/sim/_jepsen.py) on small synthetic histories: each
rule catches its violation and names the op, and a correct interleaved history passes."""

from __future__ import annotations

import pytest

from tests.sim._jepsen import (
    History,
    HistoryFullError,
    LogRow,
    Op,
    Outcome,
    Read,
    Scan,
    Write,
    check_final,
    check_history,
    summary,
)


def w(
    op: int, cells: dict[int, int], ts: int, span: tuple[int, int], outcome: Outcome = "ok"
) -> Write:
    return Write(op, tuple(cells.items()), ts, span[0], span[1], outcome)


def r(op: int, key: int, span: tuple[int, int], found: tuple[int, int] | None) -> Read:
    return Read(op, key, span[0], span[1], "ok", found)


def s(op: int, span: tuple[int, int], found: dict[int, tuple[int, int]]) -> Scan:
    return Scan(op, span[0], span[1], "ok", found)


def history(*ops: Op) -> History:
    result = History()
    for op in ops:
        result.append(op)
    return result


def one(messages: list[str], *needles: str) -> str:
    assert len(messages) == 1, messages
    for needle in needles:
        assert needle in messages[0], messages
    return messages[0]


def correct_history() -> History:
    return history(
        w(1, {1: 10}, 1_000, (0, 10)),
        w(2, {1: 11}, 1_002, (5, 20)),  # concurrent with op 1 and higher ts
        r(3, 1, (6, 8), (10, 1_000)),  # both in flight: either is fine
        r(4, 1, (9, 12), None),  # nothing completed before it was invoked
        w(5, {1: 12, 2: 20}, 1_003, (21, 30)),  # batch
        r(6, 1, (10, 15), (10, 1_000)),  # op 1 completed exactly at invoke: op 1 not required
        w(7, {2: 21}, 1_004, (31, 40), "info"),  # indeterminate, observed later
        w(8, {3: 30}, 1_005, (32, 45), "info"),  # indeterminate, never observed
        w(9, {3: 31}, 1_006, (33, 36), "fail"),  # failed, never observed
        w(10, {4: 40}, 1_007, (33, 36), "fail"),  # failed yet observed: lenient
        s(11, (50, 60), {1: (12, 1_003), 2: (21, 1_004), 4: (40, 1_007)}),
        r(12, 2, (61, 62), (21, 1_004)),
        Read(13, 1, 63, 70, "info"),  # no result, not checked
        Scan(14, 63, 70, "fail"),
        w(15, {5: 50}, 999, (64, 66)),  # lower ts than older writes of other keys: fine
        s(16, (67, 80), {1: (12, 1_003), 2: (21, 1_004), 5: (50, 999)}),  # 4 not required
    )


def correct_final() -> tuple[dict[int, tuple[int, int]], list[LogRow]]:
    final = {1: (12, 1_003), 2: (21, 1_004), 4: (40, 1_007), 5: (50, 999)}
    log = [
        LogRow(1, 10, 1_000),
        LogRow(1, 11, 1_002),
        LogRow(1, 12, 1_003),
        LogRow(2, 20, 1_003),
        LogRow(2, 21, 1_004),
        LogRow(4, 40, 1_007),
        LogRow(5, 50, 999),
    ]
    return final, log


def test_a_correct_interleaved_history_passes() -> None:
    ops = correct_history()
    assert check_history(ops) == []
    final, log = correct_final()
    assert check_final(ops, final, log) == []
    assert summary(ops) == (
        "16 ops: 8 writes (ok=4 fail=2 info=2), 5 reads (ok=4 info=1), 3 scans (ok=2 fail=1), "
        "cells=9 batches=1"
    )


@pytest.mark.parametrize(
    ("seen", "why"),
    [
        ((99, 1_000), "no op wrote value 99"),
        ((20, 1_000), "op 2 wrote value 20 to key(s) [2]"),
        ((10, 1_001), "op 1 wrote value 10 with ts 1000"),
    ],
)
def test_rule_1_phantom_read(seen: tuple[int, int], why: str) -> None:
    ops = history(w(1, {1: 10}, 1_000, (0, 5), "info"), w(2, {2: 20}, 1_001, (0, 5)))
    ops.append(r(3, 1, (10, 12), seen))
    one(check_history(ops), "phantom", "read op 3", why)


def test_rule_1_phantom_in_scan() -> None:
    ops = history(w(1, {1: 10}, 1_000, (0, 5)), s(2, (10, 12), {1: (10, 1_000), 7: (70, 1)}))
    one(check_history(ops), "phantom", "scan op 2", "key 7", "no op wrote value 70")


def test_rule_2_value_from_the_future() -> None:
    ops = history(r(1, 1, (0, 10), (10, 1_000)), w(2, {1: 10}, 1_000, (11, 20), "info"))
    one(check_history(ops), "future", "read op 1", "write op 2", "invoked later at 11ms")
    same_ms = history(r(1, 1, (0, 10), (10, 1_000)), w(2, {1: 10}, 1_000, (10, 20)))
    assert check_history(same_ms) == []  # invoked when the read completed: concurrent


def test_rule_3_acknowledged_write_is_visible() -> None:
    ops = history(
        w(1, {1: 10}, 1_000, (0, 10)),
        w(2, {1: 11}, 1_001, (0, 11)),
        r(3, 1, (12, 14), None),
        r(4, 1, (12, 14), (10, 1_000)),
        r(5, 1, (11, 14), (10, 1_000)),  # op 2 completed exactly at invoke: only op 1 required
    )
    messages = check_history(ops)
    assert len(messages) == 2, messages
    assert "read op 3" in messages[0] and "saw nothing" in messages[0]
    assert "read op 4" in messages[1] and "saw 10 @ 1000" in messages[1]
    assert all("lost write" in m and "ok write op 2 (11 @ 1001)" in m for m in messages)


def test_rule_3_ack_order_is_by_ts_not_completion() -> None:
    # op 2 completes later but carries a lower ts: op 1's newer value satisfies both.
    ops = history(
        w(1, {1: 10}, 2_000, (0, 5)),
        w(2, {1: 11}, 1_000, (0, 8)),
        r(3, 1, (9, 10), (10, 2_000)),
        r(4, 1, (9, 10), (11, 1_000)),
    )
    one(check_history(ops), "lost write", "read op 4", "ok write op 1 (10 @ 2000)")


def test_rule_3_scan_missing_key_is_a_lost_write() -> None:
    ops = history(
        w(1, {1: 10, 2: 20}, 1_000, (0, 5)),
        s(2, (6, 9), {1: (10, 1_000)}),
    )
    one(check_history(ops), "lost write", "scan op 2", "key 2", "saw nothing", "ok write op 1")


def test_indeterminate_and_failed_writes_are_not_required() -> None:
    ops = history(
        w(1, {1: 10}, 1_000, (0, 5), "info"),
        w(2, {2: 20}, 1_001, (0, 5), "fail"),
        r(3, 1, (6, 7), None),
        r(4, 1, (8, 9), (10, 1_000)),  # the info write shows up later: allowed
        r(5, 1, (10, 11), None),  # ... and disappears again: not monotonic, not checked
        s(6, (12, 13), {}),
    )
    assert check_history(ops) == []
    assert check_final(ops, {}, []) == []


def test_messages_are_capped() -> None:
    ops = history(*(r(op, 1, (0, 1), (op, 1)) for op in range(60)))
    messages = check_history(ops, max_messages=50)
    assert len(messages) == 51
    assert messages[-1] == "... 10 more violations"
    assert "read op 49" in messages[49]


def final_of(*ops: Op) -> History:
    return history(
        w(1, {1: 10, 2: 20}, 1_000, (0, 5)),
        w(2, {1: 11}, 1_001, (6, 9), "info"),
        *ops,
    )


LOG = [LogRow(1, 10, 1_000), LogRow(2, 20, 1_000), LogRow(1, 11, 1_001)]
FINAL = {1: (11, 1_001), 2: (20, 1_000)}


def test_final_state_passes() -> None:
    assert check_final(final_of(), FINAL, LOG) == []
    # the info write never applied: its row and log row are absent
    assert check_final(final_of(), {1: (10, 1_000), 2: (20, 1_000)}, LOG[:2]) == []


def test_final_a_phantom_row() -> None:
    messages = check_final(final_of(), {**FINAL, 3: (30, 1_000)}, LOG)
    assert "phantom final row: key 3 = 30 @ 1000, but no op wrote value 30" in messages[0]
    assert len(messages) == 2 and "base/log: key 3" in messages[1]  # e. also holds


def test_final_a_acknowledged_write_survives() -> None:
    ops = final_of(w(3, {3: 30}, 900, (10, 12)))
    log = [*LOG, LogRow(3, 30, 900)]
    missing = check_final(ops, FINAL, log)
    assert "lost write: ok write op 3 (3 = 30 @ 900): no final row" in missing[0]
    stale = check_final(final_of(), {1: (11, 1_001), 2: (20, 999)}, LOG)
    assert any("ok write op 1 (2 = 20 @ 1000): an older final row 20 @ 999" in m for m in stale)


@pytest.mark.parametrize(
    ("row", "why"),
    [
        (LogRow(1, 77, 5), "no op wrote ts 5"),
        (LogRow(3, 10, 1_000), "op 1 did not write key 3"),
        (LogRow(2, 21, 1_000), "op 1 wrote 20 to it"),
        (LogRow(2, None, 1_000), "op 1 wrote 20 to it"),
    ],
)
def test_final_b_phantom_log_row(row: LogRow, why: str) -> None:
    messages = check_final(final_of(), FINAL, [*LOG, row])
    assert f"phantom log row: key {row.key} = {row.value} @ {row.ts}, but {why}" in messages[0]


def test_final_c_duplicate_log_rows() -> None:
    messages = check_final(final_of(), FINAL, [*LOG, LogRow(2, 20, 1_000)])
    one(messages, "duplicate log rows: 2 rows of key 2 at ts 1000 (op 1)")


def test_final_d_missing_log_row() -> None:
    messages = check_final(final_of(), FINAL, [LOG[0], LOG[2]])
    assert messages[0] == "missing log row: ok write op 1 (2 = 20 @ 1000)"
    assert "base/log: key 2 = 20 @ 1000 but has no log row" in messages[1]


def test_final_e_base_and_log_agree() -> None:
    behind = check_final(final_of(), {1: (10, 1_000), 2: (20, 1_000)}, LOG)
    one(behind, "base/log: key 1 final 10 @ ts 1000 (op 1)", "newest log row at ts 1001 (op 2)")
    ops = final_of(w(3, {3: 30}, 1_002, (10, 12), "info"))
    no_row = check_final(ops, FINAL, [*LOG, LogRow(3, 30, 1_002)])
    one(no_row, "base/log: key 3 has log rows (newest ts 1002 (op 3)) but no final row")


def test_history_is_bounded_and_enforces_uniqueness() -> None:
    ops = History(max_ops=2)
    ops.append(w(1, {1: 10}, 1_000, (0, 1)))
    with pytest.raises(ValueError, match="ts 1000 already used by op 1"):
        ops.append(w(2, {2: 20}, 1_000, (0, 1)))
    with pytest.raises(ValueError, match="value 10 already written by op 1"):
        ops.append(w(2, {2: 10}, 1_001, (0, 1)))
    with pytest.raises(ValueError, match="op id 1 already used"):
        ops.append(r(1, 1, (0, 1), None))
    assert len(ops) == 1  # rejected ops left no trace
    ops.append(w(2, {2: 20}, 1_001, (0, 1)))
    with pytest.raises(HistoryFullError, match="2 ops"):
        ops.append(r(3, 1, (0, 1), None))
    with pytest.raises(ValueError, match="complete_ms 1 < invoke_ms 2"):
        r(4, 1, (2, 1), None)
    with pytest.raises(ValueError, match="distinct keys"):
        Write(5, ((1, 50), (1, 51)), 5, 0, 1, "ok")
    with pytest.raises(ValueError, match="carries no result"):
        Read(6, 1, 0, 1, "info", (10, 1_000))
