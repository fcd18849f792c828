"""Fuzzers of ringflow's wire protocols, run against real node processes (issue 16).

Targets (``python -m fuzz run TARGET -n N --seed S``; ``make fuzz N=...``):

* ``native``: raw native-protocol frames (random, real driver frames mutated, oversized fields)
  to one node.
* ``cql``: CQL statements over a schema with every type, mutated at token level, to one node.
* ``internode``: internode messages of every verb, spoofed sources and truncated frames, to a
  3-node cluster.

Each target's module docstring lists its invariants, one line each, as the code checks them.
A failing input is saved as ``fuzz/crashes/<target>-<hash>.bin`` (with its seed and index) and
replays with ``python -m fuzz replay FILE``.
"""
