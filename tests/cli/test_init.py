"""The `dream` group is built by explicit registration (worker.cli.COMMAND_MODULES) and runs as
``python -m worker.cli`` too."""

from __future__ import annotations

import subprocess
import sys

import click

from worker.cli import COMMAND_MODULES, main

TOP_LEVEL = {"api", "candidates", "db", "demo", "entities", "erase", "examples", "fuse", "gate",
             "keep-apart", "mcp", "notes", "review", "run", "runs", "sessions", "undo"}


def test_every_command_comes_from_a_listed_module() -> None:
    """Registering the listed modules on a fresh group gives exactly today's commands, and each
    module adds at least one (a module that registers nothing is dead)."""
    group = click.Group("dream")
    for module in COMMAND_MODULES:
        before = set(group.commands)
        module.register(group)
        assert set(group.commands) - before, module
    assert set(group.commands) == TOP_LEVEL == set(main.commands)
    notes = group.commands["notes"]
    assert isinstance(notes, click.Group) and set(notes.commands) == {"import", "export", "add"}


def test_python_dash_m_worker_cli_is_the_dream_command() -> None:
    done = subprocess.run([sys.executable, "-m", "worker.cli", "runs", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: dream runs [OPTIONS] COMMAND")


def _commands(cmd: click.Command, path: str) -> list[tuple[str, click.Command]]:
    found = [(path, cmd)]
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            found += _commands(sub, f"{path} {name}")
    return found


def test_every_option_and_command_says_what_it_is_for_in_help() -> None:
    """`dream X --help` of every command: a help line for each command and each option (before:
    `run --agent`, `notes export --agent/--status`, `sessions add --agent`, `candidates
    --threshold`, every `--json`, … showed only their type)."""
    bare = [f"{path} {' / '.join(p.opts)}" for path, cmd in _commands(main, "dream")
            for p in cmd.params if isinstance(p, click.Option) and not p.hidden and not p.help]
    assert bare == []
    assert [path for path, cmd in _commands(main, "dream") if not cmd.help] == []
