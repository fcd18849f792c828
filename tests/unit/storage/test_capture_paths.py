"""How rows reach a replica's capture, and the cap (seed 002 "out of sequence"; REPLICATION.md
decision 1): late rows, hint replay, streaming and repair; rows the replica held already are not
captured twice; an unknown stream falls back to the whole ring, counted; a clock that steps back
cannot reopen a sealed slice; a restarted store goes on where it stopped; the cap refuses CDC
writes with 0x1600 before anything is written, or drops the oldest sealed slices loudly."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ringflow.errors import ErrorCode, InvalidRequest
from ringflow.replication import Origin, SliceKey, SliceSettings
from ringflow.schema import Mutation
from ringflow.storage import WHOLE_RING, CaptureCap, CaptureFull, CapturePolicy
from tests.unit.storage._capture_helpers import (
    DELTA_BASE,
    DELTA_LOG,
    NOW_MS,
    NOW_S,
    RANGES,
    STREAMS,
    Clock,
    apply_writes,
    capture_store,
    captured_rows,
    log_rows,
    write,
)
from tests.unit.storage._tables import i32

TS_US = NOW_MS * 1000 - 300_000
START = NOW_MS - 1000  # the slice of TS_US (width 1 s)


def _keys(store: object) -> set[tuple[int, bool]]:
    return {(s.key.slice_start_ms, s.key.out_of_sequence) for s in store.capture.slices()}  # type: ignore[attr-defined]


def test_a_row_older_than_the_window_goes_out_of_sequence_at_its_arrival(tmp_path: Path) -> None:
    clock = Clock()
    store = capture_store(tmp_path, clock)
    apply_writes(store, [0], TS_US)
    clock.now_ms = START + 2000  # the slice of TS_US is closed from here on
    apply_writes(store, [3], TS_US)
    apply_writes(store, [6], TS_US + 2_000_000)  # a current row: in sequence
    assert _keys(store) == {(START, False), (START + 2000, True), (START + 2000, False)}
    assert captured_rows(store) == log_rows(store)
    store.close()


def test_a_hint_goes_in_sequence_while_its_slice_is_open_and_is_captured_once(
    tmp_path: Path,
) -> None:
    clock = Clock()
    store = capture_store(tmp_path, clock)
    apply_writes(store, [0], TS_US)
    apply_writes(store, [0, 3], TS_US, origin=Origin.HINT)  # 0 held already: not again
    clock.now_ms = START + 2500
    apply_writes(store, [6], TS_US, origin=Origin.HINT)  # late: out of sequence
    (in_sequence,) = store.capture.slices(out_of_sequence=False)
    (late,) = store.capture.slices(out_of_sequence=True)
    assert (in_sequence.row_count, late.row_count) == (2, 1)
    assert [r.origin for r in store.capture.rows(late.key)] == [Origin.HINT]
    assert captured_rows(store) == log_rows(store)
    assert store.capture.status().duplicate_rows == 1
    store.close()


def test_a_row_written_again_later_is_captured_once_though_its_bytes_differ(
    tmp_path: Path,
) -> None:
    """A hint (then a write message delivered late) for a write the replica applied seconds
    earlier: the log row carries another expiry, so other bytes; the log reads one row, and
    the capture holds one."""
    clock = Clock()
    store = capture_store(tmp_path, clock)
    mutation, capture = write(1, TS_US)
    store.apply([mutation], now_s=NOW_S, cdc={0: capture})
    store.apply([mutation], now_s=NOW_S + 5, cdc={0: capture}, origin=Origin.HINT)
    clock.now_ms = START + 3000  # the write message, late: out of sequence, checked
    store.apply([mutation], now_s=NOW_S + 9, cdc={0: capture})
    assert sum(log_rows(store).values()) == 1
    assert captured_rows(store) == log_rows(store)
    store.close()
    store = capture_store(tmp_path, clock)  # reopened: nothing recent in memory
    store.apply([mutation], now_s=NOW_S + 12, cdc={0: capture}, origin=Origin.HINT)
    assert captured_rows(store) == log_rows(store)
    assert store.capture.status().duplicate_rows == 1
    store.close()


def _log_mutations(store: object, stream: bytes) -> list[Mutation]:
    found = store.read_mutation(DELTA_LOG, (stream,))  # type: ignore[attr-defined]
    return [] if found is None else [found]


def test_streamed_and_repaired_log_rows_go_out_of_sequence_unless_held(tmp_path: Path) -> None:
    """A log partition streamed from a source (bootstrap) and the same rows again (read
    repair): the target captures the rows it lacked, once, out of sequence, STREAM first."""
    source = capture_store(tmp_path, Clock(), name="source.sqlite")
    apply_writes(source, [0, 3, 6, 1], TS_US)
    partitions = _log_mutations(source, STREAMS[0])
    assert sum(len(p.rows) for p in partitions) == 3
    target = capture_store(tmp_path, Clock(), name="target.sqlite")
    apply_writes(target, [3], TS_US)  # one of them written there too
    target.apply(partitions, now_s=NOW_S, origin=Origin.STREAM)
    target.apply(partitions, now_s=NOW_S)  # a read repair of the same rows: all held
    out_of_sequence = target.capture.slices(out_of_sequence=True)
    assert [(s.key.slice_start_ms, s.row_count) for s in out_of_sequence] == [(START + 1000, 2)]
    rows = target.capture.rows(out_of_sequence[0].key)
    assert {r.origin for r in rows} == {Origin.STREAM}
    assert captured_rows(target) == log_rows(target)
    assert target.capture.status().duplicate_rows == 1 + 3
    for store in (source, target):
        store.close()


def test_a_stream_the_resolver_does_not_know_is_captured_on_the_whole_ring(tmp_path: Path) -> None:
    store = capture_store(tmp_path, Clock())
    mutation, capture = write(1, TS_US)
    unknown = type(capture)(bytes(15) + b"\x10", 1)
    store.apply([mutation], now_s=NOW_S, cdc={0: unknown})
    (captured,) = store.capture.slices()
    assert (captured.key.range_start, captured.key.range_end) == WHOLE_RING
    assert store.capture.status().unresolved_rows == 1
    store.close()


def test_a_clock_stepping_back_after_a_seal_cannot_reopen_a_sealed_slice(tmp_path: Path) -> None:
    clock = Clock()
    store = capture_store(tmp_path, clock)
    apply_writes(store, [0], TS_US)
    assert len(store.capture.seal_due(START + 2000)) == 1
    clock.now_ms = START + 1500  # NTP steps the clock back
    apply_writes(store, [3], TS_US)
    assert store.capture.slices(sealed=True)[0].row_count == 1
    (late,) = store.capture.slices(sealed=False)
    assert late.key.out_of_sequence and late.key.slice_start_ms == START + 2000
    assert store.capture.seal_due(START + 1800) == []  # the horizon never goes back either
    store.close()


def test_a_slice_sealed_under_other_settings_sends_its_late_rows_out_of_sequence(
    tmp_path: Path,
) -> None:
    """Width 1 s, count 2, then count 5: a row now in sequence for a slice sealed under the
    old window goes to the out-of-sequence bucket of its arrival (counted)."""
    clock = Clock()
    store = capture_store(tmp_path, clock)
    apply_writes(store, [0], TS_US)
    store.capture.seal_due(START + 2000)
    store.close()
    clock.now_ms = START + 2100
    store = capture_store(tmp_path, clock, settings=SliceSettings(1, 5))
    apply_writes(store, [3], TS_US)
    assert _keys(store) == {(START, False), (START + 2000, True)}
    assert store.capture.status().redirected_rows == 1
    store.capture.validate()
    store.close()


def test_a_reopened_store_goes_on_with_its_slices_sequence_and_seal_horizon(
    tmp_path: Path,
) -> None:
    clock = Clock()
    store = capture_store(tmp_path, clock)
    apply_writes(store, [0, 3], TS_US)
    apply_writes(store, [1], TS_US + 2_000_000)
    store.capture.seal_due(START + 2000)
    last_seq = max(r.seq for s in store.capture.slices() for r in store.capture.rows(s.key))
    store.close()
    store = capture_store(tmp_path, clock)
    status = store.capture.status()
    assert (status.slices_open, status.slices_sealed, status.rows) == (1, 1, 3)
    assert status.sealed_through_ms == START + 2000
    apply_writes(store, [7], TS_US + 2_000_000)
    (open_slice,) = store.capture.slices(sealed=False)
    seqs = [r.seq for r in store.capture.rows(open_slice.key)]
    assert len(seqs) == 2 and seqs[0] <= last_seq < seqs[1]  # the sequence goes on
    store.capture.validate()
    store.close()


def test_the_refuse_policy_fails_cdc_writes_with_0x1600_before_writing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = capture_store(tmp_path, Clock(), cap=CaptureCap(max_bytes=600))
    apply_writes(store, [1, 2], TS_US)  # about 450 bytes
    apply_writes(store, [4], TS_US)  # over the cap once written: the last write accepted
    before = log_rows(store)
    with caplog.at_level(logging.ERROR), pytest.raises(CaptureFull) as refused:
        apply_writes(store, [5], TS_US)
    assert refused.value.code == ErrorCode.CDC_WRITE_FAILURE == 0x1600
    assert "over its cap" in caplog.text
    assert log_rows(store) == before
    assert store.read_row(DELTA_BASE, (i32(0),), (i32(1),), now_s=NOW_S) is None  # 5 % 5
    with pytest.raises(CaptureFull):
        apply_writes(store, [6], TS_US, origin=Origin.HINT)
    store.apply([write(8, TS_US)[0]], now_s=NOW_S)  # not a CDC write: accepted
    partitions = _log_mutations(store, STREAMS[1])
    store.apply(partitions, now_s=NOW_S, origin=Origin.STREAM)  # streaming: accepted
    status = store.capture.status()
    assert status.over_cap and status.refused_batches == 2 and status.policy == "refuse"
    store.close()


def test_the_age_cap_refuses_too(tmp_path: Path) -> None:
    clock = Clock()
    store = capture_store(tmp_path, clock, cap=CaptureCap(max_age_s=60))
    apply_writes(store, [1], TS_US)
    clock.now_ms += 60_001
    with pytest.raises(CaptureFull, match="oldest slice 60 s old"):
        apply_writes(store, [2], TS_US + 60_000_000)
    store.close()


def test_drop_oldest_drops_sealed_slices_oldest_first_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    cap = CaptureCap(max_bytes=900, policy=CapturePolicy.DROP_OLDEST)
    store = capture_store(tmp_path, clock, cap=cap)
    for second in range(4):
        clock.now_ms = NOW_MS + second * 1000
        apply_writes(store, [0, 3], TS_US + second * 1_000_000)  # one slice a second
    assert store.capture.status().over_cap
    store.capture.seal_due(NOW_MS + 3000)  # seals the first three
    with caplog.at_level(logging.WARNING):
        dropped = store.capture.enforce_cap()
    assert [s.key.slice_start_ms for s in dropped] == [START, START + 1000]
    assert caplog.text.count("dropped slice") == 2
    status = store.capture.status()
    assert (status.dropped_slices, status.dropped_rows, status.over_cap) == (2, 4, False)
    assert [s.key.slice_start_ms for s in store.capture.slices()] == [START + 2000, START + 3000]
    store.capture.validate()
    store.close()


def test_drop_takes_sealed_slices_only(tmp_path: Path) -> None:
    store = capture_store(tmp_path, Clock())
    apply_writes(store, [0], TS_US)
    (open_slice,) = store.capture.slices()
    with pytest.raises(InvalidRequest, match="open"):
        store.capture.drop(open_slice.key)
    store.capture.seal_due(START + 2000)
    assert store.capture.drop(open_slice.key)
    assert not store.capture.drop(open_slice.key)
    assert not store.capture.drop(SliceKey("ks", "orders", *RANGES[STREAMS[1]], START))
    status = store.capture.status()
    assert (status.slices_sealed, status.rows, status.oldest_age_ms) == (0, 0, None)
    store.capture.validate()
    store.close()


def test_cap_values_are_checked() -> None:
    with pytest.raises(InvalidRequest, match="max_bytes"):
        CaptureCap(max_bytes=0)
    with pytest.raises(InvalidRequest, match="policy"):
        CaptureCap(policy="refuse")  # type: ignore[arg-type]
