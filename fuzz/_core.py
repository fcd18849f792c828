"""What every fuzz target shares: inputs, invariant failures, counters, crash files, the loop.

Rules:

* A target is deterministic in its inputs: ``inputs(seed)`` yields the same sequence for the
  same seed, whatever the server answers, so ``(target, seed, index)`` names an input and a
  crash file carries the seed and index next to the bytes.
* An invariant is one line: ``check(condition, name, detail)`` raises ``InvariantFailure``
  naming it. Per-input invariants run after every input; periodic ones (health probes) every
  ``probe_every`` inputs and at the end; a periodic failure is blamed on the inputs since the
  last passing probe, and all of them go into the crash file.
* After a failure the loop saves the input(s), asks the target to recover (restart what died),
  counts it, and goes on: a long run reports every failure, not only the first.
* Crash file ``fuzz/crashes/<target>-<sha256[:12]>.bin`` (hash of the invariant and the
  inputs): the line ``ringflow-fuzz 1``, one JSON line (target, seed, first index, invariant,
  detail), then each input as a 4-byte big-endian length, a 1-byte node index and its bytes.
  ``python -m fuzz replay FILE`` feeds them to a fresh node (or cluster) and runs the same
  invariants.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

CRASH_MAGIC = b"ringflow-fuzz 1\n"
CRASH_DIR = Path(__file__).parent / "crashes"
_ITEM_HEADER = struct.Struct(">IB")


@dataclass(frozen=True, slots=True)
class FuzzInput:
    """One input: the bytes a target sends (a connection's bytes, or a statement's text),
    how it was made (``kind``, for the counts) and which node it goes to."""

    data: bytes
    kind: str
    node: int = 0
    messages: int = 1
    """Protocol messages inside (frames, statements): what the throughput counts."""


class InvariantFailure(Exception):
    """An invariant did not hold; ``name`` is its one-line statement."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"{name}: {detail}")
        self.name = name
        self.detail = detail


class InvariantFailures(Exception):
    """Several invariants failed in one probe (each is counted)."""

    def __init__(self, failures: list[InvariantFailure]) -> None:
        super().__init__("; ".join(str(failure) for failure in failures))
        self.failures = failures


def check_all(*checks: Callable[[], None]) -> None:
    """Run every check (one failing does not hide the next); raise what failed."""
    failures = []
    for one in checks:
        try:
            one()
        except InvariantFailure as failure:
            failures.append(failure)
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise InvariantFailures(failures)


def check(condition: bool, name: str, detail: str = "") -> None:
    """Raise ``InvariantFailure(name)`` unless ``condition`` (the invariant is ``name``)."""
    if not condition:
        raise InvariantFailure(name, detail)


@dataclass(slots=True)
class Stats:
    """What a run counts; ``summary()`` is what ``python -m fuzz`` prints and RESULTS.md cites."""

    target: str
    seed: int
    inputs: int = 0
    messages: int = 0
    closes: int = 0
    probes: int = 0
    recoveries: int = 0
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    kinds: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    crash_files: list[str] = field(default_factory=list)

    @property
    def elapsed_s(self) -> float:
        end = self.finished if self.finished is not None else time.monotonic()
        return max(end - self.started, 1e-9)

    def summary(self) -> str:
        rate = self.inputs / self.elapsed_s
        message_rate = self.messages / self.elapsed_s
        lines = [
            f"target {self.target} seed {self.seed}: {self.inputs} inputs ({rate:.0f}/s), "
            f"{self.messages} messages ({message_rate:.0f}/s) in {self.elapsed_s:.1f} s; "
            f"{self.closes} closes, {self.probes} probes, {self.recoveries} recoveries",
            "  inputs by kind: " + _counts(self.kinds),
            "  answers by class: " + _counts(self.answers),
            "  invariant failures: " + (_counts(self.failures) or "none"),
        ]
        lines += [f"  saved: {path}" for path in self.crash_files]
        return "\n".join(lines)

    def as_json(self) -> dict[str, object]:
        return {
            "target": self.target,
            "seed": self.seed,
            "inputs": self.inputs,
            "messages": self.messages,
            "elapsed_s": round(self.elapsed_s, 2),
            "inputs_per_s": round(self.inputs / self.elapsed_s, 1),
            "messages_per_s": round(self.messages / self.elapsed_s, 1),
            "closes": self.closes,
            "probes": self.probes,
            "recoveries": self.recoveries,
            "kinds": dict(self.kinds),
            "answers": dict(self.answers),
            "failures": dict(self.failures),
            "crash_files": list(self.crash_files),
        }


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{name} {count}" for name, count in counter.most_common())


class Environment(Protocol):
    """The real processes a target runs against (one node, or a cluster)."""

    def execute(self, item: FuzzInput, stats: Stats) -> None:
        """Send ``item``; check the per-input invariants (raise ``InvariantFailure``)."""

    def probe(self, stats: Stats) -> None:
        """Check the periodic invariants (health through the real driver, views, ...)."""

    def recover(self) -> None:
        """Bring the processes back to a state where the invariants can hold again."""

    def settle(self) -> None:
        """Wait before the last probe (internode: long enough for a partition to show)."""

    def close(self) -> None: ...


class Target(Protocol):
    name: str
    probe_every: int

    def inputs(self, seed: int) -> Iterator[FuzzInput]: ...

    def environment(self, workdir: Path | None) -> Environment: ...


# -- crash files ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Crash:
    target: str
    seed: int
    index: int
    invariant: str
    detail: str
    inputs: tuple[FuzzInput, ...]


def encode_crash(crash: Crash) -> bytes:
    meta = {
        "target": crash.target,
        "seed": crash.seed,
        "index": crash.index,
        "invariant": crash.invariant,
        "detail": crash.detail[:2000],
        "kinds": [item.kind for item in crash.inputs],
    }
    parts = [CRASH_MAGIC, json.dumps(meta, sort_keys=True).encode() + b"\n"]
    for item in crash.inputs:
        parts += [_ITEM_HEADER.pack(len(item.data), item.node), item.data]
    return b"".join(parts)


def decode_crash(data: bytes) -> Crash:
    if not data.startswith(CRASH_MAGIC):
        raise ValueError("not a ringflow fuzz crash file")
    meta_line, _, rest = data[len(CRASH_MAGIC) :].partition(b"\n")
    meta = json.loads(meta_line)
    kinds = list(meta.get("kinds", []))
    inputs: list[FuzzInput] = []
    offset = 0
    while offset < len(rest):
        length, node = _ITEM_HEADER.unpack_from(rest, offset)
        offset += _ITEM_HEADER.size
        kind = kinds[len(inputs)] if len(inputs) < len(kinds) else "replay"
        inputs.append(FuzzInput(rest[offset : offset + length], kind, node))
        offset += length
    return Crash(
        str(meta["target"]),
        int(meta["seed"]),
        int(meta["index"]),
        str(meta["invariant"]),
        str(meta["detail"]),
        tuple(inputs),
    )


def save_crash(crash: Crash, directory: Path = CRASH_DIR) -> Path:
    """Write ``crash`` as ``<target>-<hash>.bin`` (the hash of its invariant and inputs)."""
    digest = hashlib.sha256(crash.invariant.encode())
    for item in crash.inputs:
        digest.update(_ITEM_HEADER.pack(len(item.data), item.node) + item.data)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{crash.target}-{digest.hexdigest()[:12]}.bin"
    path.write_bytes(encode_crash(crash))
    return path


# -- the loop ---------------------------------------------------------------------------------


@dataclass(slots=True)
class RunOptions:
    count: int
    seed: int
    crash_dir: Path | None = CRASH_DIR
    max_failures: int = 50
    """Stop after this many invariant failures (a broken build should not run for hours)."""
    max_saved_per_invariant: int = 5
    """Crash files written per invariant (every failure is counted)."""
    verbose: bool = False


def run(target: Target, environment: Environment, options: RunOptions) -> Stats:
    """Feed ``options.count`` inputs of ``target`` (seeded) to ``environment``, checking the
    invariants; failures are saved and counted, the environment recovered, the run goes on."""
    stats = Stats(target.name, options.seed)
    since_probe: list[tuple[int, FuzzInput]] = []
    inputs = target.inputs(options.seed)
    for index in range(options.count):
        item = next(inputs)
        stats.inputs += 1
        stats.messages += item.messages
        stats.kinds[item.kind] += 1
        since_probe.append((index, item))
        try:
            environment.execute(item, stats)
        except InvariantFailure as failure:
            _failed(target, environment, options, stats, [failure], [(index, item)])
            since_probe.clear()
        if (index + 1) % target.probe_every == 0:
            _probe(target, environment, options, stats, since_probe)
            since_probe.clear()
        if sum(stats.failures.values()) >= options.max_failures:
            break
    environment.settle()
    _probe(target, environment, options, stats, since_probe)
    stats.finished = time.monotonic()
    return stats


def _probe(
    target: Target,
    environment: Environment,
    options: RunOptions,
    stats: Stats,
    batch: Sequence[tuple[int, FuzzInput]],
) -> None:
    stats.probes += 1
    try:
        environment.probe(stats)
    except InvariantFailure as failure:
        _failed(target, environment, options, stats, [failure], batch)
    except InvariantFailures as failures:
        _failed(target, environment, options, stats, failures.failures, batch)


def _failed(
    target: Target,
    environment: Environment,
    options: RunOptions,
    stats: Stats,
    failures: list[InvariantFailure],
    batch: Sequence[tuple[int, FuzzInput]],
) -> None:
    for failure in failures:
        _record(target, options, stats, failure, batch)
    stats.recoveries += 1
    environment.recover()


def _record(
    target: Target,
    options: RunOptions,
    stats: Stats,
    failure: InvariantFailure,
    batch: Sequence[tuple[int, FuzzInput]],
) -> None:
    stats.failures[failure.name] += 1
    crash = Crash(
        target.name,
        options.seed,
        batch[0][0] if batch else -1,
        failure.name,
        failure.detail,
        tuple(item for _, item in batch),
    )
    saved = stats.failures[failure.name] <= options.max_saved_per_invariant
    if options.crash_dir is not None and batch and saved:
        path = str(save_crash(crash, options.crash_dir))
        if path not in stats.crash_files:
            stats.crash_files.append(path)
    if options.verbose:
        where = f"input {batch[0][0]}" if batch else "final probe"
        print(f"[{target.name}] {where}: {failure}"[:600], flush=True)


def replay(target: Target, environment: Environment, crash: Crash) -> Stats:
    """Feed a saved crash's inputs again, then probe: the invariants that fail now."""
    stats = Stats(target.name, crash.seed)
    for item in crash.inputs:
        stats.inputs += 1
        stats.messages += item.messages
        stats.kinds[item.kind] += 1
        try:
            environment.execute(item, stats)
        except InvariantFailure as failure:
            stats.failures[failure.name] += 1
            print(f"[{target.name}] replay: {failure}"[:2000], flush=True)
    environment.settle()
    stats.probes += 1
    found: list[InvariantFailure] = []
    try:
        environment.probe(stats)
    except InvariantFailure as failure:
        found = [failure]
    except InvariantFailures as failures:
        found = failures.failures
    for one in found:
        stats.failures[one.name] += 1
        print(f"[{target.name}] replay probe: {one}"[:2000], flush=True)
    stats.finished = time.monotonic()
    return stats
