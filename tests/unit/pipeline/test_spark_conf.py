"""Which settings a ringflow Spark session starts with: the user's win, Spark's own (spark-submit,
``spark-defaults.conf``) come next, ringflow's defaults fill only what nobody set, and the
driver goes on loopback only in local mode with nothing naming its address. Bad ``--conf``,
master or driver host values are refused with PipelineConfigError (exit 2 in the CLI)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ringflow.cli import main
from ringflow.pipeline import (
    DEFAULT_CONF,
    LOOPBACK_CONF,
    PipelineConfigError,
    check_driver_address,
    resolve_spark_conf,
    spark_settings,
)
from ringflow.pipeline._spark_conf import properties, submit_arguments_conf


def test_defaults_alone_give_a_local_session_on_loopback() -> None:
    conf = resolve_spark_conf(spark_settings(), {}, "app")
    assert conf == {
        **DEFAULT_CONF,
        **LOOPBACK_CONF,
        "spark.master": "local[2]",
        "spark.app.name": "app",
    }


def test_the_users_settings_win_and_defaults_fill_only_the_rest() -> None:
    settings = spark_settings(
        "spark://127.0.0.2:7077",
        ["spark.sql.shuffle.partitions=8", "spark.executor.memory=512m"],
        "127.0.0.5",
    )
    conf = resolve_spark_conf(settings, {}, "app")
    assert conf["spark.master"] == "spark://127.0.0.2:7077"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.executor.memory"] == "512m"
    assert conf["spark.driver.host"] == "127.0.0.5"
    assert "spark.driver.bindAddress" not in conf  # Spark binds to the driver host then
    assert conf["spark.ui.enabled"] == "false"


def test_spark_submits_settings_are_not_overridden_by_defaults() -> None:
    preset = {
        "spark.master": "spark://10.0.0.1:7077",
        "spark.app.name": "nightly",
        "spark.sql.shuffle.partitions": "64",
        "spark.driver.extraJavaOptions": "-Xss4m",
    }
    conf = resolve_spark_conf(spark_settings(conf=["spark.ui.enabled=true"]), preset, "app")
    assert set(conf) & set(preset) == set()  # each left to Spark, which holds it already
    assert conf["spark.ui.enabled"] == "true"
    assert "spark.driver.host" not in conf and "spark.driver.bindAddress" not in conf
    assert conf["spark.sql.session.timeZone"] == "UTC"


def test_the_user_wins_over_spark_submit_too() -> None:
    preset = {"spark.master": "spark://10.0.0.1:7077", "spark.sql.shuffle.partitions": "64"}
    settings = spark_settings("local[1]", ["spark.sql.shuffle.partitions=3"])
    conf = resolve_spark_conf(settings, preset, "app")
    assert conf["spark.master"] == "local[1]"
    assert conf["spark.sql.shuffle.partitions"] == "3"


@pytest.mark.parametrize(
    ("settings", "preset", "local_address_set"),
    [
        (spark_settings("spark://127.0.0.2:7077"), {}, False),  # a cluster: Spark's choice
        (spark_settings(), {"spark.master": "yarn"}, False),  # spark-submit's cluster
        (spark_settings(driver_host="127.0.0.7"), {}, False),  # the user's address
        (spark_settings(conf=["spark.driver.bindAddress=0.0.0.0"]), {}, False),
        (spark_settings(), {"spark.driver.host": "10.1.1.1"}, False),  # spark-defaults.conf
        (spark_settings(), {}, True),  # SPARK_LOCAL_IP / SPARK_LOCAL_HOSTNAME
    ],
)
def test_loopback_only_in_local_mode_when_nothing_names_the_driver_address(
    settings: object, preset: dict[str, str], local_address_set: bool
) -> None:
    assert isinstance(settings, type(spark_settings()))
    conf = resolve_spark_conf(settings, preset, "app", local_address_set)
    for key, value in LOOPBACK_CONF.items():
        assert conf.get(key) != value or key in settings.conf


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: spark_settings(conf=["spark.ui.enabled"]), "expected key=value"),
        (lambda: spark_settings(conf=["=x"]), "expected key=value"),
        (lambda: spark_settings(conf=["ui.enabled=false"]), r"not a Spark setting"),
        (lambda: spark_settings("spark:/oops"), "Spark master 'spark:/oops'"),
        (lambda: spark_settings("local[0]"), "Spark master"),
        (lambda: spark_settings(driver_host="bad host"), "--driver-host 'bad host'"),
        (lambda: spark_settings(driver_host="-x.example"), "--driver-host '-x.example'"),
        (
            lambda: spark_settings(conf=["spark.driver.bindAddress=a_b"]),
            "spark.driver.bindAddress 'a_b'",
        ),
        (
            lambda: spark_settings("local[1]", ["spark.master=local[2]"]),
            r"--master 'local\[1\]' contradicts --conf spark.master=local\[2\]",
        ),
        (
            lambda: spark_settings(driver_host="127.0.0.5", conf=["spark.driver.host=h"]),
            "--driver-host '127.0.0.5' contradicts",
        ),
    ],
)
def test_bad_settings_are_refused(call: object, message: str) -> None:
    with pytest.raises(PipelineConfigError, match=message):
        call()  # type: ignore[operator]


def test_settings_accept_every_master_form_and_repeat_the_last_conf() -> None:
    for master in ("local", "local[*]", "local[4]", "local[2,3]", "spark://h:7077", "yarn"):
        assert spark_settings(master).master == master
    settings = spark_settings(conf=["spark.a=1", "spark.a=2", "spark.b=x=y"])
    assert dict(settings.conf) == {"spark.a": "2", "spark.b": "x=y"}
    assert spark_settings(driver_host="::1").driver_host == "::1"
    assert spark_settings(driver_host="driver-1.example.org").driver_host is not None


def test_spark_defaults_conf_is_read_as_spark_submit_reads_it() -> None:
    text = (
        "# a comment\n"
        "! another\n"
        "spark.master            spark://10.0.0.1:7077\n"
        "spark.executor.memory=2g\n"
        "spark.ui.enabled: true\n"
        "spark.driver.extraJavaOptions -Da=1 \\\n"
        "    -Db=2\n"
        "hadoop.ignored  1\n"
        "\n"
    )
    assert properties(text) == {
        "spark.master": "spark://10.0.0.1:7077",
        "spark.executor.memory": "2g",
        "spark.ui.enabled": "true",
        "spark.driver.extraJavaOptions": "-Da=1 -Db=2",
    }


def test_pyspark_submit_args_settings_are_spark_submits() -> None:
    submit = submit_arguments_conf(
        "--master spark://h:7077 --conf spark.a=1 -c spark.b=2 --conf=spark.c=3 "
        "--jars x.jar --name job --driver-java-options '-Dx=1 -Dy=2' "
        "--properties-file /etc/s.conf --load-spark-defaults pyspark-shell"
    )
    assert dict(submit.conf) == {
        "spark.master": "spark://h:7077",
        "spark.a": "1",
        "spark.b": "2",
        "spark.c": "3",
        "spark.app.name": "job",
        "spark.driver.extraJavaOptions": "-Dx=1 -Dy=2",
    }
    assert submit.properties_file == "/etc/s.conf"
    assert submit.load_defaults
    assert submit_arguments_conf("pyspark-shell").conf == {}


def test_the_driver_address_is_checked_before_spark_starts() -> None:
    check_driver_address({"spark.driver.host": "127.0.0.1"})
    check_driver_address({})
    with pytest.raises(PipelineConfigError, match=re.escape("cannot listen on '203.0.113.7'")):
        check_driver_address({"spark.driver.host": "203.0.113.7"})  # TEST-NET-3: not this machine
    with pytest.raises(PipelineConfigError, match=re.escape("cannot listen on '203.0.113.7'")):
        check_driver_address(
            {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "203.0.113.7"}
        )
    with pytest.raises(PipelineConfigError, match=re.escape("address 'no-such-host.invalid'")):
        check_driver_address({"spark.driver.host": "no-such-host.invalid"})


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--conf", "nonsense"], "--conf 'nonsense': expected key=value"),
        (["--master", "spark:/h"], "Spark master 'spark:/h'"),
        (["--driver-host", "203.0.113.7"], "cannot listen on '203.0.113.7'"),
    ],
)
def test_the_cli_exits_2_on_bad_spark_settings_before_touching_anything(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    arguments = ["replicate", "--source", "192.0.2.9", "--table", "ks.t"]
    arguments += ["--to", f"parquet:{tmp_path}/lake", "--checkpoint", f"{tmp_path}/ckpt"]
    assert main([*arguments, *extra]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # no lake, no checkpoint: nothing reached or made
