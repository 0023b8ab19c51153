"""Fixtures of the tests of project limits (quotas and rates), shared as a pytest
plugin: a module that names this file in its ``pytest_plugins`` gets them.

One stack per module (both stacks, ``module_stack``) with the ``bot`` agent,
and a project of each test's own on it, so the tests need no fresh stack.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

import chaz
from tests.support.stack import Stack

BOT = chaz.AgentSpec(id="bot", script=[{"steps": [{"say": "ok"}]}])


@pytest.fixture(scope="module")
def mstack(module_stack: Stack) -> Stack:
    """The module's stack, with the ``bot`` agent saved."""
    module_stack.client.agents.put(BOT)
    return module_stack


@pytest.fixture
def project() -> str:
    """A project of this test's own."""
    return f"p{uuid.uuid4().hex[:12]}"


@pytest.fixture
def client(mstack: Stack, project: str) -> Iterator[chaz.Client]:
    """An operator's client acting in the test's project."""
    with chaz.Client(mstack.settings, migrate=False, project=project) as c:
        yield c
