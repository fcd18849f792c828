"""The change pipeline on Spark: the change model and idempotent sinks as Python Data Sources.

- :mod:`._changes`: :class:`Change` (one CDC delta of one row), its Spark schema
  (:func:`change_schema`) and row conversions, the base table as JSON (a sink option).
- :mod:`._spark_types`: CQL types and values as Spark/Arrow ones (lossless, documented).
- :mod:`._materialize`: the LWW state a set of changes leaves (:func:`materialize`), the oracle
  of every applying sink.
- :mod:`._lake`: ``ringflow-lake``, the append-only Parquet change lake, exactly once per batch.
- :mod:`._postgres` / :mod:`._pg_sql`: ``ringflow-postgres``, upserts guarded by write
  timestamps, with a ``<table>_live`` view.
- :mod:`._spark_session`: a local SparkSession with sane defaults and the sources registered.

Reference: ``shared/reference/pipelines-spark.md`` §8, §11; ``scylla-cdc.md`` §5, §7;
``reliability-and-style.md`` §A4 (replay equivalence).
"""

from ringflow.pipeline._cdc_offsets import (
    CdcOffset,
)
from ringflow.pipeline._cdc_source import (
    CDC_FORMAT,
    RingflowCdcDataSource,
    read_changes,
)
from ringflow.pipeline._changes import (
    BATCH_SEQ_NO_FIELD,
    OPERATION_FIELD,
    OPERATION_NAME_FIELD,
    STREAM_ID_FIELD,
    TIME_FIELD,
    TIME_US_FIELD,
    TTL_FIELD,
    Change,
    change_arrow_schema,
    change_from_log_row,
    change_from_row,
    change_schema,
    change_to_arrow_row,
    change_to_row,
    changes_sorted,
    check_change_schema,
    table_from_json,
    table_to_json,
    validate_change,
)
from ringflow.pipeline._cluster_client import (
    ClusterOptions,
    cluster_options,
)
from ringflow.pipeline._errors import InvalidChange, PipelineConfigError
from ringflow.pipeline._hub import (
    DEFAULT_BATCH_ROWS as DEFAULT_HUB_BATCH_ROWS,
)
from ringflow.pipeline._hub import (
    HUB_FORMAT,
    HubDataSource,
    HubReport,
    apply_to_hub,
    hub_options,
)
from ringflow.pipeline._lake import (
    DEFAULT_ROWS_PER_FILE,
    LAKE_FORMAT,
    LakeDataSource,
    committed_files,
    lake_options,
    lake_table,
    lake_tables,
    read_lake,
    read_lake_changes,
)
from ringflow.pipeline._materialize import LiveRow, TableState, cell_order, materialize
from ringflow.pipeline._pg_sql import pg_type
from ringflow.pipeline._postgres import (
    DEFAULT_ROWS_PER_TRANSACTION,
    POSTGRES_FORMAT,
    PostgresDataSource,
    apply_changes,
    postgres_options,
    read_postgres_live,
)
from ringflow.pipeline._spark_session import (
    DEFAULT_CONF,
    local_spark_session,
    register_data_sources,
)
from ringflow.pipeline._spark_types import (
    arrow_type,
    format_duration,
    from_spark_value,
    parse_duration,
    spark_type,
    to_spark_value,
)
from ringflow.pipeline._table_source import (
    TABLE_FORMAT,
    RingflowTableDataSource,
    read_table,
    table_options,
)

__all__ = [
    "BATCH_SEQ_NO_FIELD",
    "CDC_FORMAT",
    "DEFAULT_CONF",
    "DEFAULT_HUB_BATCH_ROWS",
    "DEFAULT_ROWS_PER_FILE",
    "DEFAULT_ROWS_PER_TRANSACTION",
    "HUB_FORMAT",
    "LAKE_FORMAT",
    "OPERATION_FIELD",
    "OPERATION_NAME_FIELD",
    "POSTGRES_FORMAT",
    "STREAM_ID_FIELD",
    "TABLE_FORMAT",
    "TIME_FIELD",
    "TIME_US_FIELD",
    "TTL_FIELD",
    "CdcOffset",
    "Change",
    "ClusterOptions",
    "HubDataSource",
    "HubReport",
    "InvalidChange",
    "LakeDataSource",
    "LiveRow",
    "PipelineConfigError",
    "PostgresDataSource",
    "RingflowCdcDataSource",
    "RingflowTableDataSource",
    "TableState",
    "apply_changes",
    "apply_to_hub",
    "arrow_type",
    "cell_order",
    "change_arrow_schema",
    "change_from_log_row",
    "change_from_row",
    "change_schema",
    "change_to_arrow_row",
    "change_to_row",
    "changes_sorted",
    "check_change_schema",
    "cluster_options",
    "committed_files",
    "format_duration",
    "from_spark_value",
    "hub_options",
    "lake_options",
    "lake_table",
    "lake_tables",
    "local_spark_session",
    "materialize",
    "parse_duration",
    "pg_type",
    "postgres_options",
    "read_changes",
    "read_lake",
    "read_lake_changes",
    "read_postgres_live",
    "read_table",
    "register_data_sources",
    "spark_type",
    "table_from_json",
    "table_options",
    "table_to_json",
    "to_spark_value",
    "validate_change",
]
