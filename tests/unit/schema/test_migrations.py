"""Versioned migrations (seed 004), DDL rules, the schema digest (cassandra-core.md §9) and
rectification by announce / push."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringflow.errors import AlreadyExists, ErrorCode
from ringflow.schema import (
    EMPTY_SCHEMA_DIGEST,
    GENESIS_VERSION,
    INT,
    TEXT,
    AddColumn,
    AlterKeyspace,
    AlterTableOptions,
    CdcOptions,
    ClusteringOrder,
    Column,
    ColumnKind,
    CqlType,
    CreateKeyspace,
    CreateTable,
    CreateType,
    DropColumn,
    DropKeyspace,
    DroppedColumn,
    DropTable,
    DropType,
    Keyspace,
    MapType,
    Migration,
    MigrationAlreadyApplied,
    MigrationDecodeError,
    MigrationOutOfOrder,
    RectifyAction,
    RenameColumn,
    SchemaAlreadyExists,
    SchemaChange,
    SchemaError,
    SchemaState,
    Table,
    TableOptions,
    UserType,
    UserTypeAlreadyExists,
    UserTypeInUse,
    answer_announce,
    decode_change,
    encode_change,
    missing_migrations,
    name_uuid_from_bytes,
    receive_push,
    schema_digest,
    timeuuid_from_micros,
)

BASE_US = 1_700_000_000_000_000
TEXT_TO_INT = MapType(TEXT, INT)
REPLICATION = {"class": "SimpleStrategy", "replication_factor": "1"}


def version_clock() -> Iterator[uuid.UUID]:
    """Distinct, increasing TimeUUIDs."""
    for tick in itertools.count():
        yield timeuuid_from_micros(BASE_US + tick, tick)


def table_id(n: int) -> uuid.UUID:
    return uuid.UUID(int=n)


def keyspace(
    name: str = "ks",
    replication: dict[str, str] | None = None,
    durable_writes: bool = True,
    user_types: dict[str, UserType] | None = None,
) -> Keyspace:
    return Keyspace(name, replication or dict(REPLICATION), durable_writes, user_types or {})


def table(
    ks: str = "ks",
    name: str = "t",
    id_number: int = 1,
    v_type: CqlType = TEXT,
    order: ClusteringOrder = ClusteringOrder.ASC,
    m_type: CqlType = TEXT_TO_INT,
    s_kind: ColumnKind = ColumnKind.STATIC,
) -> Table:
    """ks.t (pk int, ck text, s int static, v text, m map<text, int>) and variants of it."""
    static = [("s", INT)] if s_kind is ColumnKind.STATIC else []
    regular = [("v", v_type), ("m", m_type)] + ([] if static else [("s", INT)])
    return Table.create(
        ks,
        name,
        [("pk", INT)],
        [("ck", TEXT, order)],
        static=static,
        regular=regular,
        table_id=table_id(id_number),
    )


def regular(name: str, cql_type: CqlType = INT) -> Column:
    return Column(name, cql_type, ColumnKind.REGULAR)


def build(*changes: SchemaChange, state: SchemaState | None = None) -> SchemaState:
    """Apply ``changes`` in order, each as the next migration in the chain."""
    state = state or SchemaState()
    clock = version_clock()
    for _ in state.migrations:
        next(clock)
    for change in changes:
        state = state.apply(Migration(next(clock), state.version, change))
    return state


BASE = build(CreateKeyspace(keyspace()), CreateTable(table()))


def apply_next(state: SchemaState, change: SchemaChange, tick: int = 999) -> SchemaState:
    version = timeuuid_from_micros(BASE_US + 10_000 + tick, tick)
    return state.apply(Migration(version, state.version, change))


# --- the chain --------------------------------------------------------------------------------


def test_empty_state_is_at_genesis() -> None:
    state = SchemaState()
    assert state.version == GENESIS_VERSION
    assert state.chain == ()
    assert state.keyspaces == {} and state.tables == {}


def test_apply_advances_the_chain_and_leaves_the_old_state_alone() -> None:
    empty = SchemaState()
    migration = empty.next_migration(CreateKeyspace(keyspace()), BASE_US, 7)
    assert migration.previous_version == GENESIS_VERSION
    assert migration.timestamp_us == BASE_US
    state = empty.apply(migration)
    assert state.version == migration.version
    assert state.chain == (migration.version,)
    assert state.keyspace("ks") == keyspace()
    assert empty.keyspaces == {} and empty.version == GENESIS_VERSION
    with pytest.raises(TypeError):
        state.keyspaces["other"] = keyspace("other")  # type: ignore[index]


def test_a_migration_is_never_applied_twice() -> None:
    empty = SchemaState()
    migration = empty.next_migration(CreateKeyspace(keyspace()), BASE_US, 1)
    state = empty.apply(migration)
    with pytest.raises(MigrationAlreadyApplied, match=str(migration.version)) as caught:
        state.apply(migration)
    assert caught.value.version == migration.version
    assert isinstance(caught.value, SchemaError)


def test_out_of_order_migration_names_both_versions() -> None:
    clock = version_clock()
    first, second, stray = next(clock), next(clock), next(clock)
    state = SchemaState().apply(Migration(first, GENESIS_VERSION, CreateKeyspace(keyspace())))
    late = Migration(second, stray, CreateKeyspace(keyspace("other")))
    with pytest.raises(MigrationOutOfOrder, match=r"Previous version mismatch\. cannot apply") as e:
        state.apply(late)
    assert str(stray) in str(e.value) and str(first) in str(e.value)
    assert (e.value.previous_version, e.value.current_version) == (stray, first)
    again_from_genesis = Migration(second, GENESIS_VERSION, CreateKeyspace(keyspace("other")))
    with pytest.raises(MigrationOutOfOrder):
        state.apply(again_from_genesis)


def test_migration_version_must_be_a_timeuuid() -> None:
    with pytest.raises(SchemaError, match="TimeUUID"):
        Migration(uuid.uuid4(), GENESIS_VERSION, DropKeyspace("ks"))
    version = timeuuid_from_micros(BASE_US, 0)
    with pytest.raises(SchemaError, match="itself"):
        Migration(version, version, DropKeyspace("ks"))
    with pytest.raises(SchemaError, match="TimeUUID"):
        Migration(GENESIS_VERSION, version, DropKeyspace("ks"))


def test_migrations_after() -> None:
    state = build(CreateKeyspace(keyspace("a")), CreateKeyspace(keyspace("b")))
    first, second = state.migrations
    assert state.migrations_after(GENESIS_VERSION) == (first, second)
    assert state.migrations_after(first.version) == (second,)
    assert state.migrations_after(second.version) == ()
    with pytest.raises(SchemaError, match="not in this schema's chain"):
        state.migrations_after(timeuuid_from_micros(1, 1))


# --- DDL rules --------------------------------------------------------------------------------


def test_successful_changes() -> None:
    state = apply_next(BASE, AddColumn("ks", "t", Column("extra", INT, ColumnKind.REGULAR)))
    assert state.table("ks", "t").column("extra").type == INT
    drop_version = timeuuid_from_micros(BASE_US + 5_000, 3)
    state = state.apply(Migration(drop_version, state.version, DropColumn("ks", "t", "v")))
    assert not state.table("ks", "t").has_column("v")
    assert state.dropped_columns_of("ks", "t") == (DroppedColumn("v", TEXT, BASE_US + 5_000),)
    state = apply_next(state, AddColumn("ks", "t", Column("v", TEXT, ColumnKind.REGULAR)), 1000)
    assert state.table("ks", "t").column("v").type == TEXT
    state = apply_next(state, AlterTableOptions("ks", "t", TableOptions(gc_grace_seconds=5)), 1001)
    assert state.table("ks", "t").options.gc_grace_seconds == 5
    assert state.table("ks", "t").id == table_id(1)
    state = apply_next(state, DropTable("ks", "t"), 1002)
    assert state.tables == {} and state.dropped_columns == {}
    state = apply_next(state, CreateTable(table()), 1003)
    state = apply_next(state, DropKeyspace("ks"), 1004)
    assert state.keyspaces == {} and state.tables == {}


def test_rename_column_renames_key_columns_only() -> None:
    state = apply_next(BASE, RenameColumn("ks", "t", "ck", "c2"))
    renamed = state.table("ks", "t")
    assert [c.name for c in renamed.clustering_columns] == ["c2"]
    assert renamed.column("c2") == dataclasses.replace(
        BASE.table("ks", "t").column("ck"), name="c2"
    )
    for change, message in (
        (RenameColumn("ks", "t", "v", "w"), "not a primary key column"),
        (RenameColumn("ks", "t", "pk", "v"), "it exists"),
        (RenameColumn("ks", "t", "nope", "w"), "nope"),
    ):
        with pytest.raises(SchemaError, match=message):
            apply_next(state, change, 7)


def test_a_drop_using_timestamp_records_that_time() -> None:
    state = apply_next(BASE, DropColumn("ks", "t", "v", 42_000))
    assert state.dropped_columns_of("ks", "t") == (DroppedColumn("v", TEXT, 42_000),)
    assert state.table("ks", "t").dropped_columns == (("v", 42_000),)


def _cdc_log_table() -> Table:
    return Table.create("ks", "t_scylla_cdc_log", [("pk", INT)], table_id=table_id(9))


FOREIGN_TYPE = UserType("elsewhere", "addr", ("street",), (TEXT,), frozen=True)
FOREIGN_TABLE = Table.create("ks", "u", [("pk", INT)], regular=[("a", FOREIGN_TYPE)])
PK2 = Column("k2", INT, ColumnKind.PARTITION_KEY, 1)
CK2 = Column("c2", INT, ColumnKind.CLUSTERING, 1)
ONLY_REGULAR_OR_STATIC = "only regular and static"
RULE_VIOLATIONS: list[tuple[str, SchemaChange, type[Exception], str]] = [
    ("create existing keyspace", CreateKeyspace(keyspace()), SchemaAlreadyExists, "ks"),
    ("drop missing keyspace", DropKeyspace("nope"), SchemaError, "nope"),
    ("create table in missing keyspace", CreateTable(table("nope")), SchemaError, "nope"),
    ("create existing table", CreateTable(table(id_number=2)), SchemaAlreadyExists, "ks.t"),
    ("create table with a used id", CreateTable(table(name="u")), SchemaError, "in use"),
    ("create table, foreign user type", CreateTable(FOREIGN_TABLE), SchemaError, "elsewhere.addr"),
    ("drop missing table", DropTable("ks", "nope"), SchemaError, "ks.nope"),
    ("drop table of missing keyspace", DropTable("nope", "t"), SchemaError, "nope"),
    ("add existing column", AddColumn("ks", "t", regular("v")), SchemaError, "exists already"),
    ("add partition key column", AddColumn("ks", "t", PK2), SchemaError, ONLY_REGULAR_OR_STATIC),
    ("add clustering column", AddColumn("ks", "t", CK2), SchemaError, ONLY_REGULAR_OR_STATIC),
    ("add column to missing table", AddColumn("ks", "nope", regular("x")), SchemaError, "ks.nope"),
    (
        "add column with a foreign user type",
        AddColumn("ks", "t", regular("x", FOREIGN_TYPE)),
        SchemaError,
        "elsewhere.addr",
    ),
    ("drop missing column", DropColumn("ks", "t", "nope"), SchemaError, "nope"),
    ("drop partition key column", DropColumn("ks", "t", "pk"), SchemaError, "primary key"),
    ("drop clustering column", DropColumn("ks", "t", "ck"), SchemaError, "primary key"),
    ("drop column of missing table", DropColumn("ks", "nope", "v"), SchemaError, "ks.nope"),
    (
        "alter options of missing table",
        AlterTableOptions("ks", "nope", TableOptions()),
        SchemaError,
        "ks.nope",
    ),
]


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [case[1:] for case in RULE_VIOLATIONS],
    ids=[case[0] for case in RULE_VIOLATIONS],
)
def test_ddl_rule_violation(change: SchemaChange, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        apply_next(BASE, change)


def test_already_exists_carries_the_names_and_cql_code() -> None:
    with pytest.raises(AlreadyExists) as caught:
        apply_next(BASE, CreateTable(table(id_number=2)))
    error = caught.value
    assert isinstance(error, SchemaAlreadyExists)
    assert (error.keyspace, error.table, error.code) == ("ks", "t", ErrorCode.ALREADY_EXISTS)


def test_static_column_needs_clustering_columns() -> None:
    plain = Table.create("ks", "plain", [("pk", INT)], table_id=table_id(5))
    state = apply_next(BASE, CreateTable(plain))
    with pytest.raises(SchemaError, match="static columns"):
        apply_next(state, AddColumn("ks", "plain", Column("s", INT, ColumnKind.STATIC)), 1000)


def test_dropped_column_can_only_come_back_with_its_type() -> None:
    state = apply_next(BASE, DropColumn("ks", "t", "v"))
    with pytest.raises(SchemaError, match="re-add dropped column 'v' as int: it was text"):
        apply_next(state, AddColumn("ks", "t", Column("v", INT, ColumnKind.REGULAR)), 1000)


def test_cdc_cannot_be_enabled_on_a_cdc_log_table() -> None:
    state = apply_next(BASE, CreateTable(_cdc_log_table()))
    enable = AlterTableOptions("ks", "t_scylla_cdc_log", TableOptions(cdc=CdcOptions(enabled=True)))
    with pytest.raises(SchemaError, match="CDC log table"):
        apply_next(state, enable, 1000)


def test_user_type_of_own_keyspace_is_accepted() -> None:
    addr = UserType("ks2", "addr", ("street",), (TEXT,), frozen=True)
    uses_addr = Table.create("ks2", "u", [("pk", INT)], regular=[("a", addr)])
    state = build(
        CreateKeyspace(keyspace("ks2", user_types={"addr": addr})), CreateTable(uses_addr)
    )
    assert state.table("ks2", "u").column("a").type == addr


# --- the digest -------------------------------------------------------------------------------


def test_empty_schema_digest_is_cassandras_empty_version() -> None:
    expected = uuid.UUID("59adb24e-f3cd-3e02-97f0-5b395827453f")
    assert expected == EMPTY_SCHEMA_DIGEST
    assert schema_digest(SchemaState()) == expected
    assert name_uuid_from_bytes(hashlib.md5(b"").digest()) == expected
    assert expected.version == 3 and expected.variant == uuid.RFC_4122


def test_local_system_keyspaces_stay_out_of_the_digest() -> None:
    assert schema_digest(build(CreateKeyspace(keyspace("system")))) == EMPTY_SCHEMA_DIGEST
    assert schema_digest(build(CreateKeyspace(keyspace("system_auth")))) != EMPTY_SCHEMA_DIGEST


INDEPENDENT_CHANGES: list[SchemaChange] = [
    CreateKeyspace(Keyspace("a", {"replication_factor": "3", "class": "SimpleStrategy"})),
    CreateKeyspace(Keyspace("b", {"class": "NetworkTopologyStrategy", "dc1": "3", "dc2": "2"})),
    CreateTable(table("a", "t1", 11)),
    CreateTable(table("a", "t2", 12)),
    CreateTable(table("b", "t1", 13)),
]


def _build_in_order(order: list[int]) -> SchemaState:
    """Keyspaces before their tables, otherwise in ``order``."""
    keyspaces = [INDEPENDENT_CHANGES[i] for i in order if i < 2]
    tables = [INDEPENDENT_CHANGES[i] for i in order if i >= 2]
    return build(*keyspaces, *tables)


@settings(max_examples=30, deadline=None)
@given(st.permutations(range(len(INDEPENDENT_CHANGES))))
def test_digest_ignores_creation_order(order: list[int]) -> None:
    assert schema_digest(_build_in_order(order)) == schema_digest(_build_in_order([0, 1, 2, 3, 4]))


def test_digest_ignores_dict_and_column_order() -> None:
    reordered = Keyspace("ks", {"replication_factor": "1", "class": "SimpleStrategy"})
    alone = build(CreateKeyspace(reordered), CreateTable(table()))
    assert schema_digest(alone) == schema_digest(BASE)
    one_way = build(
        AddColumn("ks", "t", Column("x", INT, ColumnKind.REGULAR)),
        AddColumn("ks", "t", Column("y", TEXT, ColumnKind.REGULAR)),
        state=BASE,
    )
    other_way = build(
        AddColumn("ks", "t", Column("y", TEXT, ColumnKind.REGULAR)),
        AddColumn("ks", "t", Column("x", INT, ColumnKind.REGULAR)),
        state=BASE,
    )
    assert one_way.table("ks", "t").columns != other_way.table("ks", "t").columns
    assert schema_digest(one_way) == schema_digest(other_way)


VARIANTS: list[tuple[str, SchemaChange | None]] = [
    ("base", None),
    ("second keyspace", CreateKeyspace(keyspace("ks2"))),
    ("replication", None),
    ("durable writes", None),
    ("user type", None),
    ("second table", CreateTable(table(name="t2", id_number=2))),
    ("added column", AddColumn("ks", "t", Column("x", INT, ColumnKind.REGULAR))),
    ("added static column", AddColumn("ks", "t", Column("x", INT, ColumnKind.STATIC))),
    ("dropped column", DropColumn("ks", "t", "v")),
    ("gc grace", AlterTableOptions("ks", "t", TableOptions(gc_grace_seconds=1))),
    ("default ttl", AlterTableOptions("ks", "t", TableOptions(default_time_to_live_s=60))),
    ("comment", AlterTableOptions("ks", "t", TableOptions(comment="hi"))),
    ("cdc", AlterTableOptions("ks", "t", TableOptions(cdc=CdcOptions(enabled=True)))),
    ("cdc ttl", AlterTableOptions("ks", "t", TableOptions(cdc=CdcOptions(ttl_s=5)))),
]


def _variant_state(name: str, change: SchemaChange | None) -> SchemaState:
    if change is not None:
        return apply_next(BASE, change)
    special = {
        "replication": keyspace("ks", {"class": "SimpleStrategy", "replication_factor": "3"}),
        "durable writes": keyspace("ks", durable_writes=False),
        "user type": keyspace("ks", user_types={"u": UserType("ks", "u", ("f",), (INT,))}),
    }
    if name in special:
        return build(CreateKeyspace(special[name]), CreateTable(table()))
    return BASE


def test_digest_changes_with_any_schema_change() -> None:
    digests = {name: schema_digest(_variant_state(name, change)) for name, change in VARIANTS}
    other_table_shapes = {
        "table id": table(id_number=77),
        "column type": table(v_type=INT),
        "clustering order": table(order=ClusteringOrder.DESC),
        "frozen collection": table(m_type=MapType(TEXT, INT, frozen=True)),
        "column kind": table(s_kind=ColumnKind.REGULAR),
    }
    for name, shape in other_table_shapes.items():
        digests[name] = schema_digest(build(CreateKeyspace(keyspace()), CreateTable(shape)))
    assert len(set(digests.values())) == len(digests), digests
    assert EMPTY_SCHEMA_DIGEST not in digests.values()


def test_digest_is_independent_of_the_chain() -> None:
    direct = build(CreateKeyspace(keyspace()), CreateTable(table()))
    detour = build(
        CreateKeyspace(keyspace()),
        CreateKeyspace(keyspace("tmp")),
        CreateTable(table()),
        DropKeyspace("tmp"),
    )
    assert direct.version != detour.version
    assert schema_digest(direct) == schema_digest(detour)


# --- rectification ----------------------------------------------------------------------------


def _chain(n: int, start: int = 0) -> list[uuid.UUID]:
    return [timeuuid_from_micros(BASE_US + start + i, start + i) for i in range(n)]


def test_missing_migrations_equal_ahead_behind_and_forked() -> None:
    shared, mine, theirs = _chain(2), _chain(2, 100), _chain(1, 200)
    same = missing_migrations(shared, shared)
    assert (same.action, same.common_version, same.push, same.pull) == (
        RectifyAction.NOTHING,
        shared[-1],
        (),
        (),
    )
    ahead = missing_migrations(shared + mine, shared)
    assert (ahead.action, ahead.common_version, ahead.push) == (
        RectifyAction.PUSH,
        shared[-1],
        tuple(mine),
    )
    behind = missing_migrations(shared, shared + theirs)
    assert (behind.action, behind.pull) == (RectifyAction.PULL, tuple(theirs))
    forked = missing_migrations(shared + mine, shared + theirs)
    assert (forked.action, forked.common_version, forked.push, forked.pull) == (
        RectifyAction.DIVERGED,
        shared[-1],
        tuple(mine),
        tuple(theirs),
    )
    fresh = missing_migrations([], shared)
    assert (fresh.action, fresh.common_version, fresh.pull) == (
        RectifyAction.PULL,
        GENESIS_VERSION,
        tuple(shared),
    )
    assert missing_migrations([], []).action is RectifyAction.NOTHING
    with pytest.raises(SchemaError, match="repeats"):
        missing_migrations(shared + shared, shared)


def test_answer_announce_follows_seed_004() -> None:
    chain = _chain(3)
    assert answer_announce(chain, chain[-1]).action is RectifyAction.NOTHING
    older = answer_announce(chain, chain[0])
    assert (older.action, older.common_version, older.push) == (
        RectifyAction.PUSH,
        chain[0],
        tuple(chain[1:]),
    )
    fresh = answer_announce(chain, GENESIS_VERSION)
    assert (fresh.action, fresh.push) == (RectifyAction.PUSH, tuple(chain))
    unknown = answer_announce(chain, _chain(1, 500)[0])
    assert (unknown.action, unknown.common_version) == (RectifyAction.PULL, chain[-1])
    assert answer_announce([], GENESIS_VERSION).action is RectifyAction.NOTHING


def test_announce_push_round_brings_a_lagging_node_to_the_same_schema() -> None:
    node_a = build(CreateKeyspace(keyspace()))
    node_b = node_a
    node_a = build(CreateTable(table()), AddColumn("ks", "t", regular("x")), state=node_a)
    # A announces its version to B; B does not know it, so it announces back.
    assert answer_announce(node_b.chain, node_a.version).action is RectifyAction.PULL
    # A hears B's version, finds it in its chain and pushes what follows.
    reply = answer_announce(node_a.chain, node_b.version)
    assert reply.action is RectifyAction.PUSH
    pushed = node_a.migrations_after(reply.common_version)
    assert tuple(m.version for m in pushed) == reply.push
    outcome = receive_push(node_b, node_a.migrations)  # overlapping push: the first is known
    assert outcome.discarded == node_a.migrations[:1]
    assert outcome.applied == pushed
    assert outcome.state.version == node_a.version
    assert schema_digest(outcome.state) == schema_digest(node_a)


def test_concurrent_ddl_forks_the_chain_and_pushes_are_discarded() -> None:
    origin = build(CreateKeyspace(keyspace()))
    node_a = apply_next(origin, CreateKeyspace(keyspace("from_a")), 1)
    node_b = apply_next(origin, CreateKeyspace(keyspace("from_b")), 2)
    assert missing_migrations(node_a.chain, node_b.chain).action is RectifyAction.DIVERGED
    outcome = receive_push(node_b, node_a.migrations_after(origin.version))
    assert outcome.applied == () and outcome.discarded == node_a.migrations[1:]
    assert outcome.state is node_b


CHANGE_POOL: list[SchemaChange] = [
    CreateKeyspace(keyspace()),
    CreateKeyspace(keyspace("ks2")),
    DropKeyspace("ks"),
    CreateTable(table()),
    CreateTable(table("ks2", "t", 2)),
    DropTable("ks", "t"),
    AddColumn("ks", "t", regular("x")),
    AddColumn("ks", "t", regular("x", TEXT)),
    AddColumn("ks", "t", Column("y", INT, ColumnKind.STATIC)),
    DropColumn("ks", "t", "x"),
    DropColumn("ks", "t", "v"),
    DropColumn("ks", "t", "pk"),
    AlterTableOptions("ks", "t", TableOptions(gc_grace_seconds=1)),
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(CHANGE_POOL), max_size=12))
def test_replaying_a_chain_rebuilds_the_same_schema(changes: list[SchemaChange]) -> None:
    """Any DDL sequence either applies or raises a schema error leaving the state as it was;
    replaying the applied chain on a fresh node gives an equal state and digest."""
    state = SchemaState()
    for tick, change in enumerate(changes):
        migration = Migration(timeuuid_from_micros(BASE_US + tick, tick), state.version, change)
        try:
            state = state.apply(migration)
        except (SchemaError, AlreadyExists):
            continue
        state.validate()
    replayed = receive_push(SchemaState(), state.migrations)
    assert replayed.discarded == ()
    assert replayed.state == state
    assert schema_digest(replayed.state) == schema_digest(state)


# --- ALTER KEYSPACE, CREATE TYPE, DROP TYPE -----------------------------------------------------

ADDRESS = UserType("ks", "address", ("street", "zip"), (TEXT, INT))


def test_alter_keyspace_replaces_replication_and_keeps_user_types() -> None:
    state = build(CreateType(ADDRESS), state=BASE)
    before = schema_digest(state)
    nts = {"class": "NetworkTopologyStrategy", "dc1": "3"}
    altered = apply_next(state, AlterKeyspace("ks", nts, False))
    assert dict(altered.keyspaces["ks"].replication) == nts
    assert altered.keyspaces["ks"].durable_writes is False
    assert altered.keyspaces["ks"].user_types == {"address": ADDRESS}
    assert altered.tables == state.tables
    assert altered.version != state.version
    assert schema_digest(altered) != before
    with pytest.raises(SchemaError, match="does not exist"):
        apply_next(state, AlterKeyspace("nope", nts), tick=7)
    assert AlterKeyspace("ks", nts) == AlterKeyspace("ks", dict(nts))
    assert hash(AlterKeyspace("ks", nts)) == hash(AlterKeyspace("ks", dict(nts)))


def test_create_type_rules() -> None:
    state = apply_next(BASE, CreateType(ADDRESS))
    assert state.keyspaces["ks"].user_types == {"address": ADDRESS}
    assert state.version == state.migrations[-1].version
    assert schema_digest(state) != schema_digest(BASE)
    with pytest.raises(UserTypeAlreadyExists) as existing:
        apply_next(state, CreateType(ADDRESS), tick=5)
    assert isinstance(existing.value, AlreadyExists)
    assert (existing.value.keyspace, existing.value.table) == ("ks", "address")
    with pytest.raises(SchemaError, match="does not exist"):
        apply_next(state, CreateType(UserType("nope", "x", ("a",), (INT,))), tick=7)
    nested = UserType("ks", "person", ("name", "home"), (TEXT, ADDRESS.frozen_form()))
    with pytest.raises(SchemaError, match="unknown in keyspace ks"):
        apply_next(BASE, CreateType(nested))
    with_person = apply_next(state, CreateType(nested), tick=6)
    assert set(with_person.keyspaces["ks"].user_types) == {"address", "person"}


def test_drop_type_rules() -> None:
    nested = UserType("ks", "person", ("name", "home"), (TEXT, ADDRESS.frozen_form()))
    state = build(CreateType(ADDRESS), CreateType(nested), state=BASE)
    with pytest.raises(SchemaError, match="does not exist"):
        apply_next(state, DropType("ks", "nope"), tick=3)
    with pytest.raises(SchemaError, match="does not exist"):
        apply_next(state, DropType("nope", "address"), tick=4)
    with pytest.raises(UserTypeInUse, match="type person") as by_type:
        apply_next(state, DropType("ks", "address"), tick=5)
    assert (by_type.value.keyspace, by_type.value.name) == ("ks", "address")
    used = apply_next(state, AddColumn("ks", "t", regular("who", nested.frozen_form())), tick=1)
    with pytest.raises(UserTypeInUse, match="table t"):
        apply_next(used, DropType("ks", "person"), tick=2)
    dropped = build(DropType("ks", "person"), DropType("ks", "address"), state=state)
    assert dropped.keyspaces["ks"].user_types == {}
    assert schema_digest(dropped) == schema_digest(BASE)
    assert dropped.version != BASE.version


def test_every_change_round_trips_through_its_stored_form() -> None:
    cdc_table = dataclasses.replace(
        table(v_type=ADDRESS, name="u", id_number=2),
        options=TableOptions(CdcOptions(enabled=True, postimage=True), 7, 8, "c"),
    )
    changes: list[SchemaChange] = [
        CreateKeyspace(keyspace(user_types={"address": ADDRESS})),
        AlterKeyspace("ks", {"class": "NetworkTopologyStrategy", "dc1": "3"}, False),
        DropKeyspace("ks"),
        CreateType(UserType("ks", "p", ("a", "l"), (ADDRESS.frozen_form(), MapType(TEXT, INT)))),
        DropType("ks", "p"),
        CreateTable(table(order=ClusteringOrder.DESC)),
        CreateTable(cdc_table),
        DropTable("ks", "t"),
        AddColumn("ks", "t", Column("st", INT, ColumnKind.STATIC)),
        DropColumn("ks", "t", "v"),
        DropColumn("ks", "t", "v", 1_700_000_000_001_000),
        RenameColumn("ks", "t", "ck", "ck2"),
        AlterTableOptions("ks", "t", TableOptions(CdcOptions(enabled=True), 1, 2, "x")),
    ]
    for change in changes:
        encoded = encode_change(change)
        assert encoded[0] == 1
        assert decode_change(encoded) == change
    with pytest.raises(MigrationDecodeError):
        decode_change(b"\x02" + encode_change(DropKeyspace("ks"))[1:])
    with pytest.raises(MigrationDecodeError):
        decode_change(b"\x01\xc1")
    with pytest.raises(MigrationDecodeError):
        decode_change(b"")
