"""``ringflow lake``: maintenance of the lakehouse destinations (issue 19).

    ringflow lake compact --to delta:DIR | --to iceberg:CATALOG#namespace.table
    ringflow lake expire  --to ... [--retention-hours H]      (Delta: vacuum, default 168 = 7 days)
    ringflow lake expire  --to ... [--older-than-days D]      (Iceberg: default 5, keeps the newest)

``compact`` bins small files (Delta ``optimize.compact``; Iceberg: each partition held in several
files rewritten as one); ``expire`` removes what no recent version needs (Delta ``vacuum``;
Iceberg: snapshots older than the age, the newest always kept). Both act on the change log and
its current-state table and print what they did as JSON. A URL that names no ringflow tables
exits with code 2 and one line saying why.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from ringflow.cli import EXIT_OK

if TYPE_CHECKING:
    from ringflow.cli import Subcommands


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "lake", help="compact or expire the Delta / Iceberg tables of a destination"
    )
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>", required=True)
    compact = verbs.add_parser("compact", help="bin small files into larger ones")
    compact.add_argument("--to", required=True, help="delta:DIR or iceberg:CATALOG#ns.table")
    compact.set_defaults(handler=_compact)
    expire = verbs.add_parser("expire", help="remove old files (Delta) or snapshots (Iceberg)")
    expire.add_argument("--to", required=True, help="delta:DIR or iceberg:CATALOG#ns.table")
    expire.add_argument(
        "--retention-hours", type=int, default=None, help="Delta vacuum retention (default 168)"
    )
    expire.add_argument(
        "--older-than-days", type=float, default=None, help="Iceberg snapshot age (default 5)"
    )
    expire.set_defaults(handler=_expire)


def _compact(arguments: argparse.Namespace) -> int:
    from ringflow.pipeline import lakehouse_store

    print(json.dumps(lakehouse_store(arguments.to).compact(), default=str, sort_keys=True))
    return EXIT_OK


def _expire(arguments: argparse.Namespace) -> int:
    from ringflow.pipeline import DeltaStore, IcebergStore, lakehouse_store

    store = lakehouse_store(arguments.to)
    if isinstance(store, DeltaStore) and arguments.retention_hours is not None:
        report = store.expire(arguments.retention_hours)
    elif isinstance(store, IcebergStore) and arguments.older_than_days is not None:
        report = store.expire(arguments.older_than_days * 86400)
    else:
        report = store.expire()
    print(json.dumps(report, default=str, sort_keys=True))
    return EXIT_OK
