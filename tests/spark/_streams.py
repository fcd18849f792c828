"""Helpers of the streaming tests: change files as a replayable stream source, and queries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from ringflow.pipeline import Change, change_arrow_schema, change_schema, change_to_arrow_row
from ringflow.schema import Table


def write_change_files(directory: Path, table: Table, batches: Sequence[Sequence[Change]]) -> None:
    """One Parquet file of change rows per micro-batch, named in order."""
    directory.mkdir(parents=True, exist_ok=True)
    schema = change_arrow_schema(table)
    existing = len(list(directory.glob("*.parquet")))
    for index, batch in enumerate(batches, start=existing):
        rows = [change_to_arrow_row(table, c) for c in batch]
        pq.write_table(
            pa.Table.from_pylist(rows, schema=schema), directory / f"{index:05d}.parquet"
        )


def change_stream(spark: SparkSession, directory: Path, table: Table) -> DataFrame:
    """The files of :func:`write_change_files` as a stream, one file per micro-batch (Spark's
    file source is replayable: its offsets are file lists kept in the checkpoint)."""
    reader = spark.readStream.schema(change_schema(table)).option("maxFilesPerTrigger", 1)
    return reader.parquet(str(directory))


def run_to_end(frame: DataFrame, sink: str, options: Mapping[str, str], checkpoint: Path) -> None:
    """Run the streaming query until every available file is processed."""
    query = (
        frame.writeStream.format(sink)
        .options(**options)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    exception = query.exception()
    if exception is not None:
        raise exception


def chunks(changes: Sequence[Change], count: int) -> list[list[Change]]:
    size = -(-len(changes) // count)
    return [list(changes[i : i + size]) for i in range(0, len(changes), size)]


def forget_commit(checkpoint: Path, batch_id: int) -> None:
    """Simulate a crash after the sink committed batch ``batch_id`` but before Spark recorded
    it: on restart Spark runs that batch again."""
    (checkpoint / "commits" / str(batch_id)).unlink()
    (checkpoint / "commits" / f".{batch_id}.crc").unlink(missing_ok=True)
