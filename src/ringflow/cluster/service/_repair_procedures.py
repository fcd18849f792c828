"""The node's ``CALL NodeOps.repair(...)`` / ``CALL NodeOps.repairWithOptions(...)``: a CQL
client asks the node it is connected to to coordinate a repair (``ringflow.cluster`` repair
call core for the arguments and answers; :class:`RepairService` runs it, one repair at a time).

A call runs on the statement thread, outside the processor's lock: it hands the repair to the
event loop (checked there first: an unknown keyspace or table, or a full queue, is the call's
error) and answers with a future, no thread waiting: the repair id once it is queued (async),
or the summary once it is over, at most ``RUN_TIMEOUT_S`` (past that the call fails, the
repair goes on; as when the client gives up first, its outcome is in
``system_distributed.parent_repair_history`` under the id, as for any repair).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
from collections.abc import Callable, Mapping

from ringflow.cluster._repair_call import (
    NAMESPACE,
    REPAIR,
    REPAIR_SIGNATURES,
    REPAIR_WITH_OPTIONS,
    REPAIR_WITH_OPTIONS_SIGNATURES,
    RESULT_COLUMNS,
    RepairCall,
    call_answer,
    repair_call,
    repair_with_options_call,
)
from ringflow.cluster.service._backend import chain
from ringflow.cluster.service._repair import RUN_TIMEOUT_S, RepairError, RepairService
from ringflow.cql import Procedure


def register_repair_procedures(service: RepairService) -> None:
    """Give ``service``'s node the repair procedures."""
    processor = service.cluster.processor
    for name, signatures, parse in (
        (REPAIR, REPAIR_SIGNATURES, repair_call),
        (REPAIR_WITH_OPTIONS, REPAIR_WITH_OPTIONS_SIGNATURES, repair_with_options_call),
    ):
        processor.register_procedure(
            Procedure(
                NAMESPACE,
                name,
                signatures,
                RESULT_COLUMNS,
                _body(service, parse),
            )
        )


Answer = list[tuple[str, str, str | None]]


def _body(
    service: RepairService, parse: Callable[[Mapping[str, object]], RepairCall]
) -> Callable[[Mapping[str, object]], concurrent.futures.Future[Answer]]:
    def run(arguments: Mapping[str, object]) -> concurrent.futures.Future[Answer]:
        call = parse(arguments)
        options = dataclasses.replace(call.options, id=service.new_id())
        repair_id = str(options.id)
        queued, outcome = service.start(options)
        answer: concurrent.futures.Future[Answer] = concurrent.futures.Future()
        if not call.wait:
            chain(queued, answer, lambda _queued: [call_answer(repair_id, None)])
            return answer
        chain(outcome, answer, lambda summary: [call_answer(repair_id, summary)])

        def expire() -> None:
            if not answer.done():
                message = (
                    f"repair {repair_id} still runs after {RUN_TIMEOUT_S:.0f} s; its outcome "
                    "will be in system_distributed.parent_repair_history"
                )
                answer.set_exception(RepairError(message))

        def watch() -> None:
            timer = service.loop.call_later(RUN_TIMEOUT_S, expire)

            def cancel(_done: object) -> None:
                with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to cancel
                    service.loop.call_soon_threadsafe(timer.cancel)

            answer.add_done_callback(cancel)

        service.loop.call_soon_threadsafe(watch)
        return answer

    return run
