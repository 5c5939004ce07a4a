"""FakeLLM: rule matching, reply templates, call records and script-file errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker.app import make_llm
from worker.config import ConfigError, Settings
from worker.llm.base import LLMError
from worker.llm.fake import FakeLLM, FakeRule, expand_templates

PROMPT = '[{"alias": "n1", "content": "a"}, {"alias": "n2", "content": "b"}]'


def _ask(fake: FakeLLM, name: str = "consolidate", user: str = PROMPT):  # type: ignore[no-untyped-def]
    return fake.complete_json(prompt_name=name, system="s", user=user, schema={})


def test_first_matching_rule_wins_then_default() -> None:
    """Rules are tried in order on prompt name and substrings; unmatched prompts get the default."""
    fake = FakeLLM(rules=[
        FakeRule(prompt="contradictions", reply={"r": "contra"}),
        FakeRule(prompt="consolidate", contains=["n2"], reply={"r": "first"}),
        FakeRule(prompt="consolidate", reply={"r": "second"}),
    ], default={"r": "default"})
    assert _ask(fake).data == {"r": "first"}
    assert _ask(fake, user="nothing").data == {"r": "second"}
    assert _ask(fake, name="prune").data == {"r": "default"}
    assert [c.rule for c in fake.calls] == [1, 2, None]
    assert fake.counts() == {"consolidate": 2, "prune": 1}


def test_times_limits_a_rule_and_callable_replies_see_the_prompt() -> None:
    """A rule with times=1 is used once; a callable reply is computed from the prompt."""
    fake = FakeLLM(rules=[FakeRule(reply="{broken", times=1),
                          FakeRule(reply=lambda name, system, user: {"len": len(user)})])
    first = _ask(fake)
    assert first.data is None and first.raw == "{broken"
    assert _ask(fake, user="abc").data == {"len": 3}


def test_no_rule_and_no_default_is_an_llm_error() -> None:
    """An unscripted question fails loudly rather than inventing an answer."""
    with pytest.raises(LLMError, match="no rule"):
        _ask(FakeLLM())


def test_templates_expand_aliases_and_per_id_lists() -> None:
    """$aliases lists the prompt's note aliases; <name>_all repeats an item for every id."""
    reply = {"source_ids": "$aliases", "verdicts_all": {"relation": "conflicting"}}
    text = PROMPT + ' {"pair": "p1"} {"pair": "p2"} {"pair": "p1"}'
    assert expand_templates(reply, text) == {
        "source_ids": ["n1", "n2"],
        "verdicts": [{"relation": "conflicting", "pair": "p1"},
                     {"relation": "conflicting", "pair": "p2"}],
    }


def test_script_file_from_settings(tmp_path: Path) -> None:
    """DREAM_LLM_PROVIDER=fake + DREAM_FAKE_LLM_SCRIPT builds a FakeLLM from the file."""
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"model": "m1", "rules": [
        {"prompt": "consolidate", "contains": "n1", "reply": {"ok": 1}, "latency": 0}]}))
    llm = make_llm(Settings(llm_provider="fake", fake_llm_script=script))
    assert isinstance(llm, FakeLLM) and llm.model == "m1"
    assert _ask(llm).data == {"ok": 1}


@pytest.mark.parametrize(("content", "message"), [
    (None, "cannot read"),
    ("{not json", "not valid JSON"),
    ('{"rules": [{"prompt": "x"}]}', "needs a \"reply\""),
    ('{"rules": [{"reply": {}, "colour": 1}]}', "unknown key"),
    ('[]', "must be an object"),
])
def test_bad_script_is_one_line_config_error(tmp_path: Path, content: str | None,
                                              message: str) -> None:
    """A missing or malformed script file is a ConfigError naming the problem in one line."""
    script = tmp_path / "s.json"
    if content is not None:
        script.write_text(content)
    with pytest.raises(ConfigError, match=message) as info:
        FakeLLM.from_settings(Settings(llm_provider="fake", fake_llm_script=script))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("content", "line"), [
    # Before: "… is not valid JSON ('utf-8' codec can't decode byte 0xff in position 1: …)".
    (b'{\xff}', "fake LLM script {path} is not UTF-8 (byte 0xff at offset 1); save it as UTF-8 "
                "JSON or point DREAM_FAKE_LLM_SCRIPT at another file"),
    # Before: "(Expecting value: line 2 column 11 (char 12))", Python's wording.
    (b'{\n"rules": ,}', "fake LLM script {path} is not valid JSON (Expecting value at line 2 "
                       "column 10); fix the file (see examples/fake-llm-demo.json)"),
    (b'{"a": ' + b"1" * 5000 + b"}", "fake LLM script {path} holds a number too large or "
                                   "nesting too deep to read; fix the file"),
])
def test_a_script_not_utf8_or_not_json_is_one_line_naming_file_problem_and_fix(
        tmp_path: Path, content: bytes, line: str) -> None:
    """The script's bytes or syntax are named as the importers name them (where, what, the
    fix), never in Python's codec or decoder wording."""
    script = tmp_path / "s.json"
    script.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        FakeLLM.from_file(script)
    assert str(info.value) == line.format(path=script)


def test_a_script_starting_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """A BOM a Windows editor wrote is not part of the script, as for every importer (before:
    "Unexpected UTF-8 BOM (decode using utf-8-sig)")."""
    script = tmp_path / "s.json"
    script.write_bytes(b"\xef\xbb\xbf" + json.dumps({"model": "m2", "rules": []}).encode())
    assert FakeLLM.from_file(script).model == "m2"


def test_missing_script_setting_is_config_error() -> None:
    """provider=fake without a script path tells the user which variable to set."""
    with pytest.raises(ConfigError, match="DREAM_FAKE_LLM_SCRIPT"):
        FakeLLM.from_settings(Settings(llm_provider="fake"))


def test_rules_match_the_notes_not_the_system_prompt_or_template() -> None:
    """`contains` looks only at the notes' part of the prompt: a phrase that occurs in the
    system prompt or in the template's own words matches nothing."""
    fake = FakeLLM(rules=[FakeRule(contains=["metric units"], reply={"r": "hit"})],
                   default={"r": "default"})
    user = 'Classify these pairs of metric units:\n[{"pair": "p1", "text": "likes tea"}]'
    assert fake.complete_json(prompt_name="x", system="e.g. metric units", user=user,
                              schema={}).data == {"r": "default"}
    user = '[{"pair": "p1", "text": "uses metric units"}]'
    assert fake.complete_json(prompt_name="x", system="", user=user,
                              schema={}).data == {"r": "hit"}


DEMO = Path(__file__).resolve().parents[2] / "examples" / "fake-llm-demo.json"

def test_demo_script_sorts_a_whole_scope_topic_into_the_units_alone() -> None:
    """A small scope is asked about whole (one topic holding every short note): the demo
    script's units rule names the metric and imperial notes, one value each, and no other
    note of the topic (``$alias_values`` would have made tea and coffee two more "units")."""
    from worker.llm.prompts import render_prompt

    texts = ["The user prefers tea in the afternoon", "Customer uses metric units in every report",
             "The user drinks coffee in the morning", "Customer uses imperial units in every report"]
    topics = [{"topic": "t1", "notes": [
        {"alias": f"n{k}", "created_at": f"2026-01-0{k}", "type": "Context", "text": t}
        for k, t in enumerate(texts, start=1)]}]
    prompt = render_prompt("contradictions", {"topics": topics, "topic_ids": ["t1"]})
    reply = FakeLLM.from_file(DEMO).complete_json(
        prompt_name="contradictions", system=prompt.system, user=prompt.user, schema={})
    (attribute,) = reply.data["topics"][0]["attributes"]
    assert attribute["values"] == [{"notes": ["n2"]}, {"notes": ["n4"]}]
    assert expand_templates({"v": {"$alias_values_with": "tea"}}, prompt.user) == {
        "v": [{"notes": ["n1"]}]}



@pytest.mark.parametrize(("a", "b", "values"), [
    ("Customer uses metric units in every report", "Customer uses imperial units in every report",
     [[{"notes": ["n1"]}, {"notes": ["n2"]}]]),
    ("User prefers dark mode", "User prefers dark mode in the editor", []),
])
def test_demo_script_calls_only_the_units_pair_conflicting(
        a: str, b: str, values: list[list[dict[str, list[str]]]]) -> None:
    """examples/fake-llm-demo.json as its comments say: the metric/imperial notes are two
    values of one attribute, any other topic states no shared attribute (the real rendered
    contradictions prompt)."""
    from worker.llm.prompts import render_prompt

    topics = [{"topic": "t1", "notes": [
        {"alias": "n1", "created_at": "2026-01-01", "type": "Context", "text": a},
        {"alias": "n2", "created_at": "2026-02-01", "type": "Context", "text": b}]}]
    prompt = render_prompt("contradictions", {"topics": topics, "topic_ids": ["t1"]})
    fake = FakeLLM.from_file(DEMO)
    reply = fake.complete_json(prompt_name="contradictions", system=prompt.system,
                               user=prompt.user, schema={})
    assert [t["topic"] for t in reply.data["topics"]] == ["t1"]
    assert [attr["values"] for attr in reply.data["topics"][0]["attributes"]] == values


def test_topics_packed_into_one_prompt_each_get_their_own_rule() -> None:
    """A ``<name>_all`` reply is chosen per id on that id's own notes: the demo script's units
    rule answers the metric/imperial topic, and a topic packed beside it into the same prompt
    falls to the script's "no shared attribute" rule (it used to be told its two notes were
    two unit systems, and a tea preference was retired by a Python one)."""
    from worker.llm.prompts import render_prompt

    topics = [
        {"topic": "t1", "notes": [
            {"alias": "n1", "created_at": "2026-01-01", "type": "Preference",
             "text": "Customer uses metric units in every report"},
            {"alias": "n2", "created_at": "2026-02-01", "type": "Preference",
             "text": "Customer uses imperial units in every report"}]},
        {"topic": "t2", "notes": [
            {"alias": "n3", "created_at": "2026-01-05", "type": "Preference",
             "text": "User prefers tea in the afternoon"},
            {"alias": "n4", "created_at": "2026-02-05", "type": "Preference",
             "text": "User prefers Python 3.12 with type hints and unittest"}]},
    ]
    prompt = render_prompt("contradictions", {"topics": topics, "topic_ids": ["t1", "t2"]})
    reply = FakeLLM.from_file(DEMO).complete_json(
        prompt_name="contradictions", system=prompt.system, user=prompt.user, schema={})
    answered = {t["topic"]: t["attributes"] for t in reply.data["topics"]}
    assert [a["values"] for a in answered["t1"]] == [[{"notes": ["n1"]}, {"notes": ["n2"]}]]
    assert answered["t2"] == []
