"""A fixed-seed sample of the three fuzzers of ``fuzz/`` (issue 16), against real processes.

Each target runs once per module (a real node, or a real 3-node cluster for internode) with a
fixed seed: thousands of native frames, a thousand+ CQL statements, thousands of internode
messages. Each test asserts ONE invariant over the whole sample (no failure counted), so a
regression names the invariant; the counts show the sample was meaningful. Long runs:
``make fuzz N=1000000``; a failing input is saved and replays with ``python -m fuzz replay``.

Before the issue 16 fixes six of these checks failed: the native ones of answers and node logs
(oversized [string] answers never sent) and the internode ones of cluster views, QUORUM and
forged messages (a spoofed connection partitioned the cluster; forged writes and schema were
applied).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from fuzz._core import Crash, FuzzInput, RunOptions, Stats, decode_crash, encode_crash, run
from fuzz.cql import CqlTarget
from fuzz.internode import InternodeTarget
from fuzz.native import NativeTarget

SEED = 16
NATIVE_INPUTS = 550
CQL_INPUTS = 1200
INTERNODE_INPUTS = 300
MAX_FAILURES = {"native": 1000, "cql": 4, "internode": 6}
"""A sample stops after this many failures (a CQL hang costs its deadline, an internode failure
a cluster restart); native failures cost nothing, so its sample always runs whole."""


def _sample(target: NativeTarget | CqlTarget | InternodeTarget, count: int, workdir: Path) -> Stats:
    environment = target.environment(workdir)
    try:
        options = RunOptions(
            count, SEED, crash_dir=workdir / "crashes", max_failures=MAX_FAILURES[target.name]
        )
        stats = run(target, environment, options)
    finally:
        environment.close()
    print(stats.summary())
    return stats


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stats]:
    yield _sample(NativeTarget(), NATIVE_INPUTS, tmp_path_factory.mktemp("native"))


@pytest.fixture(scope="module")
def cql(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stats]:
    yield _sample(CqlTarget(), CQL_INPUTS, tmp_path_factory.mktemp("cql"))


@pytest.fixture(scope="module")
def internode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stats]:
    yield _sample(InternodeTarget(), INTERNODE_INPUTS, tmp_path_factory.mktemp("internode"))


def _no_failure(stats: Stats, invariant: str) -> None:
    assert stats.failures[invariant] == 0, stats.summary()


# -- determinism and crash files (no processes) ------------------------------------------------


@pytest.mark.parametrize("target", [NativeTarget(), CqlTarget(), InternodeTarget()])
def test_a_seed_reproduces_the_input_sequence(
    target: NativeTarget | CqlTarget | InternodeTarget,
) -> None:
    first, second, other = target.inputs(7), target.inputs(7), target.inputs(8)
    ours = [next(first) for _ in range(200)]
    assert ours == [next(second) for _ in range(200)]
    assert ours != [next(other) for _ in range(200)]


def test_a_crash_file_round_trips() -> None:
    rng = random.Random(1)
    inputs = tuple(
        FuzzInput(rng.randbytes(rng.randint(0, 300)), "k", rng.randrange(3)) for _ in range(5)
    )
    crash = Crash("internode", 3, 17, "an invariant", "what happened", inputs)
    decoded = decode_crash(encode_crash(crash))
    assert decoded.inputs == tuple(FuzzInput(i.data, i.kind, i.node) for i in inputs)
    assert (decoded.target, decoded.seed, decoded.index, decoded.invariant) == (
        "internode", 3, 17, "an invariant",
    )  # fmt: skip


# -- native frames -----------------------------------------------------------------------------


def test_native_sample_is_meaningful(native: Stats) -> None:
    assert native.messages >= 2000, native.summary()
    assert native.answers["Result"] > 100 and native.answers["ERROR 0x000a ProtocolException"] > 100
    assert native.probes >= 1


def test_native_answer_or_close(native: Stats) -> None:
    _no_failure(native, "answer or close within the deadline")


def test_native_never_server_error(native: Stats) -> None:
    _no_failure(native, "never ServerError 0x0000")


def test_native_every_request_frame_gets_an_answer(native: Stats) -> None:
    _no_failure(native, "every request frame gets an answer on its stream")


def test_native_answers_are_whole_frames_the_driver_decodes(native: Stats) -> None:
    _no_failure(native, "every byte answered is a whole response frame")
    _no_failure(native, "every answer decodes with the real driver")
    _no_failure(native, "no answer without a request")


def test_native_node_stays_up_and_serves_the_driver(native: Stats) -> None:
    _no_failure(native, "the node process stays alive")
    _no_failure(native, "the node accepts connections")
    _no_failure(native, "a health probe through the real driver works")


def test_native_node_logs_no_unexpected_exception(native: Stats) -> None:
    _no_failure(native, "the node logs no unexpected exception")


# -- CQL statements ----------------------------------------------------------------------------


def test_cql_sample_is_meaningful(cql: Stats) -> None:
    assert cql.inputs >= 1000 or sum(cql.failures.values()) >= MAX_FAILURES["cql"], cql.summary()
    assert cql.answers["ERROR 0x2000 SyntaxException"] > 100 and cql.answers["Result"] > 50


def test_cql_answer_within_the_deadline(cql: Stats) -> None:
    _no_failure(cql, "answer or close within the deadline")


def test_cql_never_server_error(cql: Stats) -> None:
    _no_failure(cql, "never ServerError 0x0000")


def test_cql_statements_never_close_the_connection(cql: Stats) -> None:
    _no_failure(cql, "a well-framed statement never closes the connection")
    _no_failure(cql, "every answer decodes with the real driver")


def test_cql_node_stays_up_and_serves_the_driver(cql: Stats) -> None:
    _no_failure(cql, "the node process stays alive")
    _no_failure(cql, "a health probe through the real driver works")


def test_cql_node_logs_no_unexpected_exception(cql: Stats) -> None:
    _no_failure(cql, "the node logs no unexpected exception")


# -- internode messages ------------------------------------------------------------------------


def test_internode_sample_is_meaningful(internode: Stats) -> None:
    assert internode.messages >= 2000, internode.summary()
    assert len(internode.kinds) >= 15  # every kind of connection, with every identity


def test_internode_never_hangs_and_nodes_stay_alive(internode: Stats) -> None:
    _no_failure(internode, "never hang: the connection and its bytes are taken within the deadline")
    _no_failure(internode, "every node process stays alive")
    _no_failure(internode, "every node accepts internode connections")


def test_internode_cluster_stays_up_and_serves_quorum(internode: Stats) -> None:
    _no_failure(internode, "cluster views stay UP: every node sees every node UP")
    _no_failure(internode, "QUORUM write+read through each node works")


def test_internode_forged_messages_change_nothing(internode: Stats) -> None:
    _no_failure(internode, "no forged write is applied: fz.canary is empty")
    _no_failure(internode, "no forged schema is applied: every node keeps its keyspaces and tables")
    _no_failure(internode, "no node logs an unexpected exception")
