"""The local session runs a pip-installed Spark from a home without ``python/``, so its Python
processes import the installed, byte-compiled pyspark, not the source-only ``pyspark.zip``
Spark would put first on their path (each fresh process would compile pyspark again)."""

from __future__ import annotations

import os
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from ringflow.pipeline._spark_session import worker_spark_home


def _fake_package(root: Path) -> Path:
    package = root / "pyspark"
    for part in ("jars", "bin", "python/lib", "__pycache__"):
        (package / part).mkdir(parents=True)
    (package / "python" / "lib" / "pyspark.zip").write_bytes(b"PK")
    (package / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (package / "__init__.py").write_text("")
    return package


def test_the_home_links_everything_but_python_and_is_made_once(tmp_path: Path) -> None:
    package = _fake_package(tmp_path)
    home = worker_spark_home(package, tmp_path / "cache")
    assert sorted(entry.name for entry in home.iterdir()) == ["__init__.py", "bin", "jars"]
    assert (home / "bin" / "spark-submit").read_text() == "#!/bin/sh\n"
    assert (home / "jars").resolve() == (package / "jars").resolve()
    assert not (home / "python" / "lib" / "pyspark.zip").exists()
    assert worker_spark_home(package, tmp_path / "cache") == home
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [home.name]  # no staging left


def test_python_workers_import_the_installed_pyspark(spark: SparkSession) -> None:
    if os.environ.get("SPARK_HOME", "").startswith(str(Path(pyspark.__file__).parent)):
        raise AssertionError("the session runs Spark from the pyspark package itself")
    where = (
        spark.sparkContext.parallelize([0], 1)
        .map(lambda _: __import__("pyspark").__file__)
        .collect()
    )
    assert where == [pyspark.__file__]
    assert ".zip" not in where[0]
