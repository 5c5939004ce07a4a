"""Instructions per scope under callgrind: a figure a drifting VM cannot move.

``python -m tests.bench.instructions [--before DIR] [--backend sqlite|postgres] [--scopes N]``
runs one in-process bench child (``inprocess._child``: the real engine, every phase, the
zero-latency model) under ``valgrind --tool=callgrind`` over the 10k-note corpus' first N
scopes and over its first scope alone, and prints (N-scope total − 1-scope total) / (N − 1):
the instructions of a warm scope, process start-up and first-use costs taken out. With
``--before`` the same for another checkout (its own worker, this harness), and the ratio.
Needs valgrind; each measurement takes a minute or two (callgrind runs ~50× slower).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.bench import stores

CORPUS = stores.CorpusSpec(100, 100)
_COLLECTED = re.compile(r"Collected : (\d+)")


def _child_main(locator: str, backend: str, part: int) -> None:
    """In the measured process: one bench child over every ``part``-th scope of the corpus."""
    import queue

    import worker
    from tests.bench import inprocess

    print(f"measured worker: {Path(worker.__file__).parent}", file=sys.stderr)

    if backend == "sqlite":
        url = f"sqlite:///{locator}"
        inprocess._child(url, 0.0, 4, {}, queue.Queue(), (0, part))
        return
    url = stores.fresh_copy("postgres", locator, f"instr{os.getpid()}")
    try:
        inprocess._child(url, 0.0, 4, {}, queue.Queue(), (0, part))
    finally:
        stores.drop_copy(url)


def _count(root: Path, locator: str, backend: str, part: int) -> int:
    """Instructions of one child process: this harness (copied beside the run) with ``root``'s
    worker (first on the path) and ``root``'s venv when it has one."""
    here = Path(__file__).resolve().parents[2]
    work = Path(tempfile.mkdtemp(prefix="dream-instr-"))
    for part_ in ("tests/__init__.py", "tests/bench", "tests/support"):
        src, dst = here / part_, work / part_
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copyfile)(src, dst)
    if backend == "sqlite":  # a private copy: the run writes to it
        shutil.copyfile(locator, work / "run.db")
        locator = str(work / "run.db")
    python = root / ".venv" / "bin" / "python"
    code = ("from tests.bench.instructions import _child_main; "
            f"_child_main({locator!r}, {backend!r}, {part})")
    try:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
             str(python if python.exists() else sys.executable), "-c", code],
            cwd=work, env={**os.environ, "PYTHONPATH": str(root), "PYTHONHASHSEED": "0"},
            capture_output=True,
            text=True, check=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    found = _COLLECTED.search(done.stderr)
    if f"measured worker: {root.resolve() / 'worker'}" not in done.stderr:
        raise SystemExit(f"error: the measured run did not import {root}'s worker")
    if done.returncode != 0 or found is None:
        raise SystemExit(f"error: the measured run failed under callgrind:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def per_scope(root: Path, locator: str, backend: str, scopes: int) -> float:
    part = CORPUS.scopes // scopes
    many = _count(root, locator, backend, part)
    one = _count(root, locator, backend, CORPUS.scopes)
    return (many - one) / (CORPUS.scopes // part - 1)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.instructions",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="another checkout of the worker")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--scopes", type=int, default=20, help="scopes in the long measurement")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("error: valgrind is not installed (apt-get install valgrind)")
    if not 2 <= args.scopes <= CORPUS.scopes:
        raise SystemExit(f"error: --scopes must be between 2 and {CORPUS.scopes}")
    locator, _ = stores.template(args.backend, CORPUS)
    here = Path(__file__).resolve().parents[2]
    sides = [("before", args.before.resolve())] if args.before else []
    figures = {}
    for name, root in [*sides, ("after", here)]:
        figures[name] = per_scope(root, locator, args.backend, args.scopes)
        print(f"{name:6s} {root}: {figures[name] / 1e6:,.1f} M instructions per warm scope "
              f"({args.backend}, {args.scopes} scopes minus 1)")
    if args.before:
        print(f"after / before: {figures['after'] / figures['before']:.3f}×")


if __name__ == "__main__":
    main()
