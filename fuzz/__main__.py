"""``python -m fuzz run TARGET [-n N] [--seed S]`` and ``python -m fuzz replay FILE``.

``run`` starts the real node(s) the target needs, feeds N seeded inputs, checks the
invariants, saves failing inputs under ``fuzz/crashes/`` and prints the counts (``--json``
adds them as one JSON line). ``replay`` feeds a saved crash file's inputs to fresh processes
and reports which invariants fail now. Exit code: 0 when no invariant failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from fuzz._core import CRASH_DIR, RunOptions, Target, decode_crash, replay, run


def targets() -> dict[str, Target]:
    from fuzz.cql import CqlTarget
    from fuzz.internode import InternodeTarget
    from fuzz.native import NativeTarget

    return {"native": NativeTarget(), "cql": CqlTarget(), "internode": InternodeTarget()}


def _run(arguments: argparse.Namespace) -> int:
    known = targets()
    names = list(known) if arguments.target == "all" else [arguments.target]
    failed = False
    for name in names:
        target = known[name]
        environment = target.environment(_workdir(arguments, name))
        try:
            options = RunOptions(
                count=arguments.n,
                seed=arguments.seed,
                crash_dir=None if arguments.no_save else Path(arguments.crash_dir),
                max_failures=arguments.max_failures,
                verbose=True,
            )
            stats = run(target, environment, options)
        finally:
            environment.close()
        print(stats.summary(), flush=True)
        if arguments.json:
            print(json.dumps(stats.as_json(), sort_keys=True), flush=True)
        failed = failed or bool(stats.failures)
    return 1 if failed else 0


def _workdir(arguments: argparse.Namespace, name: str) -> Path | None:
    if arguments.workdir is None:
        return None
    path = Path(arguments.workdir) / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _replay(arguments: argparse.Namespace) -> int:
    crash = decode_crash(Path(arguments.file).read_bytes())
    print(
        f"{arguments.file}: target {crash.target}, seed {crash.seed}, input {crash.index}, "
        f"{len(crash.inputs)} input(s); saved for: {crash.invariant}: {crash.detail[:300]}"
    )
    target = targets()[crash.target]
    environment = target.environment(_workdir(arguments, crash.target))
    try:
        stats = replay(target, environment, crash)
    finally:
        environment.close()
    print(stats.summary(), flush=True)
    return 1 if stats.failures else 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # the ``finally`` blocks stop the nodes we started


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parser = argparse.ArgumentParser(prog="python -m fuzz")
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="fuzz a target")
    run_parser.add_argument("target", choices=["native", "cql", "internode", "all"])
    run_parser.add_argument("-n", type=int, default=1000, help="inputs (default 1000)")
    run_parser.add_argument("--seed", type=int, default=0)
    run_parser.add_argument("--crash-dir", default=str(CRASH_DIR))
    run_parser.add_argument("--no-save", action="store_true", help="do not save failing inputs")
    run_parser.add_argument("--max-failures", type=int, default=50)
    run_parser.add_argument("--json", action="store_true", help="also print the counts as JSON")
    run_parser.add_argument("--workdir", help="keep the nodes' data and logs here")
    run_parser.set_defaults(handler=_run)
    replay_parser = commands.add_parser("replay", help="replay a saved failing input")
    replay_parser.add_argument("file")
    replay_parser.add_argument("--workdir", help="keep the nodes' data and logs here")
    replay_parser.set_defaults(handler=_replay)
    arguments = parser.parse_args(argv)
    code: int = arguments.handler(arguments)
    return code


if __name__ == "__main__":
    sys.exit(main())
