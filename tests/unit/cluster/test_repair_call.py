"""``CALL NodeOps.repair`` / ``repairWithOptions`` arguments as repairs (``cluster._repair_call``):
the management API's argument order, ringflow's options, and what is refused before anything
starts."""

from __future__ import annotations

import pytest

from ringflow.cluster._repair_call import (
    REPAIR_SIGNATURES,
    call_answer,
    repair_call,
    repair_with_options_call,
)
from ringflow.cluster._repair_plan import RepairSummary
from ringflow.errors import InvalidRequest


def test_three_arguments_wait_and_name_the_tables() -> None:
    call = repair_call({"keyspace": "shop", "tables": ["orders", "orders", "items"], "full": True})
    assert call.wait
    assert (call.options.keyspace, call.options.tables) == ("shop", ("orders", "items"))
    assert call.options.subrange() is None and not call.options.preview
    assert [len(signature) for signature in REPAIR_SIGNATURES] == [3, 8]


def test_eight_arguments_are_async_unless_told_and_take_one_ring_range() -> None:
    arguments: dict[str, object] = {
        "keyspace": "shop", "tables": None, "full": True, "async": None,
        "parallelism": "DC_PARALLEL", "datacenters": [], "ringRanges": "-100:250",
        "repairThreads": 2,
    }  # fmt: skip
    call = repair_call(arguments)
    assert not call.wait and call.options.tables == ()
    assert (call.options.start_token, call.options.end_token) == (-100, 250)
    assert repair_call({**arguments, "async": False}).wait


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"keyspace": None, "full": True}, "keyspace must be given"),
        ({"keyspace": "k", "full": False}, "incremental repair is not supported"),
        ({"keyspace": "k", "full": True, "parallelism": "fast"}, "unknown repair parallelism"),
        ({"keyspace": "k", "full": True, "datacenters": ["dc1"]}, "datacenters"),
        ({"keyspace": "k", "full": True, "repairThreads": 0}, "at least 1"),
        ({"keyspace": "k", "full": True, "ringRanges": "1:5,9:12"}, "one ring range"),
        ({"keyspace": "k", "full": True, "ringRanges": "15"}, "is not 'start:end'"),
        ({"keyspace": "k", "full": True, "ringRanges": "9:3"}, "must be below"),
        ({"keyspace": "k", "full": True, "ringRanges": f"0:{2**63}"}, "Murmur3 token bounds"),
        ({"keyspace": "k", "tables": [""], "full": True}, "table name is empty"),
    ],
)
def test_what_ringflow_does_not_do_is_refused(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        repair_call(arguments)


def test_options_map_takes_every_cli_option() -> None:
    call = repair_with_options_call(
        {
            "keyspace": "shop",
            "tables": ["orders"],
            "options": {
                "primary_range": "TRUE", "preview": "true", "async": "true",
                "start_token": "-5", "end_token": "7",
            },
        }
    )  # fmt: skip
    options = call.options
    assert not call.wait and options.primary_range and options.preview
    assert (options.start_token, options.end_token) == (-5, 7)
    assert repair_with_options_call({"keyspace": "shop", "tables": None, "options": None}).wait
    for bad, message in (
        ({"fast": "true"}, "unknown repair option"),
        ({"preview": "yes"}, "'true' or 'false'"),
        ({"start_token": "x", "end_token": "1"}, "is not a token"),
        ({"end_token": "1"}, "needs both"),
    ):
        with pytest.raises(InvalidRequest, match=message):
            repair_with_options_call({"keyspace": "k", "tables": None, "options": bad})


def test_the_answer_row_says_how_it_went() -> None:
    assert call_answer("id", None) == ("id", "started", None)
    summary = RepairSummary("id", "shop", False, "127.0.0.1:7000")
    assert call_answer("id", summary)[1] == "finished"
    assert call_answer("id", RepairSummary("id", "shop", True, "x"))[1] == "previewed"
    summary.error = "boom"
    _, status, text = call_answer("id", summary)
    assert status == "failed" and text is not None and "boom" in text
