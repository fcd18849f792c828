"""The node's ``CALL NodeOps.repair(...)`` / ``CALL NodeOps.repairWithOptions(...)``: a CQL
client asks the node it is connected to to coordinate a repair (``ringflow.cluster`` repair
call core for the arguments and answers; :class:`RepairService` runs it, one repair at a time).

A call runs on the statement thread, outside the processor's lock: it hands the repair to the
event loop (checked there first: an unknown keyspace or table, or a full queue, is the call's
error) and either answers at once with the repair id (async) or waits for the summary, at most
``RUN_TIMEOUT_S`` (the repair goes on if the client gives up first; its outcome is in
``system_distributed.parent_repair_history`` under the id, as for any repair).
"""

from __future__ import annotations

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
from ringflow.cluster.service._repair import RUN_TIMEOUT_S, RepairService
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


def _body(
    service: RepairService, parse: Callable[[Mapping[str, object]], RepairCall]
) -> Callable[[Mapping[str, object]], list[tuple[str, str, str | None]]]:
    def run(arguments: Mapping[str, object]) -> list[tuple[str, str, str | None]]:
        call = parse(arguments)
        repair_id = str(call.options.id)
        outcome = service.start(call.options)
        if not call.wait:
            return [call_answer(repair_id, None)]
        return [call_answer(repair_id, outcome.result(RUN_TIMEOUT_S))]

    return run
