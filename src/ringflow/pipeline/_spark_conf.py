"""Which Spark configuration a ringflow session starts with: the user's, then ringflow's defaults
only where nobody set anything (issue 14 §3: the pipeline on a real cluster).

Where a value comes from, strongest first:

1. what the user gave ringflow (:class:`SparkSettings`): ``--conf k=v`` (repeatable), ``--master``
   and ``--driver-host`` (``spark.driver.host``; a value that contradicts a ``--conf`` of the
   same key is refused);
2. what Spark holds already (the *preset*): under ``spark-submit``, the JVM's SparkConf (its
   ``--conf``, ``--master`` and ``spark-defaults.conf``); for a session ringflow starts itself,
   the ``spark-defaults.conf`` that spark-submit will load and the settings in
   ``PYSPARK_SUBMIT_ARGS`` (:func:`submit_arguments_conf`, :func:`properties`);
3. ringflow's defaults (:data:`DEFAULT_CONF`, the master ``local[2]``, the app name), for keys
   neither 1 nor 2 set;
4. in local mode only, when nothing names the driver's address (``spark.driver.host``,
   ``spark.driver.bindAddress``, ``SPARK_LOCAL_IP``, ``SPARK_LOCAL_HOSTNAME``), the driver on
   loopback (:data:`LOOPBACK_CONF`), so that nothing listens off-host.

Why the preset must be read: PySpark hands the builder's settings to spark-submit as ``--conf``
and sets them over the JVM's SparkConf, so a default set there would beat both
``spark-defaults.conf`` and spark-submit's own flags. Pure functions; the session is made in
:mod:`._spark_session`. Reference: pipelines-spark.md §9-10 (the defaults, measured on 2 cores).
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ringflow.pipeline._errors import PipelineConfigError

DEFAULT_MASTER = "local[2]"
LOOPBACK = "127.0.0.1"
MASTER_KEY = "spark.master"
APP_NAME_KEY = "spark.app.name"
DRIVER_HOST_KEY = "spark.driver.host"
BIND_ADDRESS_KEY = "spark.driver.bindAddress"
LOCAL_ADDRESS_VARIABLES = ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME")

DEFAULT_CONF: Mapping[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "false",
    # The table reader pushes partition-key equality down (PySpark 4 asks for this opt-in).
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}
"""ringflow's defaults, each applied only where the user and Spark's own settings say nothing."""

LOOPBACK_CONF: Mapping[str, str] = {DRIVER_HOST_KEY: LOOPBACK, BIND_ADDRESS_KEY: LOOPBACK}
"""The driver's address in local mode when nothing else names it."""

_MASTER = re.compile(r"^(local(\[(\*|[1-9][0-9]*)(,[0-9]+)?\])?|(spark|k8s|mesos)://\S+|yarn)$")
_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
# spark-submit flags that stand for a conf key (SparkSubmitArguments), as PYSPARK_SUBMIT_ARGS
# may hold them.
_SUBMIT_FLAGS = {
    "--master": MASTER_KEY,
    "--name": APP_NAME_KEY,
    "--driver-java-options": "spark.driver.extraJavaOptions",
}
_PROPERTY = re.compile(r"^([^\s=:]+)\s*(?:[=:]\s*|\s+)(.*)$")


@dataclass(frozen=True, slots=True)
class SparkSettings:
    """What the user asked of Spark (``--master``, ``--conf``, ``--driver-host``); build it with
    :func:`spark_settings`, which checks it."""

    master: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    driver_host: str | None = None


def check_master(master: str) -> str:
    """``master`` if Spark knows its form (``local``, ``local[N]``, ``local[*]``,
    ``local[N,F]``, ``spark://...``, ``yarn``, ``k8s://...``, ``mesos://...``)."""
    if not _MASTER.match(master):
        raise PipelineConfigError(
            f"Spark master {master!r}: expected local[N], local[*], spark://host:port, yarn "
            "or k8s://..."
        )
    return master


def check_host(host: str, what: str = "driver host") -> str:
    """``host`` if it is an IP address or a host name (RFC 1123 labels)."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    labels = host.rstrip(".").split(".")
    if not host or len(host) > 253 or not all(_HOST_LABEL.match(label) for label in labels):
        raise PipelineConfigError(f"{what} {host!r}: expected an IP address or a host name")
    return host


def parse_conf_pairs(pairs: Iterable[str]) -> dict[str, str]:
    """``k=v`` strings (``--conf``) as a dict, the last of a key winning (as in spark-submit);
    PipelineConfigError for one without ``=`` or whose key is not a ``spark.`` key."""
    conf: dict[str, str] = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        key = key.strip()
        if not separator or not key:
            raise PipelineConfigError(f"--conf {pair!r}: expected key=value")
        if not key.startswith("spark.") or key == "spark.":
            raise PipelineConfigError(f"--conf {pair!r}: not a Spark setting (spark.*)")
        conf[key] = value
    return conf


def _agree(conf: dict[str, str], key: str, value: str | None, option: str) -> None:
    if value is None:
        return
    if conf.get(key, value) != value:
        raise PipelineConfigError(f"{option} {value!r} contradicts --conf {key}={conf[key]}")
    conf[key] = value


def spark_settings(
    master: str | None = None,
    conf: Iterable[str] | Mapping[str, str] = (),
    driver_host: str | None = None,
) -> SparkSettings:
    """Checked settings: ``conf`` as ``k=v`` strings or a mapping; the master and driver host
    of ``conf`` are checked like ``master`` and ``driver_host`` and must agree with them."""
    if isinstance(conf, Mapping):
        merged = parse_conf_pairs(f"{key}={value}" for key, value in conf.items())
    else:
        merged = parse_conf_pairs(conf)
    if driver_host is not None:
        check_host(driver_host, "--driver-host")
    _agree(merged, MASTER_KEY, master, "--master")
    _agree(merged, DRIVER_HOST_KEY, driver_host, "--driver-host")
    if MASTER_KEY in merged:
        check_master(merged[MASTER_KEY])
    for key in (DRIVER_HOST_KEY, BIND_ADDRESS_KEY):
        if key in merged:
            check_host(merged[key], key)
    return SparkSettings(merged.get(MASTER_KEY), merged, merged.get(DRIVER_HOST_KEY))


def is_local_master(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def resolve_spark_conf(
    settings: SparkSettings,
    preset: Mapping[str, str],
    app_name: str,
    local_address_set: bool = False,
) -> dict[str, str]:
    """The settings a session is built with (module docstring): the user's, over ringflow's
    defaults for every key that neither they nor ``preset`` (Spark's own settings) hold.
    ``local_address_set``: ``SPARK_LOCAL_IP`` or ``SPARK_LOCAL_HOSTNAME`` is in the
    environment."""
    user = dict(settings.conf)
    taken = set(user) | set(preset)
    defaults = {**DEFAULT_CONF, MASTER_KEY: DEFAULT_MASTER, APP_NAME_KEY: app_name}
    resolved = {key: value for key, value in defaults.items() if key not in taken}
    master = user.get(MASTER_KEY) or preset.get(MASTER_KEY) or DEFAULT_MASTER
    addressed = local_address_set or bool({DRIVER_HOST_KEY, BIND_ADDRESS_KEY} & taken)
    if is_local_master(master) and not addressed:
        resolved.update(LOOPBACK_CONF)
    resolved.update(user)
    return resolved


def driver_listen_address(conf: Mapping[str, str]) -> str | None:
    """Where the driver will listen: ``spark.driver.bindAddress``, else ``spark.driver.host``
    (Spark's fallback), else None (Spark picks the machine's address)."""
    return conf.get(BIND_ADDRESS_KEY) or conf.get(DRIVER_HOST_KEY)


def properties(text: str) -> dict[str, str]:
    """The ``spark.*`` entries of a Java properties file (``spark-defaults.conf``): ``key value``,
    ``key=value`` or ``key: value`` lines, ``#``/``!`` comments, ``\\`` line continuations;
    spark-submit ignores every other key."""
    entries: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            logical += line[:-1]
            continue
        logical += line
        match = _PROPERTY.match(logical)
        logical = ""
        if match and match.group(1).startswith("spark."):
            entries[match.group(1)] = match.group(2).strip()
    return entries


@dataclass(frozen=True, slots=True)
class SubmitArguments:
    """What ``PYSPARK_SUBMIT_ARGS`` sets: confs, and which properties files spark-submit loads."""

    conf: Mapping[str, str]
    properties_file: str | None
    load_defaults: bool


def submit_arguments_conf(arguments: str) -> SubmitArguments:
    """The settings in ``PYSPARK_SUBMIT_ARGS`` (PySpark appends it to the spark-submit command
    that starts the JVM): ``--conf k=v`` / ``-c k=v`` / ``--conf=k=v``, the flags that stand for
    a conf (``--master``, ``--name``, ``--driver-java-options``), ``--properties-file`` and
    ``--load-spark-defaults``. Other flags are not settings ringflow has defaults for."""
    words = shlex.split(arguments)
    conf: dict[str, str] = {}
    properties_file: str | None = None
    load_defaults = False
    index = 0
    while index < len(words):
        word, value = words[index], words[index + 1] if index + 1 < len(words) else None
        flag, inline, inline_value = word.partition("=")
        if inline and flag in ("--conf", "--properties-file", *_SUBMIT_FLAGS):
            word, value, step = flag, inline_value, 1
        else:
            step = 2
        if word in ("--conf", "-c") and value is not None and "=" in value:
            key, _, conf_value = value.partition("=")
            conf[key.strip()] = conf_value
        elif word in _SUBMIT_FLAGS and value is not None:
            conf[_SUBMIT_FLAGS[word]] = value
        elif word == "--properties-file" and value is not None:
            properties_file = value
        else:
            load_defaults = load_defaults or word == "--load-spark-defaults"
            step = 1
        index += step
    return SubmitArguments(conf, properties_file, load_defaults)


__all__ = [
    "DEFAULT_CONF",
    "DEFAULT_MASTER",
    "LOOPBACK_CONF",
    "SparkSettings",
    "SubmitArguments",
    "check_host",
    "check_master",
    "driver_listen_address",
    "is_local_master",
    "parse_conf_pairs",
    "properties",
    "resolve_spark_conf",
    "spark_settings",
    "submit_arguments_conf",
]
