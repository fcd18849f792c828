"""Node start-up in process (real store in a temp dir, fixed clock and seed).

Proves: a new node writes ``system.local``, commits its first CDC generation (internal rows,
then ``system.cdc_local``) and publishes it streams-rows-first, timestamp-row-last; the
generation starts at the start-up millisecond and accepts a CDC write at once; a restart reads
the same generation back bit for bit instead of making a new one; a crash before the commit row
leaves only unreferenced rows (a new generation is made); a crash during publication is repaired
at the next start; ``system.local.schema_version`` follows schema changes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from ringflow.cluster.service import STREAMS_TABLE, TIMESTAMPS_TABLE
from ringflow.cql import Consistency, Query, QueryParameters, SchemaChangeResult, VoidResult
from ringflow.cql._exec_system import ensure_system_tables
from ringflow.cql._executor import SessionState
from ringflow.errors import ConfigurationError
from ringflow.node import (
    NodeConfig,
    NodeRecord,
    create_first_generation,
    ensure_cdc_generation,
    is_published,
    load_local_generation,
    load_record,
    open_node,
)
from ringflow.schema import TEXT, DeletionTime, Mutation, serialize
from ringflow.storage import Store

NOW_US = 1_700_000_000_123_456


def clock() -> int:
    return NOW_US


def config(tmp_path: Path, **changes: object) -> NodeConfig:
    return NodeConfig("127.0.0.1", tmp_path / "data", **changes)  # type: ignore[arg-type]


def query(text: str) -> Query:
    return Query(text, QueryParameters(Consistency.ONE))


def test_new_node_writes_local_row_and_a_generation_operating_now(tmp_path: Path) -> None:
    node = open_node(
        config(tmp_path, num_tokens=4, shard_count=2), clock=clock, rng=random.Random(1)
    )
    try:
        assert node.generation.id.timestamp_ms == NOW_US // 1000
        description = node.generation.description
        assert sorted(description.range_ends.tolist()) == sorted(node.record.tokens)
        assert description.shard_counts.tolist() == [2, 2, 2, 2]
        assert node.cdc.streams_available(NOW_US)
        stream = node.cdc.get_stream(NOW_US, 42, NOW_US)
        assert stream in set(description.all_streams())
        session = SessionState(None)
        local = node.processor.query(
            query("SELECT host_id, tokens, cluster_name FROM system.local"), session
        )
        assert local.rows[0][0] == node.record.host_id.bytes  # type: ignore[union-attr]
        assert is_published(node.store, node.generation.id, NOW_US)
    finally:
        node.close()


def test_restart_reads_the_same_generation_back(tmp_path: Path) -> None:
    first = open_node(config(tmp_path, shard_count=3), clock=clock, rng=random.Random(2))
    generation = first.generation
    first.close()
    later = NOW_US + 3_600_000_000
    second = open_node(config(tmp_path, shard_count=3), clock=lambda: later, rng=random.Random(3))
    try:
        assert second.generation.id == generation.id
        assert second.generation.description == generation.description
        assert second.record == load_record(tmp_path / "data")
        assert second.cdc.get_stream(later, -5, later) == generation.description.stream_for(-5)
    finally:
        second.close()


def test_publication_writes_every_streams_row_before_the_timestamp_row(tmp_path: Path) -> None:
    cfg = config(tmp_path, num_tokens=64)
    record = NodeRecord.create(cfg, random.Random(4))
    cfg.data_dir.mkdir(parents=True)
    applied: list[str] = []

    class RecordingStore(Store):
        def apply(self, batch: Sequence[Mutation], **kwargs: object) -> None:  # type: ignore[override]
            applied.extend(f"{m.keyspace}.{m.table}:{len(m.rows)}" for m in batch)
            super().apply(batch, **kwargs)  # type: ignore[arg-type]

    store = RecordingStore(cfg.store_path)
    try:
        ensure_system_tables(store)
        ensure_cdc_generation(store, record, now_us=NOW_US, rng=random.Random(5))
    finally:
        store.close()
    streams = ".".join(STREAMS_TABLE)
    timestamps = ".".join(TIMESTAMPS_TABLE)
    kinds = [entry.split(":")[0] for entry in applied]
    assert kinds.index("system.cdc_local") < kinds.index(streams)
    assert kinds[-1] == timestamps and kinds.count(timestamps) == 1
    assert sum(int(entry.split(":")[1]) for entry in applied if entry.startswith(streams)) == 64


def test_internal_rows_without_the_commit_row_are_ignored(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    record = NodeRecord.create(cfg, random.Random(6))
    cfg.data_dir.mkdir(parents=True)
    with Store(cfg.store_path) as store:
        ensure_system_tables(store)
        orphan = create_first_generation(store, record, now_us=NOW_US, rng=random.Random(7))
        # Undo the commit row, as if the node died between the internal rows and it.
        key = (serialize(TEXT, "cdc_local"),)
        store.apply(
            [Mutation("system", "cdc_local", key, DeletionTime(NOW_US + 1, NOW_US // 10**6))],
            now_s=NOW_US // 10**6,
        )
        assert load_local_generation(store, NOW_US + 2) is None
        fresh = ensure_cdc_generation(store, record, now_us=NOW_US + 2000, rng=random.Random(8))
        assert fresh.id != orphan.id
        assert load_local_generation(store, NOW_US + 3000) == fresh


def test_unpublished_generation_is_published_at_the_next_start(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    record = NodeRecord.create(cfg, random.Random(8))
    cfg.data_dir.mkdir(parents=True)
    with Store(cfg.store_path) as store:
        ensure_system_tables(store)
        generation = create_first_generation(store, record, now_us=NOW_US, rng=random.Random(9))
        assert not is_published(store, generation.id, NOW_US)  # "crashed" before publishing
        again = ensure_cdc_generation(store, record, now_us=NOW_US + 5, rng=random.Random(10))
        assert again == generation
        assert is_published(store, generation.id, NOW_US)


def test_schema_change_updates_system_local_schema_version(tmp_path: Path) -> None:
    node = open_node(config(tmp_path), clock=clock, rng=random.Random(11))
    try:
        session = SessionState(None)
        select = query("SELECT schema_version FROM system.local")
        before = node.processor.query(select, session)
        created = node.backend().handle(  # the backend the node serves its clients with
            session,
            query(
                "CREATE KEYSPACE k WITH replication = "
                "{'class': 'SimpleStrategy', 'replication_factor': 1}"
            ),
        )
        assert isinstance(created.response, SchemaChangeResult)
        after = node.processor.query(select, session)
        assert after.rows != before.rows  # type: ignore[union-attr]
        assert after.rows[0][0] == node.processor.schema_version.bytes  # type: ignore[union-attr]
        assert node.processor.query(query("USE k"), session) != VoidResult()
    finally:
        node.close()


def test_restart_with_changed_identity_setting_fails_before_opening_the_store(
    tmp_path: Path,
) -> None:
    open_node(config(tmp_path), clock=clock, rng=random.Random(12)).close()
    with pytest.raises(ConfigurationError, match="num_tokens"):
        open_node(config(tmp_path, num_tokens=8), clock=clock, rng=random.Random(13))


def test_one_node_per_data_directory(tmp_path: Path) -> None:
    node = open_node(config(tmp_path), clock=clock, rng=random.Random(14))
    try:
        with pytest.raises(ConfigurationError, match="in use by another ringflow node"):
            open_node(config(tmp_path), clock=clock, rng=random.Random(15))
    finally:
        node.close()
    open_node(config(tmp_path), clock=clock, rng=random.Random(16)).close()
