"""A cluster node's SELECT without a thread waiting (``ClusterDataPlane.submit_read``): the real
processor and plane, a coordinator that answers slice reads from another store on a real event
loop. The answer must be the one the replicas' store gives to the same statement; the slices a
run lacks are read together in one round; a page resumed inside a slice held costs no read; a
coordinator error fails the statement with that error."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from ringflow.cluster.service import _plane
from ringflow.cql._wire import Consistency
from ringflow.errors import ReadTimeout
from ringflow.storage import ResultTooLarge, mutation_size
from tests.unit.cluster._coordinated import TIMEOUT_S, Coordinator, select
from tests.unit.cql._exec_harness import ExecNode, decode_rows


def test_an_in_select_reads_every_partition_in_one_round_and_answers_as_the_replicas(
    nodes: tuple[ExecNode, ExecNode, Coordinator], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, local, coordinator = nodes
    text = "SELECT k, c, v FROM ks.t WHERE k IN (1, 3, 4) AND c >= 2 AND c < 8"
    got = decode_rows(select(local, text))
    assert got == source.q(text)
    assert len(got) == 18
    assert len(coordinator.calls) == 3
    assert coordinator.answered[0] == 3, "all three reads start before the first answer"


def test_a_filtered_read_resumed_inside_its_slice_reads_it_once(
    nodes: tuple[ExecNode, ExecNode, Coordinator],
) -> None:
    source, local, coordinator = nodes
    text = "SELECT c, v FROM ks.t WHERE k = 2 AND v = 'k2c9' ALLOW FILTERING"
    # two rows a batch: the filter drops them, so the partition is read on and on, resumed
    got = decode_rows(select(local, text, page_size=2))
    assert got == source.q(text) == [(9, "k2c9")]
    assert len(coordinator.calls) == 1


def test_paging_through_a_partition_answers_each_page_as_the_replicas(
    nodes: tuple[ExecNode, ExecNode, Coordinator],
) -> None:
    _, local, _ = nodes
    text = "SELECT c FROM ks.t WHERE k = 5"
    state: bytes | None = None
    pages = []
    for _ in range(10):
        answer = select(local, text, page_size=4, paging_state=state)
        pages.append([row[0] for row in decode_rows(answer)])
        state = answer.metadata.paging_state
        if state is None:
            break
    assert pages == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_a_coordinator_error_fails_the_select_with_it(
    nodes: tuple[ExecNode, ExecNode, Coordinator],
) -> None:
    _, local, coordinator = nodes
    coordinator.failing = ReadTimeout(Consistency.QUORUM, 1, 2, False)
    local.raw("SELECT * FROM ks.t WHERE k = 1", consistency=Consistency.QUORUM)
    pending = local.processor.take_pending()
    assert pending is not None
    with pytest.raises(ReadTimeout):
        pending[0].result(TIMEOUT_S)


def _small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_plane, "RANGE_CHUNK_PARTITIONS", 2)
    monkeypatch.setattr(_plane, "MIN_RANGE_CHUNK_PARTITIONS", 2)


@pytest.mark.parametrize(
    "text",
    [
        "SELECT count(*), max(c), min(v) FROM ks.t",
        "SELECT k, count(*) FROM ks.t GROUP BY k",
        "SELECT k, c, v FROM ks.t",
        "SELECT k, c FROM ks.t WHERE v = 'k4c9' ALLOW FILTERING",
    ],
)
def test_a_select_over_many_chunks_goes_on_where_it_lacks_one_reading_each_once(
    nodes: tuple[ExecNode, ExecNode, Coordinator], monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """An aggregate, a GROUP BY, an unpaged scan and a filtered page each span the six
    partitions' three chunks in one statement: the SELECT goes on from where it lacked the
    next chunk (no thread waits, nothing is run again), so each chunk is read once."""
    source, local, coordinator = nodes
    _small_chunks(monkeypatch)
    got = decode_rows(select(local, text))
    assert sorted(got) == sorted(source.q(text))
    # three chunks of two partitions, then the empty tail the replicas' paging leaves
    assert coordinator.range_calls == 4, "each chunk read once"


def test_a_scan_holds_one_chunk_at_a_time_once_past_its_survey(
    nodes: tuple[ExecNode, ExecNode, Coordinator], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bytes a scan holds stay those of one chunk: what ``max_held_read_bytes`` bounds
    is a chunk, not the table. One chunk's worth fits, the whole table would not."""
    source, local, _ = nodes
    _small_chunks(monkeypatch)
    sizes = []
    for k in range(6):
        partition = source.store.read_mutation(("ks", "t"), (struct.pack(">i", k),))
        assert partition is not None
        sizes.append(mutation_size(partition).size_bytes)
    limit = 2 * max(sizes) + 1  # a chunk: two partitions
    assert limit < sum(sizes)
    local.store.limits = dataclasses.replace(local.store.limits, max_held_read_bytes=limit)
    assert decode_rows(select(local, "SELECT count(*) FROM ks.t")) == [(60,)]


def test_a_scan_pages_chunk_by_chunk_with_its_range_reads_on_the_loop(
    nodes: tuple[ExecNode, ExecNode, Coordinator], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, local, coordinator = nodes
    _small_chunks(monkeypatch)
    text = "SELECT k, c, v FROM ks.t"
    got = []
    state: bytes | None = None
    for _ in range(100):  # every page its own statement
        answer = select(local, text, page_size=7, paging_state=state)
        rows = decode_rows(answer)
        assert len(rows) <= 7
        got.extend(rows)
        state = answer.metadata.paging_state
        if state is None:
            break
    assert got == source.q(text)
    assert len(got) == 60
    assert coordinator.range_calls >= 3, "six partitions, two a chunk"


def test_a_select_holding_more_than_its_byte_limit_is_refused(
    nodes: tuple[ExecNode, ExecNode, Coordinator],
) -> None:
    """``StoreLimits.max_held_read_bytes`` bounds what one statement holds of the partitions
    it read: one partition fits, two at once do not, and the refusal says why."""
    source, local, _coordinator = nodes
    one = source.store.read_mutation(("ks", "t"), (struct.pack(">i", 0),))
    assert one is not None
    limit = mutation_size(one).size_bytes + 1
    local.store.limits = dataclasses.replace(local.store.limits, max_held_read_bytes=limit)
    assert len(decode_rows(select(local, "SELECT * FROM ks.t WHERE k = 0"))) == 10
    local.raw("SELECT * FROM ks.t WHERE k IN (0, 1)", consistency=Consistency.QUORUM)
    pending = local.processor.take_pending()
    assert pending is not None
    with pytest.raises(ResultTooLarge, match="max_held_read_bytes"):
        pending[0].result(TIMEOUT_S)
