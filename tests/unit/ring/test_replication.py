"""Replication factors and strategies (cassandra-core.md §3): parsing, placement, the driver.

Proves: replication maps parse as Cassandra parses them and bad ones raise RingError naming the
value; SimpleStrategy equals the driver's ordered replica lists; NetworkTopologyStrategy equals
the driver's replica sets wherever the driver is right (§3.4), and Cassandra's order and answers
in hand-checked cases where it is not; full/transient flags follow §3.2/§3.3.
"""

from __future__ import annotations

import random
import uuid

import pytest

from ringflow.errors import ConfigurationError, ErrorCode
from ringflow.ring import (
    Host,
    NetworkTopologyStrategy,
    Replica,
    ReplicationFactor,
    RingError,
    SimpleStrategy,
    TokenMetadata,
    replication_strategy,
)

from ._driver_oracle import DriverRing, RandomRing, probe_tokens, random_ring

JAVA = "org.apache.cassandra.locator."


def host(name: str, dc: str = "dc1", rack: str = "rack1") -> Host:
    """``name`` like '1' or '2.3' becomes endpoint 127.0.0.1 / 127.0.2.3."""
    parts = name.split(".")
    endpoint = "127.0." + (".".join(parts) if len(parts) == 2 else f"0.{parts[0]}")
    return Host(uuid.uuid5(uuid.NAMESPACE_DNS, endpoint), endpoint, dc, rack)


# -- replication factors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "all_replicas", "transient", "full"),
    [("3", 3, 0, 3), ("3/1", 3, 1, 2), ("5/2", 5, 2, 3), ("1", 1, 0, 1), ("3/0", 3, 0, 3)],
)
def test_factor_parsing(text: str, all_replicas: int, transient: int, full: int) -> None:
    factor = ReplicationFactor.parse(text)
    assert (factor.all_replicas, factor.transient_replicas, factor.full_replicas) == (
        all_replicas,
        transient,
        full,
    )
    assert ReplicationFactor.parse(str(factor)) == factor


def test_factor_string_round_trip_and_ints() -> None:
    assert str(ReplicationFactor(3, 1)) == "3/1"
    assert str(ReplicationFactor(3)) == "3"
    assert ReplicationFactor.parse(4) == ReplicationFactor(4, 0)
    assert ReplicationFactor(3, 1).is_transient


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", "'abc' is not valid"),
        ("0", "'0' is not valid"),
        ("-1", "'-1' is not valid"),
        ("3/3", "transient replicas \\(3\\) must be fewer than all replicas \\(3\\)"),
        ("3/4", "transient replicas \\(4\\) must be fewer"),
        ("", "'' is not valid"),
        (" 3", "' 3' is not valid"),
        ("1.5", "'1.5' is not valid"),
        ("3/", "'3/' is not valid"),
        (0, "0 must be at least 1"),
        (-2, "-2 must be at least 1"),
        (True, "must be a string or int"),
        (3.0, "must be a string or int"),
    ],
)
def test_bad_factors_are_refused(value: object, message: str) -> None:
    with pytest.raises(RingError, match=message):
        ReplicationFactor.parse(value)  # type: ignore[arg-type]


# -- replication maps ---------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", JAVA])
def test_class_names_short_and_qualified(prefix: str) -> None:
    simple = replication_strategy({"class": prefix + "SimpleStrategy", "replication_factor": "3"})
    assert simple == SimpleStrategy(ReplicationFactor(3))
    nts = replication_strategy({"class": prefix + "NetworkTopologyStrategy", "dc1": "3", "dc2": 2})
    assert nts == NetworkTopologyStrategy.of({"dc1": 3, "dc2": 2})
    assert nts.total_replication_factor == ReplicationFactor(5)


def test_options_round_trip() -> None:
    for options in (
        {"class": "SimpleStrategy", "replication_factor": "3/1"},
        {"class": "NetworkTopologyStrategy", "dc1": "3", "dc2": "2/1"},
    ):
        strategy = replication_strategy(options)
        assert replication_strategy(strategy.options()) == strategy
        assert strategy.options()["class"] == JAVA + options["class"]


def test_nts_zero_dc_holds_no_replicas_and_replication_factor_expands() -> None:
    strategy = replication_strategy({"class": "NetworkTopologyStrategy", "dc1": "3", "dc2": "0"})
    assert strategy == NetworkTopologyStrategy.of({"dc1": 3})
    expanded = replication_strategy(
        {"class": "NetworkTopologyStrategy", "replication_factor": "3", "dc2": "1"},
        datacenters=["dc1", "dc2", "dc3"],
    )
    assert expanded.options() == {
        "class": JAVA + "NetworkTopologyStrategy",
        "dc2": "1",
        "dc1": "3",
        "dc3": "3",
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"class": "LocalStrategy"}, "unknown replication strategy class 'LocalStrategy'"),
        ({"class": JAVA + "EverywhereStrategy"}, "unknown replication strategy class"),
        ({"class": "com.example.SimpleStrategy", "replication_factor": "1"}, "unknown"),
        ({"replication_factor": "3"}, "needs a 'class'"),
        ({"class": "SimpleStrategy"}, "requires the option 'replication_factor'"),
        ({"class": "SimpleStrategy", "replication_factor": "3", "dc1": "3"}, "unrecognized"),
        ({"class": "SimpleStrategy", "replication_factor": "abc"}, "'abc' is not valid"),
        ({"class": "SimpleStrategy", "replication_factor": "0"}, "'0' is not valid"),
        ({"class": "SimpleStrategy", "replication_factor": "-1"}, "'-1' is not valid"),
        ({"class": "SimpleStrategy", "replication_factor": "3/3"}, "must be fewer"),
        ({"class": "NetworkTopologyStrategy", "dc1": "abc"}, "option 'dc1': .*'abc'"),
        ({"class": "NetworkTopologyStrategy", "dc1": "-1"}, "'-1' is not valid"),
        ({"class": "NetworkTopologyStrategy", "dc1": "0"}, "places no replica anywhere"),
        ({"class": "NetworkTopologyStrategy"}, "places no replica anywhere"),
        ({"class": "NetworkTopologyStrategy", "replication_factor": "3"}, "pass the cluster's"),
    ],
)
def test_bad_replication_maps_are_refused(options: dict[str, str], message: str) -> None:
    with pytest.raises(RingError, match=message):
        replication_strategy(options)


# -- the driver as oracle -----------------------------------------------------------------------


def compare_with_driver(ring: RandomRing, rng: random.Random) -> int:
    """Check every probe of one random ring; return how many NTS lookups were compared."""
    metadata = ring.token_metadata()
    driver = DriverRing(ring.tokens_by_host)
    first_factor = str(ring.factors_by_dc["dc1"])
    simple_keyspace = driver.keyspace("SimpleStrategy", {"replication_factor": first_factor})
    simple = replication_strategy({"class": "SimpleStrategy", "replication_factor": first_factor})
    nts_options = {dc: str(factor) for dc, factor in ring.factors_by_dc.items()}
    nts_keyspace = driver.keyspace("NetworkTopologyStrategy", nts_options)
    nts = replication_strategy({"class": "NetworkTopologyStrategy", **nts_options})
    compared = 0
    for probe in probe_tokens(rng, metadata.sorted_tokens, count=25):
        assert simple.replicas(probe, metadata) == driver.replicas(simple_keyspace, probe)
        ours = nts.replicas(probe, metadata)
        assert len(set(ours)) == len(ours)
        if ring.driver_trusted_for_nts():
            assert set(ours) == set(driver.replicas(nts_keyspace, probe))
            compared += 1
    return compared


def test_simple_and_nts_match_the_driver_on_random_rings() -> None:
    rng = random.Random(2024)
    compared = sum(compare_with_driver(random_ring(rng), rng) for _ in range(200))
    assert compared > 5000, "too few NTS comparisons: the generator lost its trusted rings"


def test_where_the_driver_is_wrong_its_duplicate_free_answers_still_agree() -> None:
    """§3.4: in risky rings the driver's mistakes all repeat a host; the rest must agree."""
    rng = random.Random(77)
    agreed = wrong = 0
    while agreed < 300:
        ring = random_ring(rng)
        if ring.driver_trusted_for_nts():
            continue
        metadata = ring.token_metadata()
        driver = DriverRing(ring.tokens_by_host)
        options = {dc: str(factor) for dc, factor in ring.factors_by_dc.items()}
        keyspace = driver.keyspace("NetworkTopologyStrategy", options)
        nts = replication_strategy({"class": "NetworkTopologyStrategy", **options})
        for probe in probe_tokens(rng, metadata.sorted_tokens, count=10):
            theirs = driver.replicas(keyspace, probe)
            if len(set(theirs)) < len(theirs):
                wrong += 1
                continue
            assert set(nts.replicas(probe, metadata)) == set(theirs)
            agreed += 1
    assert wrong > 0, "no risky configuration exercised the driver's known bug"


def test_transient_full_replicas_match_the_driver_where_comparable() -> None:
    """The driver places only full replicas (§3.3): compare our full subset, single tokens.

    Only where every DC has one rack or at least RF racks: otherwise Cassandra's walk (rack
    repeats accepted as met, flagged full while enough replicas remain) and the driver's walk
    for the smaller full RF legitimately pick different full replicas.
    """
    rng = random.Random(9)
    compared = 0
    while compared < 400:
        ring = random_ring(rng)
        racks, factors = ring.racks_by_dc, ring.factors_by_dc
        if ring.vnodes != 1 or any(1 < racks[dc] < factors[dc] for dc in factors):
            continue
        metadata = ring.token_metadata()
        driver = DriverRing(ring.tokens_by_host)
        options = {dc: f"{f}/1" if f > 1 else str(f) for dc, f in ring.factors_by_dc.items()}
        for strategy_class, strategy_options in (
            ("NetworkTopologyStrategy", options),
            ("SimpleStrategy", {"replication_factor": options["dc1"]}),
        ):
            keyspace = driver.keyspace(strategy_class, strategy_options)
            strategy = replication_strategy({"class": strategy_class, **strategy_options})
            for probe in probe_tokens(rng, metadata.sorted_tokens, count=10):
                plan = strategy.replica_plan(probe, metadata)
                full = [replica.host for replica in plan if replica.is_full]
                theirs = driver.replicas(keyspace, probe)
                if strategy_class == "SimpleStrategy":
                    assert full == theirs
                else:
                    assert set(full) == set(theirs)
                compared += 1


# -- hand-checked NetworkTopologyStrategy cases (Cassandra's algorithm, §3.2 / §3.4) -------------


def test_minimal_reproducer_of_the_driver_bug_gets_cassandras_answer() -> None:
    one, two, three, four = host("1"), host("2"), host("3", rack="rack2"), host("4")
    metadata = TokenMetadata({one: [-400, 0], two: [-300, 100], three: [200], four: [300]})
    strategy = replication_strategy({"class": "NetworkTopologyStrategy", "dc1": "4"})
    assert strategy.replicas(-500, metadata) == [one, two, three, four]


def test_two_dc_example_in_cassandras_interleaved_order() -> None:
    dc1 = [host(f"1.{n}", "dc1", rack) for n, rack in enumerate(["r1", "r1", "r2", "r2", "r3"], 1)]
    dc2 = [host(f"2.{n}", "dc2", rack) for n, rack in enumerate(["r1", "r2", "r1"], 1)]
    dc1_tokens = [-9 * 10**18, -6 * 10**18, -2 * 10**18, 10**18, 5 * 10**18]
    dc2_tokens = [-4 * 10**18, 3 * 10**18, 7 * 10**18]
    tokens = {h: [t] for h, t in zip(dc1 + dc2, dc1_tokens + dc2_tokens, strict=True)}
    metadata = TokenMetadata(tokens)
    options = {"class": "NetworkTopologyStrategy", "dc1": "3", "dc2": "2"}
    key_int_1_token = -4069959284402364209
    expected = [dc2[0], dc1[2], dc2[1], dc1[4], dc1[0]]
    assert replication_strategy(options).replicas(key_int_1_token, metadata) == expected
    driver = DriverRing(tokens)
    keyspace = driver.keyspace("NetworkTopologyStrategy", {"dc1": "3", "dc2": "2"})
    assert set(driver.replicas(keyspace, key_int_1_token)) == set(expected)


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        (0, ["A", "B", "D"]),  # B repeats rack1 (1 repeat allowed: RF 3 - 2 racks); C may not
        (25, ["D", "A", "B"]),  # after the wrap: D (rack2), A (new rack1), B (the repeat)
        (15, ["C", "D", "A"]),
    ],
)
def test_fewer_racks_than_rf_takes_the_first_repeats_met(token: int, expected: list[str]) -> None:
    hosts = {
        "A": host("1"),
        "B": host("2"),
        "C": host("3"),
        "D": host("4", rack="rack2"),
    }
    metadata = TokenMetadata(
        {hosts["A"]: [0], hosts["B"]: [10], hosts["C"]: [20], hosts["D"]: [30]}
    )
    strategy = replication_strategy({"class": "NetworkTopologyStrategy", "dc1": "3"})
    assert strategy.replicas(token, metadata) == [hosts[name] for name in expected]


def test_racks_at_least_rf_take_distinct_racks() -> None:
    a, b = host("1", rack="r1"), host("2", rack="r1")
    c, d = host("3", rack="r2"), host("4", rack="r3")
    metadata = TokenMetadata({a: [0], b: [10], c: [20], d: [30]})
    strategy = replication_strategy({"class": "NetworkTopologyStrategy", "dc1": "2"})
    assert strategy.replicas(5, metadata) == [b, c]
    assert strategy.replicas(25, metadata) == [d, a]


def test_dc_smaller_than_its_rf_and_absent_dcs() -> None:
    a, b = host("1.1", "dc1"), host("1.2", "dc1")
    c, d, e = host("2.1", "dc2"), host("2.2", "dc2"), host("2.3", "dc2")
    metadata = TokenMetadata({a: [0], c: [5], b: [10], d: [15], e: [20]})
    strategy = replication_strategy(
        {"class": "NetworkTopologyStrategy", "dc1": "3", "dc2": "2", "dc9": "3"}
    )
    assert strategy.replicas(1, metadata) == [c, b, d, a]


def test_transient_flags_of_simple_strategy() -> None:
    a, b, c, d = host("1"), host("2"), host("3"), host("4")
    metadata = TokenMetadata({a: [0], b: [10], c: [20], d: [30]})
    strategy = replication_strategy({"class": "SimpleStrategy", "replication_factor": "3/1"})
    assert strategy.replica_plan(5, metadata) == [
        Replica(b, True),
        Replica(c, True),
        Replica(d, False),
    ]
    replica_host, is_full = strategy.replica_plan(5, metadata)[2]
    assert (replica_host, is_full) == (d, False)


def test_transient_flags_of_nts_per_dc() -> None:
    a, b, c, d = (host(f"1.{n}", "dc1") for n in range(1, 5))
    e, f = host("2.1", "dc2"), host("2.2", "dc2")
    metadata = TokenMetadata({a: [0], e: [5], b: [10], f: [15], c: [20], d: [30]})
    strategy = replication_strategy(
        {"class": "NetworkTopologyStrategy", "dc1": "3/1", "dc2": "2/1"}
    )
    assert strategy.replica_plan(0, metadata) == [
        Replica(a, True),
        Replica(e, True),
        Replica(b, True),
        Replica(f, False),
        Replica(c, False),
    ]


def test_transients_shrink_when_the_dc_is_smaller_than_its_rf() -> None:
    """transients = max(T - (N - nodes), 0): 3/1 on two nodes leaves both full (§3.2)."""
    a, b = host("1"), host("2")
    metadata = TokenMetadata({a: [0], b: [10]})
    strategy = replication_strategy({"class": "NetworkTopologyStrategy", "dc1": "3/1"})
    assert strategy.replica_plan(0, metadata) == [Replica(a, True), Replica(b, True)]
    simple = replication_strategy({"class": "SimpleStrategy", "replication_factor": "3/1"})
    assert simple.replica_plan(0, metadata) == [Replica(a, True), Replica(b, True)]


def test_simple_strategy_rf_above_the_node_count_gives_every_node() -> None:
    a, b = host("1"), host("2")
    metadata = TokenMetadata({a: [0, 20], b: [10]})
    strategy = replication_strategy({"class": "SimpleStrategy", "replication_factor": "5"})
    assert strategy.replicas(15, metadata) == [a, b]


def test_lookups_on_an_empty_ring_are_refused() -> None:
    strategy = replication_strategy({"class": "SimpleStrategy", "replication_factor": "1"})
    with pytest.raises(RingError, match="ring is empty"):
        strategy.replicas(0, TokenMetadata())
    with pytest.raises(RingError, match="outside the int64 range"):
        strategy.replicas(2**63, TokenMetadata({host("1"): [0]}))


def test_ring_errors_are_configuration_errors_with_the_config_error_code() -> None:
    with pytest.raises(ConfigurationError) as caught:
        replication_strategy({"class": "SimpleStrategy", "replication_factor": "0"})
    assert isinstance(caught.value, RingError)
    assert caught.value.code == ErrorCode.CONFIG_ERROR
