"""Channels: destination URLs with the syntax of ``ringflow replicate --to`` (hosts read exactly
as the pipeline reads them), every bad setting refused with its rule and value, targets resolved
per destination kind, and the ``system_replication.channels`` row: its DDL parses with our CQL
parser, has exactly the codec's columns, and a channel survives a round trip through it."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.cql import CreateTableStatement, parse_statement
from ringflow.replication import (
    CHANNEL_COLUMNS,
    CHANNELS_TABLE_CQL,
    PRIORITY_MAX,
    PRIORITY_MIN,
    Channel,
    ChannelOrder,
    DestinationKind,
    ReplicationArgumentError,
    SliceSettings,
    channel_from_row,
    channel_to_row,
    parse_destination,
    table_slice_settings,
)


def test_the_replicate_to_urls_parse() -> None:
    hub = parse_destination("ringflow://127.0.0.11,127.0.0.12:9043/hub_ks.t?consistency=one")
    assert hub.kind is DestinationKind.HUB
    assert (hub.hosts, hub.port, hub.table, hub.consistency) == (
        ("127.0.0.11", "127.0.0.12"),
        9043,
        "hub_ks.t",
        "ONE",
    )
    secure = parse_destination("ringflow://ops@127.0.0.11/ks.t?ssl=true&password_file=/run/pw")
    assert (secure.hosts, secure.port, secure.table) == (("127.0.0.11",), 9042, "ks.t")
    with_ca = parse_destination("ringflow://h?ca=/ca.crt&certfile=/c.crt&keyfile=/c.key")
    assert with_ca.hosts == ("h",)
    plain = parse_destination("ringflow://127.0.0.11")
    assert (plain.port, plain.table, plain.consistency) == (9042, None, "QUORUM")
    assert parse_destination("parquet:/data/lake").directory == "/data/lake"
    assert parse_destination("parquet:///data/lake").directory == "/data/lake"
    pg = parse_destination("postgresql://u:pw@127.0.0.1:5432/db")
    assert (pg.kind, pg.hosts, pg.port) == (DestinationKind.POSTGRES, ("127.0.0.1",), 5432)
    assert pg.display == "postgresql://u:***@127.0.0.1:5432/db"
    assert parse_destination("postgres://u@h/db").kind is DestinationKind.POSTGRES


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://example.com", "expected ringflow://"),
        ("hub", "expected ringflow://"),
        ("", "non-empty URL"),
        ("parquet:", "lake directory is missing"),
        ("parquet://", "lake directory is missing"),
        ("ringflow://", "not host"),
        ("ringflow://h:70000", "not host"),
        ("ringflow://h/ks", "not keyspace.table"),
        ("ringflow://h/ks.t.x", "not keyspace.table"),
        ("ringflow://h?consistency=MOST", "unknown consistency 'MOST'"),
        ("ringflow://h?batch=3", r"unknown parameter\(s\) \['batch'\]"),
        ("ringflow://h?ssl=yes", "ssl must be true or false"),
        ("ringflow://h /ks.t", "no spaces"),
        ("postgresql://u@h:99999/db", "port"),
        ("postgresql:db", "postgresql://user@host:port/db"),
    ],
)
def test_bad_urls_are_refused_with_the_rule(url: str, rule: str) -> None:
    with pytest.raises(ReplicationArgumentError, match=rule):
        parse_destination(url)


def test_a_refused_url_does_not_show_its_password() -> None:
    with pytest.raises(ReplicationArgumentError) as error:
        parse_destination("postgresql://u:secret@h:99999/db")
    assert "secret" not in str(error.value)
    channel = Channel("pg", "ks", "t", "postgresql://u:secret@h:5432/db")
    assert "secret" not in repr(channel)


host_texts = st.text(alphabet="ab1.,:/] ", max_size=16)


def compare_with_the_pipeline(text: str) -> bool:
    """Assert that ``ringflow://<text>`` gets the hosts and port, or the refusal, that
    ``pipeline._replicate.parse_hosts`` gives; False when the text is not comparable."""
    pytest.importorskip("pyspark")
    from ringflow.pipeline._errors import PipelineConfigError
    from ringflow.pipeline._replicate import parse_hosts

    url = f"ringflow://{text}"
    try:
        parts = urlsplit(url)
    except ValueError:
        return False  # urlsplit refuses it: the pipeline raises ValueError, we refuse it
    if parts.path.strip("/") or parts.query or " " in text:
        return False  # a path or a query is read apart from the hosts; spaces are refused first
    try:
        expected: tuple[tuple[str, ...], int | None] | None = parse_hosts(parts.netloc, "hub")
    except PipelineConfigError:
        expected = None
    try:
        parsed = parse_destination(url)
        got: tuple[tuple[str, ...], int | None] | None = (parsed.hosts, parsed.port)
    except ReplicationArgumentError:
        got = None
    assert got == expected
    return True


@settings(deadline=None)  # the first example imports the pipeline
@given(host_texts)
def test_hub_hosts_are_read_as_the_pipeline_reads_them(text: str) -> None:
    compare_with_the_pipeline(text)


@pytest.mark.parametrize(
    "text", ["a", "a,b", "a:1", "a,b:9043", "a:70000", ":1", "a:b", ",", "a,,b:0", "a:"]
)
def test_hub_hosts_examples_match_the_pipeline(text: str) -> None:
    assert compare_with_the_pipeline(text)


def test_targets_default_to_the_source_as_each_sink_names_it() -> None:
    assert Channel("h", "ks", "t", "ringflow://h").target == "ks.t"
    assert Channel("h", "ks", "t", "ringflow://h/other.t2").target == "other.t2"
    assert Channel("h", "ks", "t", "ringflow://h", target_table="k2.t2").target == "k2.t2"
    assert Channel("p", "ks", "t", "postgresql://u@h/db").target == "ks_t"
    assert Channel("p", "ks", "t", "postgresql://u@h/db", target_table="s.x").target == "s.x"
    assert Channel("l", "ks", "t", "parquet:/lake").target == "/lake"


@pytest.mark.parametrize(
    ("changes", "rule"),
    [
        ({"name": ""}, "channel name"),
        ({"name": "-x"}, "channel name"),
        ({"name": "a b"}, "channel name"),
        ({"name": "x" * 49}, "at most 48"),
        ({"source_keyspace": "k-s"}, "source keyspace"),
        ({"source_table": ""}, "source table"),
        ({"priority": PRIORITY_MIN - 1}, r"priority must be in \[1, 100\] \(higher wins\), got 0"),
        ({"priority": PRIORITY_MAX + 1}, "got 101"),
        ({"priority": True}, "priority must be an int"),
        ({"order": "fifo"}, "ChannelOrder"),
        ({"collection_enabled": 1}, "collection_enabled must be a bool"),
        ({"destination": "ftp://x"}, "expected ringflow://"),
        ({"destination": "parquet:/l", "target_table": "ks.t"}, "target is its directory"),
        ({"destination": "ringflow://h/a.b", "target_table": "c.d"}, "differs from the hub"),
        ({"target_table": "notqualified"}, "not keyspace.table"),
        ({"destination": "postgresql://u@h/db", "target_table": "1x"}, "PostgreSQL target"),
        ({"slice_settings": (60, 5)}, "SliceSettings"),
    ],
)
def test_bad_channels_are_refused_with_the_rule(changes: dict[str, object], rule: str) -> None:
    fields: dict[str, object] = {
        "name": "hub",
        "source_keyspace": "ks",
        "source_table": "t",
        "destination": "ringflow://h",
        **changes,
    }
    with pytest.raises(ReplicationArgumentError, match=rule):
        Channel(**fields)  # type: ignore[arg-type]


def test_an_update_is_checked_again_and_keeps_the_name() -> None:
    channel = Channel("hub", "ks", "t", "ringflow://h")
    assert channel.updated(transmission_enabled=False).transmission_enabled is False
    with pytest.raises(ReplicationArgumentError, match="priority must be in"):
        channel.updated(priority=0)
    with pytest.raises(ReplicationArgumentError, match="identity"):
        channel.updated(name="other")
    with pytest.raises(ReplicationArgumentError, match="channel update"):
        channel.updated(colour="red")


def test_order_parses_from_text() -> None:
    assert ChannelOrder.parse(" LIFO ") is ChannelOrder.LIFO
    with pytest.raises(ReplicationArgumentError, match="'fifo' or 'lifo', got 'newest'"):
        ChannelOrder.parse("newest")


def test_channels_of_one_table_must_slice_it_alike() -> None:
    a = Channel("a", "ks", "t", "ringflow://h", slice_settings=SliceSettings(10, 3))
    b = Channel("b", "ks", "t", "parquet:/l", slice_settings=SliceSettings(10, 3))
    c = Channel("c", "ks", "u", "parquet:/l")
    assert table_slice_settings([a, b, c]) == {
        ("ks", "t"): SliceSettings(10, 3),
        ("ks", "u"): SliceSettings(),
    }
    with pytest.raises(ReplicationArgumentError, match="slice it differently"):
        table_slice_settings([a, b.updated(slice_settings=SliceSettings(10, 4))])


def test_the_channels_ddl_has_the_codec_columns() -> None:
    statement = parse_statement(CHANNELS_TABLE_CQL)
    assert isinstance(statement, CreateTableStatement)
    assert (statement.table.keyspace, statement.table.name) == ("system_replication", "channels")
    assert statement.partition_key == ("name",)
    types = {column.name: column.type.name for column in statement.columns}
    assert tuple(types) == CHANNEL_COLUMNS
    row = channel_to_row(Channel("hub", "ks", "t", "ringflow://h"))
    python_type = {"text": str, "int": int, "boolean": bool}
    for name, value in row.items():
        assert value is None or type(value) is python_type[types[name]], name


names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)
destinations = st.sampled_from(
    ["ringflow://127.0.0.1:9042", "ringflow://a,b/k.t", "parquet:/lake", "postgresql://u@h/db"]
)


@st.composite
def channels(draw: st.DrawFn) -> Channel:
    destination = draw(destinations)
    target = None
    if destination.startswith("postgresql") and draw(st.booleans()):
        target = draw(names)
    return Channel(
        name=draw(names),
        source_keyspace=draw(names),
        source_table=draw(names),
        destination=destination,
        target_table=target,
        priority=draw(st.integers(PRIORITY_MIN, PRIORITY_MAX)),
        order=draw(st.sampled_from(ChannelOrder)),
        collection_enabled=draw(st.booleans()),
        transmission_enabled=draw(st.booleans()),
        slice_settings=SliceSettings(draw(st.integers(1, 3600)), draw(st.integers(1, 60))),
    )


@given(channels())
def test_a_channel_survives_its_row(channel: Channel) -> None:
    row = channel_to_row(channel)
    assert set(row) == set(CHANNEL_COLUMNS)
    assert channel_from_row({**row, "added_later": 1}) == channel


@pytest.mark.parametrize(
    ("changes", "rule"),
    [
        ({"priority": None}, "'priority' is missing or null"),
        ({"priority": "5"}, "'priority' must be int"),
        ({"collection_enabled": 1}, "'collection_enabled' must be bool"),
        ({"transmission_order": "random"}, "'fifo' or 'lifo'"),
        ({"slice_width_s": 0}, "slice_width_s must be in"),
        ({"target_table": 3}, "target_table must be text"),
    ],
)
def test_a_bad_row_is_refused_with_its_column(changes: dict[str, object], rule: str) -> None:
    row = {**channel_to_row(Channel("hub", "ks", "t", "ringflow://h")), **changes}
    with pytest.raises(ReplicationArgumentError, match=rule):
        channel_from_row(row)
