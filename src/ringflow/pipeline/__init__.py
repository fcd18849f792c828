"""The change pipeline on Spark: the change model and idempotent sinks as Python Data Sources.

- :mod:`._changes`: :class:`Change` (one CDC delta of one row), its Spark schema
  (:func:`change_schema`) and row conversions, the base table as JSON (a sink option).
- :mod:`._spark_types`: CQL types and values as Spark/Arrow ones (lossless, documented).
- :mod:`._materialize`: the LWW state a set of changes leaves (:func:`materialize`), the oracle
  of every applying sink.
- :mod:`._lake`: ``ringflow-lake``, the append-only Parquet change lake, exactly once per batch.
- :mod:`._lakehouse` (+ ``_delta``, ``_iceberg``, ``_lakehouse_state``): ``ringflow-delta`` and
  ``ringflow-iceberg``, a change log and a current-state table, exactly once per batch.
- :mod:`._postgres` / :mod:`._pg_sql`: ``ringflow-postgres``, upserts guarded by write
  timestamps, with a ``<table>_live`` view.
- :mod:`._dead_letters` / :mod:`._dead_letter_replay`: rows a destination refused, kept in the
  edge cluster with the reason; listed, applied again or dropped by the operator.
- :mod:`._evolution`: schema changes of the source (what changed, the union a destination
  holds), followed by the replication job (:mod:`._replicate`, :mod:`._replicate_channels`).
- :mod:`._spark_conf` / :mod:`._spark_session`: the job's SparkSession, local or on a cluster: the
  user's settings over Spark's own over ringflow's defaults, the sources registered.
- :mod:`._replica_job`: ``ringflow replicate --capture replica``: the replicas' sealed time
  slices through ``ringflow-replica`` (:mod:`._replica_source`), one query per channel, fed by
  a coordinator in the driver (:mod:`._replica_coordinator`; seed 002).
- :mod:`._spark_session`: a local SparkSession with sane defaults and the sources registered.

Reference: ``shared/reference/pipelines-spark.md`` §8, §11; ``scylla-cdc.md`` §5, §7;
``reliability-and-style.md`` §A4 (replay equivalence).

The package imports its parts lazily (PEP 562): ``from ringflow.pipeline import X`` loads only
the module defining ``X``, so a Spark Python process unpickling the CDC source (its planner
starts one per streaming query) does not pay for the sinks' imports (PostgreSQL, the CQL
parser, ...).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
        log_row_converter,
        table_from_json,
        table_to_json,
        validate_change,
    )
    from ringflow.pipeline._channel_store import (
        ChannelProgressRow,
        channel_table_rows,
        create_channel,
        drop_channel,
        find_channel,
        load_channel_progress,
        load_channels,
        update_channel,
    )
    from ringflow.pipeline._cluster_client import (
        ClusterOptions,
        DriverTls,
        close_cached_sessions,
        cluster_options,
        credentials,
        driver_tls,
        load_table,
    )
    from ringflow.pipeline._cluster_client import connect as connect_cluster
    from ringflow.pipeline._dead_letter_replay import DestinationAppliers
    from ringflow.pipeline._dead_letters import (
        DeadLetter,
        ReplayReport,
        change_from_json,
        change_to_json,
        dead_letter_options,
        drop_dead_letters,
        failed_before,
        list_dead_letters,
        record_dead_letters,
        replay_dead_letters,
    )
    from ringflow.pipeline._delta import DeltaStore
    from ringflow.pipeline._diff import DiffPlan, plan_diff, run_diff
    from ringflow.pipeline._diff_core import Difference, DiffReport, row_image
    from ringflow.pipeline._diff_core import Kind as DifferenceKind
    from ringflow.pipeline._diff_core import classify as classify_difference
    from ringflow.pipeline._errors import (
        DestinationBehind,
        InvalidChange,
        PipelineConfigError,
        SchemaConflict,
        SourceSchemaChanged,
    )
    from ringflow.pipeline._evolution import describe_change, union_table
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
    from ringflow.pipeline._iceberg import (
        IcebergLocation,
        IcebergStore,
    )
    from ringflow.pipeline._iceberg import (
        parse_location as parse_iceberg_location,
    )
    from ringflow.pipeline._job_metrics import ChannelFigures, JobMetrics, serve_job_metrics
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
        uncommitted_files,
        vacuum_lake,
    )
    from ringflow.pipeline._lakehouse import (
        DELTA_FORMAT,
        ICEBERG_FORMAT,
        DeltaDataSource,
        IcebergDataSource,
        LakehouseStore,
        delta_options,
        iceberg_options,
        lakehouse_store,
    )
    from ringflow.pipeline._lakehouse_state import CurrentStateMerge
    from ringflow.pipeline._materialize import (
        LiveRow,
        TableState,
        canonical_value,
        cell_order,
        materialize,
    )
    from ringflow.pipeline._pg_sql import pg_type
    from ringflow.pipeline._postgres import (
        DEFAULT_ROWS_PER_TRANSACTION,
        POSTGRES_FORMAT,
        PostgresDataSource,
        apply_changes,
        postgres_options,
        read_postgres_live,
    )
    from ringflow.pipeline._replica_job import (
        ReplicaJob,
        ReplicaSummary,
        print_replica_summary,
        replica_spark,
    )
    from ringflow.pipeline._replica_plan import (
        ChannelSpec,
        ReplicaJobPlan,
        edge_options,
        plan_replica_job,
    )
    from ringflow.pipeline._replica_source import REPLICA_FORMAT, RingflowReplicaDataSource
    from ringflow.pipeline._replicate import (
        cdc_options,
        parse_hosts,
        parse_table_name,
        plan_replication,
        print_summary,
        replication_spark,
        run_replication,
    )
    from ringflow.pipeline._replication_status import (
        ReplicationStatus,
        plot_status,
        read_status,
        status_view,
    )
    from ringflow.pipeline._spark_conf import (
        DEFAULT_CONF,
        LOOPBACK_CONF,
        SparkSettings,
        resolve_spark_conf,
        spark_settings,
    )
    from ringflow.pipeline._spark_session import (
        check_driver_address,
        local_spark_session,
        register_data_sources,
        spark_session,
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

_EXPORTS: dict[str, tuple[str, str]] = {
    "DriverTls": ("ringflow.pipeline._cluster_client", "DriverTls"),
    "driver_tls": ("ringflow.pipeline._cluster_client", "driver_tls"),
    "DeadLetter": ("ringflow.pipeline._dead_letters", "DeadLetter"),
    "ReplayReport": ("ringflow.pipeline._dead_letters", "ReplayReport"),
    "change_from_json": ("ringflow.pipeline._dead_letters", "change_from_json"),
    "change_to_json": ("ringflow.pipeline._dead_letters", "change_to_json"),
    "dead_letter_options": ("ringflow.pipeline._dead_letters", "dead_letter_options"),
    "drop_dead_letters": ("ringflow.pipeline._dead_letters", "drop_dead_letters"),
    "failed_before": ("ringflow.pipeline._dead_letters", "failed_before"),
    "list_dead_letters": ("ringflow.pipeline._dead_letters", "list_dead_letters"),
    "record_dead_letters": ("ringflow.pipeline._dead_letters", "record_dead_letters"),
    "replay_dead_letters": ("ringflow.pipeline._dead_letters", "replay_dead_letters"),
    "DestinationAppliers": ("ringflow.pipeline._dead_letter_replay", "DestinationAppliers"),
    "ChannelProgressRow": ("ringflow.pipeline._channel_store", "ChannelProgressRow"),
    "channel_table_rows": ("ringflow.pipeline._channel_store", "channel_table_rows"),
    "create_channel": ("ringflow.pipeline._channel_store", "create_channel"),
    "drop_channel": ("ringflow.pipeline._channel_store", "drop_channel"),
    "find_channel": ("ringflow.pipeline._channel_store", "find_channel"),
    "load_channel_progress": ("ringflow.pipeline._channel_store", "load_channel_progress"),
    "load_channels": ("ringflow.pipeline._channel_store", "load_channels"),
    "update_channel": ("ringflow.pipeline._channel_store", "update_channel"),
    "connect_cluster": ("ringflow.pipeline._cluster_client", "connect"),
    "load_table": ("ringflow.pipeline._cluster_client", "load_table"),
    "parse_hosts": ("ringflow.pipeline._replicate", "parse_hosts"),
    "canonical_value": ("ringflow.pipeline._materialize", "canonical_value"),
    "cdc_options": ("ringflow.pipeline._replicate", "cdc_options"),
    "plan_replication": ("ringflow.pipeline._replicate", "plan_replication"),
    "print_summary": ("ringflow.pipeline._replicate", "print_summary"),
    "replication_spark": ("ringflow.pipeline._replicate", "replication_spark"),
    "run_replication": ("ringflow.pipeline._replicate", "run_replication"),
    "REPLICA_FORMAT": ("ringflow.pipeline._replica_source", "REPLICA_FORMAT"),
    "RingflowReplicaDataSource": ("ringflow.pipeline._replica_source", "RingflowReplicaDataSource"),
    "ReplicaJob": ("ringflow.pipeline._replica_job", "ReplicaJob"),
    "ReplicaSummary": ("ringflow.pipeline._replica_job", "ReplicaSummary"),
    "print_replica_summary": ("ringflow.pipeline._replica_job", "print_replica_summary"),
    "replica_spark": ("ringflow.pipeline._replica_job", "replica_spark"),
    "ChannelSpec": ("ringflow.pipeline._replica_plan", "ChannelSpec"),
    "ReplicaJobPlan": ("ringflow.pipeline._replica_plan", "ReplicaJobPlan"),
    "plan_replica_job": ("ringflow.pipeline._replica_plan", "plan_replica_job"),
    "edge_options": ("ringflow.pipeline._replica_plan", "edge_options"),
    "parse_table_name": ("ringflow.pipeline._replicate", "parse_table_name"),
    "BATCH_SEQ_NO_FIELD": ("ringflow.pipeline._changes", "BATCH_SEQ_NO_FIELD"),
    "CDC_FORMAT": ("ringflow.pipeline._cdc_source", "CDC_FORMAT"),
    "DEFAULT_CONF": ("ringflow.pipeline._spark_conf", "DEFAULT_CONF"),
    "LOOPBACK_CONF": ("ringflow.pipeline._spark_conf", "LOOPBACK_CONF"),
    "SparkSettings": ("ringflow.pipeline._spark_conf", "SparkSettings"),
    "resolve_spark_conf": ("ringflow.pipeline._spark_conf", "resolve_spark_conf"),
    "spark_settings": ("ringflow.pipeline._spark_conf", "spark_settings"),
    "spark_session": ("ringflow.pipeline._spark_session", "spark_session"),
    "check_driver_address": ("ringflow.pipeline._spark_session", "check_driver_address"),
    "DEFAULT_HUB_BATCH_ROWS": ("ringflow.pipeline._hub", "DEFAULT_BATCH_ROWS"),
    "DEFAULT_ROWS_PER_FILE": ("ringflow.pipeline._lake", "DEFAULT_ROWS_PER_FILE"),
    "DEFAULT_ROWS_PER_TRANSACTION": ("ringflow.pipeline._postgres", "DEFAULT_ROWS_PER_TRANSACTION"),
    "HUB_FORMAT": ("ringflow.pipeline._hub", "HUB_FORMAT"),
    "LAKE_FORMAT": ("ringflow.pipeline._lake", "LAKE_FORMAT"),
    "DELTA_FORMAT": ("ringflow.pipeline._lakehouse", "DELTA_FORMAT"),
    "ICEBERG_FORMAT": ("ringflow.pipeline._lakehouse", "ICEBERG_FORMAT"),
    "DeltaDataSource": ("ringflow.pipeline._lakehouse", "DeltaDataSource"),
    "IcebergDataSource": ("ringflow.pipeline._lakehouse", "IcebergDataSource"),
    "LakehouseStore": ("ringflow.pipeline._lakehouse", "LakehouseStore"),
    "lakehouse_store": ("ringflow.pipeline._lakehouse", "lakehouse_store"),
    "delta_options": ("ringflow.pipeline._lakehouse", "delta_options"),
    "iceberg_options": ("ringflow.pipeline._lakehouse", "iceberg_options"),
    "DeltaStore": ("ringflow.pipeline._delta", "DeltaStore"),
    "IcebergStore": ("ringflow.pipeline._iceberg", "IcebergStore"),
    "IcebergLocation": ("ringflow.pipeline._iceberg", "IcebergLocation"),
    "parse_iceberg_location": ("ringflow.pipeline._iceberg", "parse_location"),
    "CurrentStateMerge": ("ringflow.pipeline._lakehouse_state", "CurrentStateMerge"),
    "OPERATION_FIELD": ("ringflow.pipeline._changes", "OPERATION_FIELD"),
    "OPERATION_NAME_FIELD": ("ringflow.pipeline._changes", "OPERATION_NAME_FIELD"),
    "POSTGRES_FORMAT": ("ringflow.pipeline._postgres", "POSTGRES_FORMAT"),
    "STREAM_ID_FIELD": ("ringflow.pipeline._changes", "STREAM_ID_FIELD"),
    "TABLE_FORMAT": ("ringflow.pipeline._table_source", "TABLE_FORMAT"),
    "TIME_FIELD": ("ringflow.pipeline._changes", "TIME_FIELD"),
    "TIME_US_FIELD": ("ringflow.pipeline._changes", "TIME_US_FIELD"),
    "TTL_FIELD": ("ringflow.pipeline._changes", "TTL_FIELD"),
    "CdcOffset": ("ringflow.pipeline._cdc_offsets", "CdcOffset"),
    "Change": ("ringflow.pipeline._changes", "Change"),
    "ClusterOptions": ("ringflow.pipeline._cluster_client", "ClusterOptions"),
    "HubDataSource": ("ringflow.pipeline._hub", "HubDataSource"),
    "HubReport": ("ringflow.pipeline._hub", "HubReport"),
    "DiffPlan": ("ringflow.pipeline._diff", "DiffPlan"),
    "plan_diff": ("ringflow.pipeline._diff", "plan_diff"),
    "run_diff": ("ringflow.pipeline._diff", "run_diff"),
    "DiffReport": ("ringflow.pipeline._diff_core", "DiffReport"),
    "Difference": ("ringflow.pipeline._diff_core", "Difference"),
    "DifferenceKind": ("ringflow.pipeline._diff_core", "Kind"),
    "classify_difference": ("ringflow.pipeline._diff_core", "classify"),
    "row_image": ("ringflow.pipeline._diff_core", "row_image"),
    "DestinationBehind": ("ringflow.pipeline._errors", "DestinationBehind"),
    "InvalidChange": ("ringflow.pipeline._errors", "InvalidChange"),
    "SchemaConflict": ("ringflow.pipeline._errors", "SchemaConflict"),
    "SourceSchemaChanged": ("ringflow.pipeline._errors", "SourceSchemaChanged"),
    "describe_change": ("ringflow.pipeline._evolution", "describe_change"),
    "union_table": ("ringflow.pipeline._evolution", "union_table"),
    "LakeDataSource": ("ringflow.pipeline._lake", "LakeDataSource"),
    "LiveRow": ("ringflow.pipeline._materialize", "LiveRow"),
    "PipelineConfigError": ("ringflow.pipeline._errors", "PipelineConfigError"),
    "PostgresDataSource": ("ringflow.pipeline._postgres", "PostgresDataSource"),
    "RingflowCdcDataSource": ("ringflow.pipeline._cdc_source", "RingflowCdcDataSource"),
    "RingflowTableDataSource": ("ringflow.pipeline._table_source", "RingflowTableDataSource"),
    "TableState": ("ringflow.pipeline._materialize", "TableState"),
    "apply_changes": ("ringflow.pipeline._postgres", "apply_changes"),
    "apply_to_hub": ("ringflow.pipeline._hub", "apply_to_hub"),
    "arrow_type": ("ringflow.pipeline._spark_types", "arrow_type"),
    "cell_order": ("ringflow.pipeline._materialize", "cell_order"),
    "change_arrow_schema": ("ringflow.pipeline._changes", "change_arrow_schema"),
    "change_from_log_row": ("ringflow.pipeline._changes", "change_from_log_row"),
    "change_from_row": ("ringflow.pipeline._changes", "change_from_row"),
    "change_schema": ("ringflow.pipeline._changes", "change_schema"),
    "change_to_arrow_row": ("ringflow.pipeline._changes", "change_to_arrow_row"),
    "change_to_row": ("ringflow.pipeline._changes", "change_to_row"),
    "changes_sorted": ("ringflow.pipeline._changes", "changes_sorted"),
    "check_change_schema": ("ringflow.pipeline._changes", "check_change_schema"),
    "close_cached_sessions": ("ringflow.pipeline._cluster_client", "close_cached_sessions"),
    "cluster_options": ("ringflow.pipeline._cluster_client", "cluster_options"),
    "credentials": ("ringflow.pipeline._cluster_client", "credentials"),
    "committed_files": ("ringflow.pipeline._lake", "committed_files"),
    "format_duration": ("ringflow.pipeline._spark_types", "format_duration"),
    "from_spark_value": ("ringflow.pipeline._spark_types", "from_spark_value"),
    "hub_options": ("ringflow.pipeline._hub", "hub_options"),
    "lake_options": ("ringflow.pipeline._lake", "lake_options"),
    "lake_table": ("ringflow.pipeline._lake", "lake_table"),
    "lake_tables": ("ringflow.pipeline._lake", "lake_tables"),
    "local_spark_session": ("ringflow.pipeline._spark_session", "local_spark_session"),
    "log_row_converter": ("ringflow.pipeline._changes", "log_row_converter"),
    "materialize": ("ringflow.pipeline._materialize", "materialize"),
    "parse_duration": ("ringflow.pipeline._spark_types", "parse_duration"),
    "pg_type": ("ringflow.pipeline._pg_sql", "pg_type"),
    "postgres_options": ("ringflow.pipeline._postgres", "postgres_options"),
    "read_changes": ("ringflow.pipeline._cdc_source", "read_changes"),
    "read_lake": ("ringflow.pipeline._lake", "read_lake"),
    "read_lake_changes": ("ringflow.pipeline._lake", "read_lake_changes"),
    "read_postgres_live": ("ringflow.pipeline._postgres", "read_postgres_live"),
    "read_table": ("ringflow.pipeline._table_source", "read_table"),
    "ChannelFigures": ("ringflow.pipeline._job_metrics", "ChannelFigures"),
    "JobMetrics": ("ringflow.pipeline._job_metrics", "JobMetrics"),
    "serve_job_metrics": ("ringflow.pipeline._job_metrics", "serve_job_metrics"),
    "ReplicationStatus": ("ringflow.pipeline._replication_status", "ReplicationStatus"),
    "plot_status": ("ringflow.pipeline._replication_status", "plot_status"),
    "read_status": ("ringflow.pipeline._replication_status", "read_status"),
    "status_view": ("ringflow.pipeline._replication_status", "status_view"),
    "register_data_sources": ("ringflow.pipeline._spark_session", "register_data_sources"),
    "spark_type": ("ringflow.pipeline._spark_types", "spark_type"),
    "table_from_json": ("ringflow.pipeline._changes", "table_from_json"),
    "table_options": ("ringflow.pipeline._table_source", "table_options"),
    "table_to_json": ("ringflow.pipeline._changes", "table_to_json"),
    "to_spark_value": ("ringflow.pipeline._spark_types", "to_spark_value"),
    "uncommitted_files": ("ringflow.pipeline._lake", "uncommitted_files"),
    "vacuum_lake": ("ringflow.pipeline._lake", "vacuum_lake"),
    "validate_change": ("ringflow.pipeline._changes", "validate_change"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "BATCH_SEQ_NO_FIELD",
    "CDC_FORMAT",
    "DEFAULT_CONF",
    "DEFAULT_HUB_BATCH_ROWS",
    "DEFAULT_ROWS_PER_FILE",
    "DEFAULT_ROWS_PER_TRANSACTION",
    "DELTA_FORMAT",
    "HUB_FORMAT",
    "ICEBERG_FORMAT",
    "LAKE_FORMAT",
    "LOOPBACK_CONF",
    "OPERATION_FIELD",
    "OPERATION_NAME_FIELD",
    "POSTGRES_FORMAT",
    "REPLICA_FORMAT",
    "STREAM_ID_FIELD",
    "TABLE_FORMAT",
    "TIME_FIELD",
    "TIME_US_FIELD",
    "TTL_FIELD",
    "CdcOffset",
    "Change",
    "ChannelFigures",
    "ChannelProgressRow",
    "ChannelSpec",
    "ClusterOptions",
    "CurrentStateMerge",
    "DeadLetter",
    "DeltaDataSource",
    "DeltaStore",
    "DestinationAppliers",
    "DestinationBehind",
    "DiffPlan",
    "DiffReport",
    "Difference",
    "DifferenceKind",
    "DriverTls",
    "HubDataSource",
    "HubReport",
    "IcebergDataSource",
    "IcebergLocation",
    "IcebergStore",
    "InvalidChange",
    "JobMetrics",
    "LakeDataSource",
    "LakehouseStore",
    "LiveRow",
    "PipelineConfigError",
    "PostgresDataSource",
    "ReplayReport",
    "ReplicaJob",
    "ReplicaJobPlan",
    "ReplicaSummary",
    "ReplicationStatus",
    "RingflowCdcDataSource",
    "RingflowReplicaDataSource",
    "RingflowTableDataSource",
    "SchemaConflict",
    "SourceSchemaChanged",
    "SparkSettings",
    "TableState",
    "apply_changes",
    "apply_to_hub",
    "arrow_type",
    "canonical_value",
    "cdc_options",
    "cell_order",
    "change_arrow_schema",
    "change_from_json",
    "change_from_log_row",
    "change_from_row",
    "change_schema",
    "change_to_arrow_row",
    "change_to_json",
    "change_to_row",
    "changes_sorted",
    "channel_table_rows",
    "check_change_schema",
    "check_driver_address",
    "classify_difference",
    "close_cached_sessions",
    "cluster_options",
    "committed_files",
    "connect_cluster",
    "create_channel",
    "credentials",
    "dead_letter_options",
    "delta_options",
    "describe_change",
    "driver_tls",
    "drop_channel",
    "drop_dead_letters",
    "edge_options",
    "failed_before",
    "find_channel",
    "format_duration",
    "from_spark_value",
    "hub_options",
    "iceberg_options",
    "lake_options",
    "lake_table",
    "lake_tables",
    "lakehouse_store",
    "list_dead_letters",
    "load_channel_progress",
    "load_channels",
    "load_table",
    "local_spark_session",
    "log_row_converter",
    "materialize",
    "parse_duration",
    "parse_hosts",
    "parse_iceberg_location",
    "parse_table_name",
    "pg_type",
    "plan_diff",
    "plan_replica_job",
    "plan_replication",
    "plot_status",
    "postgres_options",
    "print_replica_summary",
    "print_summary",
    "read_changes",
    "read_lake",
    "read_lake_changes",
    "read_postgres_live",
    "read_status",
    "read_table",
    "record_dead_letters",
    "register_data_sources",
    "replay_dead_letters",
    "replica_spark",
    "replication_spark",
    "resolve_spark_conf",
    "row_image",
    "run_diff",
    "run_replication",
    "serve_job_metrics",
    "spark_session",
    "spark_settings",
    "spark_type",
    "status_view",
    "table_from_json",
    "table_options",
    "table_to_json",
    "to_spark_value",
    "uncommitted_files",
    "union_table",
    "update_channel",
    "vacuum_lake",
    "validate_change",
]
