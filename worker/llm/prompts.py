"""Jinja prompt templates under prompts/<phase>/ rendered with StrictUndefined."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from worker.resources import resource_dir
from worker.text.json_text import dumps_indented

PROMPTS_DIR = resource_dir("prompts")


@dataclass(frozen=True)
class RenderedPrompt:
    name: str  # e.g. "consolidate"
    system: str
    user: str
    template_hash: str  # sha256 of the template sources, recorded on each step


@lru_cache(maxsize=1)
def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(PROMPTS_DIR)),
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        # Prompts are read-only resources: no stat of both files on every render (their hash,
        # recorded on each step, is computed once per process anyway).
        auto_reload=False,
    )
    # Note text only ever enters a prompt as a JSON string value (R14).
    env.filters["tojson_data"] = dumps_indented  # json.dumps(value, ensure_ascii=False, indent=1)
    return env


@lru_cache(maxsize=32)
def template_hash(name: str) -> str:
    digest = hashlib.sha256()
    for part in ("system.j2", "user.j2"):
        digest.update((PROMPTS_DIR / name / part).read_bytes())
    return digest.hexdigest()


def render_prompt(name: str, context: dict[str, Any]) -> RenderedPrompt:
    env = _environment()
    system = env.get_template(f"{name}/system.j2").render(**context)
    user = env.get_template(f"{name}/user.j2").render(**context)
    return RenderedPrompt(name=name, system=system, user=user, template_hash=template_hash(name))
