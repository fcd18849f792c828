"""Lakehouse destinations (issue 19): bad input is refused with a clear error naming the
channel before anything is written, a schema the destination cannot follow blocks the channel,
and ``ringflow lake compact|expire`` shrink the tables without changing what they hold."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ringflow.cli import main
from ringflow.pipeline import (
    DeltaStore,
    IcebergStore,
    PipelineConfigError,
    delta_options,
    iceberg_options,
    parse_iceberg_location,
)
from ringflow.pipeline._destinations import destination
from ringflow.schema import BIGINT, TEXT, Column

from ._lakehouse import change_log_rows, commit_changes, current_rows
from ._workload import TABLE, workload


def test_a_directory_that_is_not_delta_is_refused_untouched(tmp_path: Path) -> None:
    target = tmp_path / "not-delta"
    target.mkdir()
    (target / "data.csv").write_text("a,b\n")
    with pytest.raises(PipelineConfigError, match=r"channel delta: .*is not a Delta table"):
        destination(f"delta:{target}", TABLE)
    assert sorted(p.name for p in target.iterdir()) == ["data.csv"]
    assert not (tmp_path / "not-delta_current").exists()


def test_an_unreachable_catalog_and_a_missing_namespace_are_refused(tmp_path: Path) -> None:
    url = f"iceberg:postgresql+psycopg://nobody@127.0.0.1:1/db?warehouse={tmp_path / 'w'}#ns.t"
    with pytest.raises(PipelineConfigError, match=r"channel iceberg: .*cannot be reached"):
        destination(url, TABLE)
    catalog = tmp_path / "catalog.db"
    with pytest.raises(PipelineConfigError, match=r"channel iceberg-2: .*'nowhere' does not exist"):
        destination(f"iceberg:{catalog}#nowhere.items", TABLE, ["iceberg"])
    store = IcebergStore(parse_iceberg_location(f"{catalog}#nowhere.items"))
    assert store.catalog.list_namespaces() == []  # nothing created
    with pytest.raises(PipelineConfigError, match=r"expected iceberg:CATALOG\#namespace\.table"):
        destination(f"iceberg:{catalog}", TABLE)


def _retyped() -> object:
    """TABLE with ``amount`` as text instead of bigint: no destination can follow that."""
    columns = tuple(
        dataclasses.replace(c, type=TEXT) if c.name == "amount" else c for c in TABLE.columns
    )
    return dataclasses.replace(TABLE, columns=columns)


def test_a_retyped_column_blocks_the_channel_and_an_added_one_is_taken(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.db"
    IcebergStore(parse_iceberg_location(f"{catalog}#shop.items")).catalog.create_namespace("shop")
    for url in (f"delta:{tmp_path / 'd'}", f"iceberg:{catalog}#shop.items"):
        assert destination(url, TABLE).blocked is None
        blocked = destination(url, _retyped())  # type: ignore[arg-type]
        assert blocked.blocked is not None and "'amount'" in blocked.blocked, url
        added = dataclasses.replace(
            TABLE, columns=(*TABLE.columns, Column("extra", BIGINT, TABLE.columns[-1].kind))
        )
        built = destination(url, added)
        assert built.blocked is None
        assert '"extra"' in built.options["holds"]


def _write(sink: str, options: dict[str, str], part: int) -> None:
    """A third of the workload as one batch (the driver's commit, as ``df.write`` makes it)."""
    commit_changes(sink, options, TABLE, workload()[part::3], "ringflow-write", part)


def test_compact_and_expire_keep_what_the_tables_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = tmp_path / "catalog.db"
    location = parse_iceberg_location(f"{catalog}#shop.items")
    IcebergStore(location).catalog.create_namespace("shop")
    cases = [
        ("ringflow-delta", delta_options(str(tmp_path / "d"), TABLE), DeltaStore(tmp_path / "d")),
        ("ringflow-iceberg", iceberg_options(location, TABLE), IcebergStore(location)),
    ]
    for sink, options, store in cases:
        for part in range(3):
            _write(sink, options, part)
        before = (change_log_rows(store), current_rows(store, TABLE))
        files = store.data_files()
        url = (
            f"delta:{tmp_path / 'd'}"
            if sink == "ringflow-delta"
            else f"iceberg:{catalog}#shop.items"
        )
        assert main(["lake", "compact", "--to", url]) == 0
        after = store.data_files()
        assert len(after[0]) < len(files[0]) and len(after[1]) <= len(files[1]), (files, after)
        assert (change_log_rows(store), current_rows(store, TABLE)) == before
        expire = (
            ["--retention-hours", "0"] if sink == "ringflow-delta" else ["--older-than-days", "0"]
        )
        assert main(["lake", "expire", "--to", url, *expire]) == 0
        assert (change_log_rows(store), current_rows(store, TABLE)) == before
        if isinstance(store, IcebergStore):
            assert len(store.catalog.load_table("shop.items").snapshots()) == 1
        else:
            on_disk = list((tmp_path / "d").rglob("*.parquet"))
            assert sorted(map(str, on_disk)) == sorted(store.data_files()[0])
    assert main(["lake", "compact", "--to", f"delta:{tmp_path / 'nothing'}"]) == 2
    capsys.readouterr()


def test_added_then_dropped_columns_are_followed(tmp_path: Path) -> None:
    """The source gains ``extra`` then loses ``note``: each destination takes the new column,
    keeps ``note`` with its values (null in rows written since), and DuckDB reads it all.
    (The same through a live ``ringflow replicate``: ``test_replicate_lakehouse``.)"""
    catalog = tmp_path / "catalog.db"
    location = parse_iceberg_location(f"{catalog}#shop.items")
    IcebergStore(location).catalog.create_namespace("shop")
    regular = TABLE.columns[-1].kind
    added = dataclasses.replace(TABLE, columns=(*TABLE.columns, Column("extra", BIGINT, regular)))
    dropped = dataclasses.replace(
        added, columns=tuple(c for c in added.columns if c.name != "note")
    )
    urls = {
        "ringflow-delta": f"delta:{tmp_path / 'd'}",
        "ringflow-iceberg": f"iceberg:{catalog}#shop.items",
    }
    stores = {
        "ringflow-delta": DeltaStore(tmp_path / "d"),
        "ringflow-iceberg": IcebergStore(location),
    }
    inserts = [c for c in workload() if c.operation == 2][:3]
    for sink, url in urls.items():
        for batch, (table, extra_value) in enumerate(((TABLE, None), (added, 7), (dropped, 8))):
            built = destination(url, table)
            assert built.blocked is None
            fitting = [
                dataclasses.replace(
                    c,
                    values={
                        **{k: v for k, v in c.values.items() if table.has_column(k)},
                        **({"extra": extra_value} if table.has_column("extra") else {}),
                    },
                )
                for c in inserts
            ]
            commit_changes(sink, built.options, table, fitting, "ringflow-evolve", batch)
        log = change_log_rows(stores[sink])
        assert len(log) == 9
        assert "note" in log[0] and "extra" in log[0]
        assert {r["extra"] for r in log} == {None, 7, 8}
        assert all(r["note"] is None for r in log if r["extra"] == 8)  # written since the drop
        assert any(r["note"] is not None for r in log if r["extra"] != 8)
        current = current_rows(stores[sink], dropped)
        assert current and all("note" not in cells for cells, _ in current.values())
        assert {cells.get("extra") for cells, _ in current.values()} == {8}
