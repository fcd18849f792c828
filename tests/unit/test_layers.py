"""The layers of ARCHITECTURE.md hold, and cannot get worse (a ratchet).

Lower layers never import higher ones, in this order (``replication`` is a pure core the store
uses, so it sits below ``storage``): errors, ring, schema, cdc, replication, storage, cql,
runtime, cluster, node, sim, pipeline, cli. Packages talk through their public ``__init__``
names, never ``from ringflow.<other>._private import``.

What already broke the rules when this test was written is listed below, each one a debt. A new
break fails the test; so does a listed one that is gone, so the list only shrinks.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import ringflow

LAYERS = (
    "errors",
    "ring",
    "schema",
    "cdc",
    "replication",
    "storage",
    "cql",
    "runtime",
    "cluster",
    "node",
    "sim",
    "pipeline",
    "cli",
)
UPWARD_KNOWN: frozenset[tuple[str, str]] = frozenset()
"""None left: the cluster service's imports of ``node`` ended when the node process moved to
``ringflow.node`` (issue 21 §2)."""
PRIVATE_KNOWN: frozenset[tuple[str, str]] = frozenset()
"""None left (the CLI takes the Spark jobs through ``ringflow.pipeline``'s lazy names)."""


def imports() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(file, higher layer) pairs and (package, private module of another package) pairs,
    parsed in a fresh interpreter: in a pytest worker that ran the suite's other files,
    CPython 3.11's ``ast.parse`` can raise "AST constructor recursion depth mismatch" (its
    recursion bookkeeping disturbed by code the garbage collector runs mid-parse)."""
    script = (
        "import json, tests.unit.test_layers as t; "
        "u, p = t._imports(); print(json.dumps([sorted(u), sorted(p)]))"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    upward, private = json.loads(done.stdout)
    return {tuple(pair) for pair in upward}, {tuple(pair) for pair in private}


def _imports() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    rank = {name: index for index, name in enumerate(LAYERS)}
    root = Path(ringflow.__file__).parent
    upward: set[tuple[str, str]] = set()
    private: set[tuple[str, str]] = set()
    for path in sorted(root.rglob("*.py")):
        package = path.relative_to(root).parts[0].removesuffix(".py")
        if package not in rank:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            parts = node.module.split(".")
            if parts[0] != "ringflow" or len(parts) < 2 or parts[1] not in rank:
                continue
            if rank[parts[1]] > rank[package]:
                upward.add((str(path.relative_to(root)), parts[1]))
            if parts[1] != package and any(part.startswith("_") for part in parts[2:]):
                private.add((package, node.module))
    return upward, private


def test_no_layer_imports_a_higher_one_beyond_the_known_debts() -> None:
    upward, _private = imports()
    assert upward - UPWARD_KNOWN == set(), "new imports of a higher layer"
    assert UPWARD_KNOWN - upward == set(), "fixed: take these off UPWARD_KNOWN"


def test_packages_use_each_others_public_names_beyond_the_known_debts() -> None:
    _upward, private = imports()
    assert private - PRIVATE_KNOWN == set(), "new imports of another package's private module"
    assert PRIVATE_KNOWN - private == set(), "fixed: take these off PRIVATE_KNOWN"
