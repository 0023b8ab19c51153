"""``chaz serve``'s choice of uvicorn's HTTP parser and event loop: the C
ones (chaz's dependencies) where installed, the pure-Python ones otherwise."""

from __future__ import annotations

import importlib.util
from importlib.machinery import ModuleSpec

import pytest

from chaz.cli import serve


def test_the_c_parser_and_loop_where_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: ModuleSpec(name, None))
    assert serve.server_stack() == ("httptools", "uvloop")


def test_h11_and_asyncio_where_they_are_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert serve.server_stack() == ("h11", "asyncio")


def test_each_falls_back_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # uvloop has no Windows build; httptools has.
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name: ModuleSpec(name, None) if name == "httptools" else None,
    )
    assert serve.server_stack() == ("httptools", "asyncio")
