"""The Lua scripts under chaz/coord/lua: headers, helpers, and how they are assembled."""

from __future__ import annotations

import importlib.resources
import re

import pytest

from chaz.coord import scripts

LUA = importlib.resources.files("chaz.coord").joinpath("lua")
FILES = sorted(p.name for p in LUA.iterdir() if p.name.endswith(".lua"))
SCRIPTS = [f.removesuffix(".lua") for f in FILES if not f.startswith("_")]
HELPERS = [f.removesuffix(".lua")[1:] for f in FILES if f.startswith("_")]


def _header(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return "\n".join(lines)


def test_there_are_scripts_and_helpers() -> None:
    assert "reserve" in SCRIPTS and "turn_ended" in SCRIPTS and "lane_acquire" in SCRIPTS
    assert set(HELPERS) == {
        "decr_positive",
        "lease_is",
        "watch_lease",
        "hand_off",
        "bucket",
        "token_debt",
        "take_slot",
    }


@pytest.mark.parametrize("name", FILES)
def test_every_file_opens_with_a_header_naming_keys_argv_and_return(name: str) -> None:
    header = _header(LUA.joinpath(name).read_text())
    assert "KEYS" in header, name
    assert "ARGV" in header, name
    assert "Returns:" in header, name


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_declares_exactly_the_helpers_it_calls(name: str) -> None:
    body = LUA.joinpath(f"{name}.lua").read_text()
    called = {h for h in HELPERS if re.search(rf"\b{h}\(", body)}
    assert set(scripts.uses(name)) == called


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_source_defines_each_helper_before_the_script_body(name: str) -> None:
    text = scripts.source(name)
    body = LUA.joinpath(f"{name}.lua").read_text()
    assert text.endswith(body)
    for helper in scripts.uses(name):
        assert f"local function {helper}(" in text[: -len(body)]


def test_no_limit_is_minus_one() -> None:
    assert scripts.limit_arg(None) == -1
    assert scripts.limit_arg(0) == 0
    assert scripts.limit_arg(5) == 5
