"""Credentials of an auth-enabled edge or hub (issue 18 part 1): ``username`` with
``password``, ``password_file`` or ``RINGFLOW_PASSWORD``; a missing password is a config
error that never echoes a secret; options keep the password out of their repr."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringflow.pipeline._cluster_client import cluster_options, credentials
from ringflow.pipeline._destinations import hub_login
from ringflow.pipeline._errors import PipelineConfigError


def test_password_sources_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RINGFLOW_PASSWORD", "from-env")
    secret = tmp_path / "pw"
    secret.write_text("from-file\nignored\n")
    assert credentials({}) == (None, None)
    assert credentials({"username": "u", "password": "given"}) == ("u", "given")
    assert credentials({"username": "u", "password_file": str(secret)}) == ("u", "from-file")
    assert credentials({"username": "u"}) == ("u", "from-env")


def test_missing_or_stray_passwords_are_config_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RINGFLOW_PASSWORD", raising=False)
    with pytest.raises(PipelineConfigError, match="RINGFLOW_PASSWORD"):
        credentials({"username": "u"})
    with pytest.raises(PipelineConfigError, match="needs 'username'"):
        credentials({"password": "p"})
    with pytest.raises(PipelineConfigError, match="unreadable"):
        credentials({"username": "u", "password_file": str(tmp_path / "none")})


def test_the_password_stays_out_of_reprs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RINGFLOW_PASSWORD", raising=False)
    options = cluster_options(
        {"contact_points": "127.0.0.1", "keyspace": "ks", "table": "t", "username": "u",
         "password": "hunter2"}
    )  # fmt: skip
    assert options.username == "u" and options.password == "hunter2"
    assert "hunter2" not in repr(options)


def test_hub_urls_carry_a_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RINGFLOW_PASSWORD", "env")
    assert hub_login(None, None, None) == {}
    assert hub_login("ops%40x", None, None) == {"username": "ops@x", "password": "env"}
    assert hub_login("u", "p%2F1", None) == {"username": "u", "password": "p/1"}


def test_sinks_reach_the_edge_for_their_dead_letters_with_its_login_and_tls(
    tmp_path: Path,
) -> None:
    """The source's login and TLS travel to the hub and PostgreSQL sinks as
    ``dead_letters_*`` options and come back as the edge's cluster options (TLS was dropped
    before: a sink could not write a dead letter to a TLS-only edge)."""
    from ringflow.pipeline import table_to_json
    from ringflow.pipeline._cluster_client import DriverTls
    from ringflow.pipeline._dead_letters import (
        dead_letter_access,
        dead_letter_access_options,
        dead_letter_options,
    )
    from ringflow.pipeline._hub import parse_options as hub_parse
    from ringflow.pipeline._postgres import parse_options as postgres_parse
    from ringflow.runtime import make_ca, write_pair
    from ringflow.schema import INT, Table

    ca_file, _ = write_pair(tmp_path, "ca", make_ca())
    tls = DriverTls(str(ca_file))
    options = dead_letter_access_options("reader", "pw", tls)
    assert options == {
        "dead_letters_username": "reader",
        "dead_letters_password": "pw",
        "dead_letters_ssl_ca": str(ca_file),
    }
    assert dead_letter_access_options(None, None, None) == {}
    assert dead_letter_access({}) == (None, None, None)
    edge = dead_letter_options(("127.0.0.1",), 9042, *dead_letter_access(options))
    assert (edge.username, edge.password, edge.tls) == ("reader", "pw", tls)
    assert "pw'" not in repr(edge)

    table = Table.create("ks", "t", partition_key=[("id", INT)], regular=[("v", INT)])
    common = {"schema": table_to_json(table), "dead_letters": "127.0.0.1:9042", "channel": "c"}
    hub = hub_parse({"contact_points": "127.0.0.2", "keyspace": "ks", "table": "t", **common,
                     **options})  # fmt: skip
    postgres = postgres_parse({"url": "postgresql://u@127.0.0.1/db", "table": "ks_t", **common,
                               **options})  # fmt: skip
    for config in (hub, postgres):
        assert config.dead_letter_options == edge
        assert "pw'" not in repr(config)
