"""The SparkSession of ringflow's jobs, local or on a cluster, and registration of its data sources.

The settings are resolved by :mod:`._spark_conf`: the user's (``--conf``, ``--master``,
``--driver-host``) win, then Spark's own (spark-submit's, ``spark-defaults.conf``), then
ringflow's defaults (pipelines-spark.md §9-10 as measured on a 2-core machine: ``local[2]``, two
shuffle partitions, UI and console progress off, UTC session time zone; in local mode only, the
driver on loopback). The driver's listening address is checked before Spark starts (one line
instead of a Java stack). Python workers run this interpreter unless ``spark.pyspark.python`` or
``PYSPARK_PYTHON`` says otherwise (so they import the same pyarrow and ringflow as the driver).

With a pip-installed pyspark and no ``SPARK_HOME`` of the user's, the session runs Spark from
:func:`worker_spark_home` so that its Python processes import the installed, byte-compiled
pyspark rather than the source-only ``pyspark.zip``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyspark
from pyspark.sql import SparkSession

from ringflow.pipeline._cdc_source import RingflowCdcDataSource
from ringflow.pipeline._errors import PipelineConfigError
from ringflow.pipeline._hub import HubDataSource
from ringflow.pipeline._lake import LakeDataSource
from ringflow.pipeline._lakehouse import DeltaDataSource, IcebergDataSource
from ringflow.pipeline._postgres import PostgresDataSource
from ringflow.pipeline._spark_conf import (
    DEFAULT_MASTER,
    LOCAL_ADDRESS_VARIABLES,
    LOOPBACK,
    LOOPBACK_CONF,
    SparkSettings,
    driver_listen_address,
    properties,
    resolve_spark_conf,
    spark_settings,
    submit_arguments_conf,
)
from ringflow.pipeline._table_source import RingflowTableDataSource


def register_data_sources(spark: SparkSession) -> None:
    """Register ``ringflow-lake`` and ``ringflow-postgres`` with ``spark`` (per session)."""
    spark.dataSource.register(LakeDataSource)
    spark.dataSource.register(PostgresDataSource)
    spark.dataSource.register(DeltaDataSource)
    spark.dataSource.register(IcebergDataSource)
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


def preset_spark_conf() -> dict[str, str]:
    """Spark's own settings before ringflow adds any (:mod:`._spark_conf`, source 2): the JVM's
    SparkConf when one runs (spark-submit started this process, or a context exists), else
    what spark-submit will load when PySpark starts it: ``PYSPARK_SUBMIT_ARGS`` over the
    properties file (``--properties-file``, else ``spark-defaults.conf`` in ``SPARK_CONF_DIR``
    or ``$SPARK_HOME/conf``)."""
    from pyspark import SparkConf, SparkContext

    if "PYSPARK_GATEWAY_PORT" in os.environ or SparkContext._jvm is not None:
        SparkContext._ensure_initialized()
        return {str(key): str(value) for key, value in SparkConf().getAll()}
    submit = submit_arguments_conf(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    conf_dir = os.environ.get("SPARK_CONF_DIR") or (
        str(Path(os.environ["SPARK_HOME"]) / "conf") if "SPARK_HOME" in os.environ else None
    )
    files = [] if submit.properties_file is None else [Path(submit.properties_file)]
    if conf_dir is not None and (submit.properties_file is None or submit.load_defaults):
        files.insert(0, Path(conf_dir) / "spark-defaults.conf")
    preset: dict[str, str] = {}
    for path in files:
        try:
            preset.update(properties(path.read_text("utf-8")))
        except OSError:
            continue
    return {**preset, **submit.conf}


def check_driver_address(conf: Mapping[str, str]) -> None:
    """PipelineConfigError unless the driver can listen where ``conf`` says (a socket bound to
    that address, port 0, then closed); nothing to check when Spark is to pick it."""
    address = driver_listen_address(conf)
    if address is None:
        return
    try:
        infos = socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM)
    except OSError as error:
        raise PipelineConfigError(f"Spark driver address {address!r}: {error}") from None
    family, kind, _, _, where = infos[0]
    try:
        with socket.socket(family, kind) as probe:
            probe.bind(where)
    except OSError as error:
        raise PipelineConfigError(
            f"the Spark driver cannot listen on {address!r} (spark.driver.bindAddress, else "
            f"spark.driver.host / --driver-host): {error.strerror or error}"
        ) from None


def spark_session(
    app_name: str = "ringflow", settings: SparkSettings | None = None
) -> SparkSession:
    """A (possibly existing) SparkSession with the settings :func:`resolve_spark_conf` gives
    for ``settings`` (the user's), with ringflow's data sources registered. An existing session
    keeps the settings it was started with."""
    settings = settings or SparkSettings()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    _use_worker_spark_home()
    preset = preset_spark_conf()
    local_address_set = any(name in os.environ for name in LOCAL_ADDRESS_VARIABLES)
    conf = resolve_spark_conf(settings, preset, app_name, local_address_set)
    check_driver_address({**preset, **conf})
    if LOOPBACK_CONF.items() <= conf.items() and not local_address_set:
        os.environ["SPARK_LOCAL_IP"] = LOOPBACK  # local mode: and no warning about the hostname
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    return spark


def local_spark_session(
    app_name: str = "ringflow",
    master: str = DEFAULT_MASTER,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A (possibly existing) local SparkSession: :func:`spark_session` with ``master`` and
    ``conf`` as the user's settings."""
    return spark_session(app_name, spark_settings(master, conf or {}))


def query_progress(query: Any) -> list[dict[str, Any]]:
    """A streaming query's ``recentProgress`` entries as plain dicts."""
    entries = []
    for progress in query.recentProgress or []:
        text = getattr(progress, "json", None)
        entries.append(json.loads(text) if isinstance(text, str) else dict(progress))
    return entries
