"""Node timing settings: validation (``NodeTimings``, ``ClusterSettings``), the command-line
options of ``ringflow cluster start``/``run-node``/``node start`` (usage errors exit 2, nothing
laid out), their pass-through to a node process, and the DDL agreement warning's text."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringflow.cli import EXIT_USAGE, build_parser, main
from ringflow.cli._cluster import _layout_timings, given_timings, timing_arguments
from ringflow.cluster.service._plane import agreement_warning
from ringflow.cluster.service._settings import (
    TIMING_OPTIONS,
    ClusterSettings,
    NodeTimings,
)
from ringflow.errors import ConfigurationError


def test_defaults_are_valid_and_match_the_settings() -> None:
    timings = NodeTimings()
    assert timings.schema_agreement_timeout_ms == 10_000
    settings = ClusterSettings("127.0.0.1:7000", "127.0.0.1", (), "c")
    assert settings.timings == timings
    changed = settings.with_timings(NodeTimings(write_timeout_ms=3_000, phi_convict_threshold=12))
    assert changed.write_timeout_ms == 3_000 and changed.phi_convict_threshold == 12
    assert changed.endpoint == settings.endpoint


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"write_timeout_ms": 0}, "--write-timeout-ms: 0 is out of range"),
        ({"phi_convict_threshold": 4.0}, "--phi-convict-threshold: 4.0 is out of range"),
        ({"gossip_interval_ms": 1.5}, "--gossip-interval-ms: expected an integer"),
        ({"read_timeout_ms": True}, "--read-timeout-ms: expected an integer"),
        ({"schema_agreement_timeout_ms": -1}, "--schema-agreement-timeout-ms: -1 is out of"),
        ({"hint_window": 5}, "unknown timing settings: hint_window"),
    ],
)
def test_bad_timings_are_configuration_errors(values: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        NodeTimings.of(values)


def test_cluster_settings_validate_their_timings() -> None:
    with pytest.raises(ConfigurationError, match="--range-timeout-ms"):
        ClusterSettings("127.0.0.1:7000", "127.0.0.1", (), "c", range_timeout_ms=5)


def test_every_timing_is_an_option_of_cluster_start(tmp_path: Path) -> None:
    values = {o.name: (12.5 if o.kind is float else int(o.low) + 1) for o in TIMING_OPTIONS}
    argv = ["cluster", "start", "--data", str(tmp_path)]
    for option in TIMING_OPTIONS:
        argv += [option.flag, str(values[option.name])]
    arguments = build_parser().parse_args(argv)
    assert given_timings(arguments) == values
    assert NodeTimings.of(given_timings(arguments)).as_dict() == values


def test_timings_pass_through_to_run_node() -> None:
    """What ``cluster start`` keeps in the layout becomes ``run-node`` options that parse back
    to the same timings (a layout of before ``timings`` keeps its gossip interval)."""
    layout: dict[str, object] = {
        "gossip_interval_ms": 200,
        "timings": {"write_timeout_ms": 3_000, "phi_convict_threshold": 12.0},
    }
    timings = _layout_timings(layout)
    argv = ["cluster", "run-node", "--address", "127.0.0.1", "--data", "d", "--seeds", "x"]
    arguments = build_parser().parse_args([*argv, *timing_arguments(timings)])
    assert given_timings(arguments) == {
        "gossip_interval_ms": 200,
        "write_timeout_ms": 3_000,
        "phi_convict_threshold": 12.0,
    }


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--write-timeout-ms", "0", "--write-timeout-ms: 0 is out of range"),
        ("--phi-convict-threshold", "99", "--phi-convict-threshold: 99.0 is out of range"),
        ("--read-timeout-ms", "soon", "invalid int value"),
    ],
)
def test_cluster_start_refuses_bad_timings_before_laying_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, message: str
) -> None:
    data = tmp_path / "cluster"
    assert main(["cluster", "start", "--data", str(data), option, value]) == EXIT_USAGE
    assert message in capsys.readouterr().err
    assert not (data / "cluster.json").exists()


def test_node_start_timings_need_seeds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["node", "start", "--address", "127.0.0.1", "--data", str(tmp_path)]
    assert main([*argv, "--write-timeout-ms", "3000"]) == EXIT_USAGE
    assert "give --seeds" in capsys.readouterr().err
    assert main([*argv, "--seeds", "127.0.0.2", "--hint-dispatch-interval-ms", "1"]) == EXIT_USAGE
    assert "--hint-dispatch-interval-ms: 1 is out of range" in capsys.readouterr().err


def test_agreement_warning_names_the_disagreeing_nodes() -> None:
    warning = agreement_warning(1500, {"127.0.0.3": "abc", "127.0.0.2": None})
    assert "not reached within 1500 ms" in warning
    assert warning.index("127.0.0.2 (schema version unknown)") < warning.index(
        "127.0.0.3 (schema version abc)"
    )
