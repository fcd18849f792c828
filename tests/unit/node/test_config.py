"""Node configuration and the persisted node record: validation, persistence, restart rules.

Proves: every bad value is a ConfigurationError naming the setting; a record round-trips
through ``node.json`` and is written atomically; a restart keeps host id and tokens and refuses
a changed cluster name, DC, rack, vnode count or sharding; omitted options come from the record.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import random
import uuid
from pathlib import Path

import pytest

from ringflow.cli import main
from ringflow.cli._native_options import given_native_options, native_arguments
from ringflow.cql import ServerLimits
from ringflow.errors import ConfigurationError
from ringflow.node import (
    DEFAULT_IGNORE_MSB,
    DEFAULT_NUM_TOKENS,
    DEFAULT_SHARD_COUNT,
    RECORD_FILE_NAME,
    NodeConfig,
    NodeRecord,
    load_record,
    node_config,
    prepare_data_dir,
    save_record,
    server_limits,
)


def test_defaults(tmp_path: Path) -> None:
    config = NodeConfig("127.0.0.1", tmp_path)
    assert config.native_port == 9042
    assert config.num_tokens == DEFAULT_NUM_TOKENS == 16
    assert config.shard_count == DEFAULT_SHARD_COUNT == 1
    assert config.ignore_msb == DEFAULT_IGNORE_MSB == 12
    assert config.record_path == tmp_path / RECORD_FILE_NAME


@pytest.mark.parametrize(
    ("changes", "setting"),
    [
        ({"address": "10.0.0.1"}, "address"),
        ({"address": "::1"}, "address"),
        ({"address": "localhost"}, "address"),
        ({"native_port": 70000}, "native_port"),
        ({"native_port": True}, "native_port"),
        ({"cluster_name": ""}, "cluster_name"),
        ({"cluster_name": "a\nb"}, "cluster_name"),
        ({"num_tokens": 0}, "num_tokens"),
        ({"num_tokens": 20000}, "num_tokens"),
        ({"dc": "-x"}, "dc"),
        ({"rack": "r" * 200}, "rack"),
        ({"shard_count": 0}, "shard_count"),
        ({"shard_count": 1000}, "shard_count"),
        ({"ignore_msb": 64}, "ignore_msb"),
        ({"data_dir": 3}, "data_dir"),
        ({"limits": {}}, "limits"),
    ],
)
def test_bad_values_are_configuration_errors_naming_the_setting(
    tmp_path: Path, changes: dict[str, object], setting: str
) -> None:
    arguments: dict[str, object] = {"address": "127.0.0.1", "data_dir": tmp_path, **changes}
    with pytest.raises(ConfigurationError, match=setting):
        NodeConfig(**arguments)  # type: ignore[arg-type]


def test_address_is_canonicalised() -> None:
    address = ipaddress.IPv4Address("127.0.0.2")
    assert NodeConfig(address, Path("x")).address == "127.0.0.2"  # type: ignore[arg-type]


def test_record_round_trips_and_is_written_atomically(tmp_path: Path) -> None:
    config = NodeConfig("127.0.0.3", tmp_path, num_tokens=8, shard_count=3, cluster_name="c 1")
    record = NodeRecord.create(config, random.Random(7))
    assert len(record.tokens) == 8 and list(record.tokens) == sorted(record.tokens)
    assert record.host_id.version == 4
    save_record(tmp_path, record)
    assert load_record(tmp_path) == record
    assert sorted(path.name for path in tmp_path.iterdir()) == [RECORD_FILE_NAME]
    record.check_matches(config)


def test_no_record_before_first_start(tmp_path: Path) -> None:
    assert load_record(tmp_path) is None


@pytest.mark.parametrize(
    "change",
    [
        {"cluster_name": "other"},
        {"dc": "dc2"},
        {"rack": "r2"},
        {"num_tokens": 4},
        {"shard_count": 2},
        {"ignore_msb": 0},
    ],
)
def test_restart_refuses_a_changed_identity_setting(
    tmp_path: Path, change: dict[str, object]
) -> None:
    config = NodeConfig("127.0.0.1", tmp_path)
    record = NodeRecord.create(config, random.Random(1))
    changed = NodeConfig("127.0.0.1", tmp_path, **change)  # type: ignore[arg-type]
    name = next(iter(change))
    with pytest.raises(ConfigurationError, match=f"created with {name}"):
        record.check_matches(changed)


def test_node_config_fills_omitted_settings_from_the_saved_record(tmp_path: Path) -> None:
    first = node_config(
        address="127.0.0.1", data_dir=tmp_path, cluster_name="blue", num_tokens=4, shard_count=2
    )
    save_record(tmp_path, NodeRecord.create(first, random.Random(2)))
    again = node_config(address="127.0.0.5", data_dir=tmp_path, native_port=9043)
    assert (again.cluster_name, again.num_tokens, again.shard_count) == ("blue", 4, 2)
    assert (again.address, again.native_port) == ("127.0.0.5", 9043)
    fresh = node_config(address="127.0.0.1", data_dir=tmp_path / "new")
    assert fresh.cluster_name == "ringflow" and fresh.num_tokens == DEFAULT_NUM_TOKENS


@pytest.mark.parametrize(
    "damage",
    [
        "not json",
        json.dumps({"format": 99}),
        json.dumps({"format": 1, "host_id": "nope"}),
        json.dumps(
            {
                "format": 1,
                "host_id": str(uuid.uuid4()),
                "tokens": [],
                "cluster_name": "c",
                "dc": "d",
                "rack": "r",
                "shard_count": 1,
                "ignore_msb": 12,
            }
        ),
    ],
)
def test_damaged_record_is_a_configuration_error_naming_the_file(
    tmp_path: Path, damage: str
) -> None:
    (tmp_path / RECORD_FILE_NAME).write_text(damage)
    with pytest.raises(ConfigurationError, match=RECORD_FILE_NAME):
        load_record(tmp_path)


def test_prepare_data_dir_creates_it_and_refuses_a_file(tmp_path: Path) -> None:
    prepare_data_dir(tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigurationError, match="data directory"):
        prepare_data_dir(tmp_path / "file")


def test_cli_reports_a_bad_setting_as_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["node", "start", "--address", "10.1.2.3", "--data", str(tmp_path)])
    assert code == 2
    assert "address must be an IPv4 loopback address" in capsys.readouterr().err
    assert main(["node"]) == 2


def test_native_transport_options_take_cassandra_names_sizes_and_durations() -> None:
    limits = server_limits(
        {
            "native_transport_max_concurrent_connections": 100,
            "native_transport_max_concurrent_connections_per_ip": "10",
            "native_transport_idle_timeout": "1500ms",
            "native_transport_max_request_data_in_flight": "64MiB",
            "native_transport_max_request_data_in_flight_per_ip": "16MiB",
            "native_transport_max_frame_size": "8MiB",
            "native_transport_frame_body_timeout": "2m",
        }
    )
    assert limits == ServerLimits(
        max_concurrent_connections=100,
        max_concurrent_connections_per_ip=10,
        idle_timeout_s=1.5,
        max_request_data_in_flight=64 * 2**20,
        max_request_data_in_flight_per_ip=16 * 2**20,
        max_frame_size=8 * 2**20,
        frame_body_timeout_s=120.0,
    )
    assert server_limits({"native_transport_idle_timeout": 2000}).idle_timeout_s == 2.0
    assert server_limits({}) == ServerLimits()


@pytest.mark.parametrize(
    "options,rule",
    [
        ({"native_transport_max_frame_size": "16 MB"}, "must be a size"),
        ({"native_transport_idle_timeout": "soon"}, "must be a duration"),
        ({"native_transport_max_concurrent_connections": 0}, "integer in 1"),
        ({"native_transport_max_threads": 4}, "unknown native transport option"),
        ({"native_transport_max_frame_size": "64MiB"}, "must fit max_request_data_in_flight"),
        ({"native_transport_max_concurrent_connections_per_ip": 2048}, "must be at most"),
    ],
)
def test_bad_native_transport_options_are_configuration_errors(
    options: dict[str, object], rule: str
) -> None:
    with pytest.raises(ConfigurationError, match=rule):
        server_limits(options)


def test_cli_native_transport_options_are_checked_and_forwarded_to_cluster_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = ["node", "start", "--address", "127.0.0.1", "--data", str(tmp_path)]
    code = main([*arguments, "--native-transport-max-frame-size", "64MiB"])
    assert code == 2
    assert "must fit max_request_data_in_flight_per_ip" in capsys.readouterr().err
    namespace = argparse.Namespace(
        native_transport_max_frame_size="1MiB", native_transport_idle_timeout="30s"
    )
    saved = given_native_options(namespace)
    assert native_arguments(saved) == [
        *("--native-transport-idle-timeout", "30s"),
        *("--native-transport-max-frame-size", "1MiB"),
    ]
