"""The builders' fast constructors make the same values as the ordinary ones.

``Cell._unchecked`` and ``Row._owning`` skip the frozen dataclass ``__init__`` (and, for a row,
the copy of its cells): the objects must still equal, hash like, and stay as read-only as those
built the ordinary way.
"""

from __future__ import annotations

from types import MappingProxyType

import pytest

from ringflow.schema import NO_DELETION_TIME, Cell, ColumnData, LivenessInfo, Row


def test_unchecked_cell_is_the_cell() -> None:
    for fields in ((5, b"v", 0, NO_DELETION_TIME), (5, b"", 0, 100), (5, b"v", 30, 130)):
        fast, ordinary = Cell._unchecked(*fields), Cell(*fields)
        assert fast == ordinary and hash(fast) == hash(ordinary) and repr(fast) == repr(ordinary)
        assert fast.path is None and type(fast) is Cell
        with pytest.raises(AttributeError):
            fast.value = b"other"  # type: ignore[misc]


def test_owning_row_is_the_row_and_read_only() -> None:
    cells: dict[str, ColumnData] = {"a": Cell.live(5, b"x"), "b": Cell.tombstone(6, 100)}
    fast = Row._owning((b"k",), LivenessInfo(5), None, cells)
    ordinary = Row((b"k",), LivenessInfo(5), None, dict(cells))
    assert fast == ordinary and hash(fast) == hash(ordinary) and repr(fast) == repr(ordinary)
    assert isinstance(fast.cells, MappingProxyType)
    with pytest.raises(TypeError):
        fast.cells["c"] = Cell.live(1, b"")  # type: ignore[index]
    with pytest.raises(AttributeError):
        fast.clustering = ()  # type: ignore[misc]
