"""A local SparkSession with sane defaults for ringflow, and registration of its data sources.

Defaults follow pipelines-spark.md §9-10 as measured on a 2-core machine: ``local[2]``, two
shuffle partitions (the default 200 makes every shuffle spawn 200 tasks), UI and console progress
off, UTC session time zone (CQL timestamps are UTC instants), driver bound to loopback (nothing
listens off-host), and the Python workers run by this interpreter (so they import the same
pyarrow and ringflow as the driver).

With a pip-installed pyspark and no ``SPARK_HOME`` of the user's, the session runs Spark from
:func:`worker_spark_home` so that its Python processes import the installed, byte-compiled
pyspark rather than the source-only ``pyspark.zip``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path

import pyspark
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


SPARK_HOME_LINKS_EXCLUDED = frozenset({"python", "__pycache__"})


def worker_spark_home(package_dir: Path, cache_dir: Path) -> Path:
    """A ``SPARK_HOME`` for the pip-installed pyspark at ``package_dir``: a directory (made
    once, under ``cache_dir``) linking every entry of the package except ``python/``.

    Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python
    process it starts (``PythonUtils.sparkPythonPath``). That zip holds sources only, so each
    fresh process compiles pyspark again: ~0.45 s here, paid by every streaming query (its
    source's planner is a fresh process) and every new worker. Without ``python/`` in the
    home, those entries do not exist and the processes import the installed package."""
    digest = hashlib.sha256(str(package_dir.resolve()).encode()).hexdigest()[:12]
    home = cache_dir / f"spark-home-{pyspark.__version__}-{digest}"
    if home.is_dir():
        return home
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = cache_dir / f".staging-{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        for entry in sorted(package_dir.iterdir()):
            if entry.name not in SPARK_HOME_LINKS_EXCLUDED:
                (staging / entry.name).symlink_to(entry.resolve())
        staging.rename(home)
    except OSError:
        if not home.is_dir():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # left only if another process won
    return home


def _use_worker_spark_home() -> None:
    """Point ``SPARK_HOME`` at :func:`worker_spark_home` when the user set none and pyspark
    is pip-installed (its package holds ``jars/`` and ``python/lib/pyspark.zip``); on any
    failure Spark keeps its own default."""
    if "SPARK_HOME" in os.environ:
        return
    package_dir = Path(pyspark.__file__).parent
    if not (package_dir / "jars").is_dir():
        return
    if not (package_dir / "python" / "lib" / "pyspark.zip").is_file():
        return
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ringflow"
    try:
        os.environ["SPARK_HOME"] = str(worker_spark_home(package_dir, cache))
    except OSError:
        return


def local_spark_session(
    app_name: str = "ringflow",
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A (possibly existing) SparkSession with :data:`DEFAULT_CONF` overridden by ``conf``,
    with ringflow's data sources registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    _use_worker_spark_home()
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    return spark
