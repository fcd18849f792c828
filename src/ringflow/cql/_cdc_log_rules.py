"""What DDL may do to a CDC log table, and to a table that only has a log table's name. Pure.

Scylla's rules (``cdc/log.cc`` ``on_before_update_column_family``,
``check_that_cdc_log_table_does_not_exist``, ``check_for_attempt_to_create_nested_cdc_log``;
``cql3/statements/alter_table_statement.cc``), re-expressed:

* A table is a CDC log table when its base ``<name>`` exists and the table is the one CDC made
  for it: ringflow gives a log the id derived from its base's id (``ringflow.cdc``), as Scylla
  marks its logs with the CDC partitioner. A log whose base has CDC off stays a log ("detached")
  until it is dropped, and is reattached when CDC comes back on.
* Any other table may be called ``<x>_scylla_cdc_log`` (Scylla allows it); enabling CDC on a
  base whose log name such a table holds is Invalid: "Cannot create CDC log table for table k.t
  because a table of name k.t_scylla_cdc_log already exists".
* ``ALTER TABLE <log> WITH ...`` sets the log's properties (comment, compaction, caching,
  gc_grace_seconds, default_time_to_live, ...), as in Scylla, except ``cdc`` (Invalid: "Cannot
  create a CDC log for a table k.t_scylla_cdc_log, because creating nested CDC logs is not
  allowed") and ``tombstone_gc`` in ``repair`` mode (Scylla's message); adding, dropping or
  renaming a log's columns is Invalid with Scylla's messages (the base's columns drive them).
"""

from __future__ import annotations

from ringflow.cdc import cdc_log_table
from ringflow.cql._ast import (
    AddColumns,
    AlterTableAction,
    AlterTableProperties,
    DropColumns,
    OptionMap,
    RenameColumns,
)
from ringflow.errors import InvalidRequest
from ringflow.schema import CDC_LOG_SUFFIX, SchemaError, SchemaState, Table

_COLUMNS_OF_ATTACHED_LOG = (
    "You cannot modify the set of columns of a CDC log table directly. Modify the base table "
    "instead."
)
_COLUMNS_OF_DETACHED_LOG = (
    "You cannot modify the set of columns of a CDC log table directly. Although the base table "
    "has deactivated CDC, this table will continue being a CDC log table until it is dropped. If "
    "you want to modify the columns in it, you can only do that by reenabling CDC on the base "
    "table, which will reattach this log table. Then you will be able to modify the columns in "
    "the base table, and that will have effect on the log table too. Modifying the columns of a "
    "CDC log table directly is never allowed."
)
_RENAME_IN_DETACHED_LOG = (
    "You cannot rename a column of a CDC log table. Although the base table has deactivated CDC, "
    "this table will continue being a CDC log table until it is dropped."
)


def _is_log_for(base: Table, table: Table) -> bool:
    try:
        return cdc_log_table(base).id == table.id
    except SchemaError:  # the base cannot have a log: this table is not its log
        return False


def cdc_log_base(state: SchemaState, table: Table) -> Table | None:
    """The base table whose CDC log ``table`` is (attached or detached), or None."""
    if not table.name.endswith(CDC_LOG_SUFFIX):
        return None
    base = state.tables.get((table.keyspace, table.name[: -len(CDC_LOG_SUFFIX)]))
    return base if base is not None and _is_log_for(base, table) else None


def check_log_name_free(state: SchemaState, base: Table) -> None:
    """Invalid if enabling CDC on ``base`` would meet a table that holds its log's name and is
    not its log (module rules)."""
    existing = state.tables.get((base.keyspace, base.cdc_log_name))
    if existing is not None and not _is_log_for(base, existing):
        raise InvalidRequest(
            f"Cannot create CDC log table for table {base.keyspace}.{base.name} because a table "
            f"of name {base.keyspace}.{base.cdc_log_name} already exists"
        )


def check_log_alter(base: Table, log: Table, action: AlterTableAction) -> None:
    """Invalid for what an ALTER TABLE of the CDC log ``log`` of ``base`` may not do."""
    attached = base.options.cdc.enabled
    if isinstance(action, AddColumns | DropColumns):
        raise InvalidRequest(_COLUMNS_OF_ATTACHED_LOG if attached else _COLUMNS_OF_DETACHED_LOG)
    if isinstance(action, RenameColumns):
        raise InvalidRequest(
            "Cannot rename a column of a CDC log table." if attached else _RENAME_IN_DETACHED_LOG
        )
    assert isinstance(action, AlterTableProperties)
    for item in action.properties.items:
        if item.name == "cdc":
            raise InvalidRequest(
                f"Cannot create a CDC log for a table {log.keyspace}.{log.name}, because "
                "creating nested CDC logs is not allowed"
            )
        if item.name == "tombstone_gc" and isinstance(item.value, OptionMap):
            mode = {key.lower(): str(value) for key, value in item.value.entries}.get("mode")
            if mode is not None and mode.lower() == "repair":
                raise InvalidRequest(
                    "The 'repair' mode for tombstone_gc is not allowed on CDC log tables."
                )
