"""A local SparkSession with sane defaults for ringflow, and registration of its data sources.

Defaults follow pipelines-spark.md §9-10 as measured on a 2-core machine: ``local[2]``, two
shuffle partitions (the default 200 makes every shuffle spawn 200 tasks), UI and console progress
off, UTC session time zone (CQL timestamps are UTC instants), driver bound to loopback (nothing
listens off-host), and the Python workers run by this interpreter (so they import the same
pyarrow and ringflow as the driver).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from ringflow.pipeline._cdc_source import RingflowCdcDataSource
from ringflow.pipeline._hub import HubDataSource
from ringflow.pipeline._lake import LakeDataSource
from ringflow.pipeline._postgres import PostgresDataSource
from ringflow.pipeline._table_source import RingflowTableDataSource

DEFAULT_CONF: Mapping[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.adaptive.enabled": "false",
    # The table reader pushes partition-key equality down (PySpark 4 asks for this opt-in).
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


def register_data_sources(spark: SparkSession) -> None:
    """Register ``ringflow-lake`` and ``ringflow-postgres`` with ``spark`` (per session)."""
    spark.dataSource.register(LakeDataSource)
    spark.dataSource.register(PostgresDataSource)
    spark.dataSource.register(HubDataSource)
    spark.dataSource.register(RingflowTableDataSource)
    spark.dataSource.register(RingflowCdcDataSource)


def local_spark_session(
    app_name: str = "ringflow",
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A (possibly existing) SparkSession with :data:`DEFAULT_CONF` overridden by ``conf``,
    with ringflow's data sources registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    return spark
