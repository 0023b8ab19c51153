"""A migrated :class:`~chaz.store.facade.Store` on the module's stack, with
the agent ``bot`` saved: a fixture plugin for the store-level integration
tests (``pytest_plugins = ["tests.support.store_fixtures"]``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import chaz
from chaz.store import Store
from chaz.store.migrate import upgrade
from tests.support.stack import Stack

#: The agent every store test's sessions run: one scripted reply.
AGENT = chaz.AgentSpec(id="bot", script=[{"steps": [{"say": "ok"}]}])


@pytest.fixture
def store(module_stack: Stack) -> Iterator[Store]:
    """A store of its own on the module's database, closed after the test."""
    s = Store(module_stack.settings.effective_database_url())
    upgrade(s.engine)
    s.put_agent(AGENT)
    try:
        yield s
    finally:
        s.close()
