"""``SELECT *`` builds each row from the key and the value columns in Cassandra's order without
a getter per column; it must answer exactly what the same columns named one by one answer, for
clustered rows, static values, nulls and a partition's static-only row."""

from __future__ import annotations

from pathlib import Path

from tests.unit.cql._exec_harness import node_with_keyspace

NAMED = "SELECT a, b, c1, c2, s1, s2, v1, v2, v3 FROM t"


def test_star_rows_equal_the_named_columns_in_select_order(tmp_path: Path) -> None:
    node = node_with_keyspace(tmp_path)
    node.ok(
        "CREATE TABLE t (a int, b text, c1 int, c2 text, s2 int static, s1 text static, "
        "v3 int, v1 text, v2 list<int>, PRIMARY KEY ((a, b), c1, c2))"
    )
    node.ok("INSERT INTO t (a, b, c1, c2, v1, v2, v3) VALUES (1, 'x', 1, 'p', 'one', [1, 2], 3)")
    node.ok("INSERT INTO t (a, b, c1, c2, v3) VALUES (1, 'x', 2, 'q', 4)")  # v1, v2 null
    node.ok("INSERT INTO t (a, b, s1, s2) VALUES (1, 'x', 'static', 9)")
    node.ok("INSERT INTO t (a, b, s1) VALUES (2, 'y', 'static only')")  # no clustered row
    node.ok("INSERT INTO t (a, b, c1, c2) VALUES (3, 'z', 5, 'r')")  # marker only

    star = node.ok("SELECT * FROM t")
    named = node.ok(NAMED)
    assert sorted(star, key=repr) == sorted(named, key=repr)
    assert len(star) == 4
    assert (2, "y", None, None, "static only", None, None, None, None) in star
    assert (1, "x", 1, "p", "static", 9, "one", [1, 2], 3) in star
    assert (3, "z", 5, "r", None, None, None, None, None) in star
