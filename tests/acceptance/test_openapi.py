"""``/openapi.json`` is ours and accurate (issue 22): schemathesis, driven by the
document ``chaz serve`` publishes, sends every operation a bounded number of
generated requests with an API key, and each answer must be no 5xx, carry a
status the document lists for that operation, and match the schema it gives
for that status (docs/http.md#routes).

Routes added later are covered as they arrive: the operations are the
document's, read from the running server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

import chaz
from chaz.domain.principals import ALL_GRANTS
from tests.support.serve import serving
from tests.support.stack import Stack

#: Generated requests per operation: 60-odd operations in about 30 s on 2 cores.
EXAMPLES = int(os.environ.get("CHAZ_TEST_OPENAPI_EXAMPLES", "12"))
#: A saved agent, so that the listings answer something to check.
AGENT = chaz.AgentSpec(id="openapi-sayer", script=[{"steps": [{"say": "ok"}]}])
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def served(module_stack: Stack) -> Iterator[tuple[str, str]]:
    """``chaz serve`` over a fleet of one worker, and a key with every grant in
    a project of its own."""
    module_stack.workers(1, concurrency=2)
    module_stack.client.agents.put(AGENT)
    project = f"openapi-{uuid.uuid4().hex[:8]}"
    _, key = module_stack.client.keys.create("user:openapi", project, list(ALL_GRANTS))
    with serving(module_stack) as url:
        yield url, key


def test_every_answer_matches_the_openapi_document(served: tuple[str, str]) -> None:
    """Each operation of the document, ``EXAMPLES`` generated requests (valid
    and invalid ones by the schema); every failure of every operation is
    reported together."""
    url, key = served
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), (
            f"the document has an operation schemathesis cannot read: {result}"
        )
        operation = result.ok()
        operations += 1
        cases = st.one_of(
            operation.as_strategy(GenerationMode.POSITIVE),
            operation.as_strategy(GenerationMode.NEGATIVE),
        )

        @given(cases)
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Case) -> None:
            case.call_and_validate(headers={"x-api-key": key}, checks=CHECKS, timeout=30)

        try:
            check()
        # schemathesis's FailureGroup is a BaseExceptionGroup, not an Exception.
        except (Exception, BaseExceptionGroup) as exc:  # the operation's failures, shrunk
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    assert operations >= 40, f"only {operations} operations in the document"
    assert not failures, "\n\n".join(failures)
