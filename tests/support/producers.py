"""The ``producer`` fixture: the producer API a test drives, in this process or
over HTTP (docs/http.md#producer), so one test checks both clients with the
same assertions. A pytest plugin: a module that names this file in its
``pytest_plugins`` gets ``producer``, ``producer_env``, ``producer_principal``
and ``http_url``.

The stack under the producer is the test's own ``stack`` if it takes one,
else its module's ``fleet``. In process, the producer is that stack's client
(``stack``) or an operator's client in a project of the test's own (the
``fleet``, as ``tenant``); over HTTP, it is ``chaz.Client(url=..., api_key=...)``
against a ``chaz serve`` child (one per module over the ``fleet``, one per
test over its own ``stack``), with a key of :func:`producer_principal` in a
project of its own holding every grant. What only an operator does (saving
agents, keys, ``client.services``, the store, killing workers) stays on the
stack's own client.

The ``http`` parameter carries the ``second_stack`` mark, so it runs with the
marked extras (``.ci/run``), not the default run; a module whose HTTP run
belongs in the default run parametrizes ``producer`` itself (``indirect``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

import chaz
from chaz.domain.principals import ALL_GRANTS
from tests.acceptance.test_cli import cli_env
from tests.support.serve import serving
from tests.support.stack import Stack

#: The parameters of ``producer``: in this process, and over HTTP in the extras.
PARAMS = ["in-process", pytest.param("http", marks=pytest.mark.second_stack)]
#: The CLI environment of a test's producer (see :func:`producer_env`).
CLI_ENV = pytest.StashKey[dict[str, str]]()


@pytest.fixture(scope="module")
def http_url(fleet: Stack) -> Iterator[str]:
    """The URL of a ``chaz serve`` over the module's fleet."""
    with serving(fleet) as url:
        yield url


@pytest.fixture
def producer_principal() -> str:
    """Whom an API key of the HTTP producer is for: the sender of the test's
    posts (a key writes only as itself). A module overrides this fixture when
    its tests write as someone else."""
    return "user:alice"


@pytest.fixture(params=PARAMS)
def producer(
    request: pytest.FixtureRequest, producer_principal: str, tmp_path: Path
) -> Iterator[chaz.Client]:
    """The test's producer client, in this process or over HTTP (module docstring)."""
    own = "stack" in request.fixturenames
    stack: Stack = request.getfixturevalue("stack" if own else "fleet")
    with ExitStack() as done:
        if request.param == "in-process" and own:
            client = stack.client
            env = cli_env(settings=stack.settings)
        elif request.param == "in-process":
            view = stack.tenant()
            done.callback(view.close)
            client = view.client
            env = cli_env(settings=stack.settings, CHAZ_PROJECT=client.principal.project)
        else:
            url = done.enter_context(serving(stack)) if own else request.getfixturevalue("http_url")
            project = f"s-{uuid.uuid4().hex[:10]}"
            grants = [g.value for g in ALL_GRANTS]
            _, key = stack.client.keys.create(producer_principal, project, grants)
            client = done.enter_context(chaz.Client(url=url, api_key=key))
            # A key holder's CLI: the URL and the key, no database or Redis settings.
            env = cli_env(home=tmp_path / "key-holder", CHAZ_URL=url, CHAZ_API_KEY=key)
        request.node.stash[CLI_ENV] = env
        yield client


@pytest.fixture
def producer_env(producer: chaz.Client, request: pytest.FixtureRequest) -> dict[str, str]:
    """The environment of a ``chaz`` command acting as ``producer``: the
    stack's settings (and the test's project) in process, only ``CHAZ_URL``
    and ``CHAZ_API_KEY`` over HTTP."""
    return request.node.stash[CLI_ENV]
