"""A channel of ``ringflow replicate`` that waits for its destination (issue 15), pure: it looks
again after a delay that doubles from ``RECHECK_MIN_S`` up to its bound, and a destination built
without a problem leaves it running.
"""

from __future__ import annotations

import dataclasses

from ringflow.pipeline._destinations import Destination
from ringflow.pipeline._replicate_channels import RECHECK_MIN_S, ChannelRun
from ringflow.schema import INT, TEXT, Table

V1 = Table.create("ks", "t", partition_key=[("id", INT)], regular=[("name", TEXT)])


def test_a_waiting_channel_looks_again_later_and_later_up_to_its_bound() -> None:
    destination = Destination("hub", "hub", "ringflow://h", "ringflow-hub", {}, "ks.t")
    run = ChannelRun(dataclasses.replace(destination, blocked="run: ALTER ..."), V1)
    run.recheck_max_s = 5.0
    assert run.waiting == "run: ALTER ..."
    delays = []
    now = 100.0
    for _ in range(6):
        run.wait(now)
        delays.append(run.recheck_at_s - now)
        assert not run.due(now) and run.due(run.recheck_at_s)
    assert delays == [RECHECK_MIN_S, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert ChannelRun(destination, V1).waiting is None
