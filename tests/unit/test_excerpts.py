"""Telling a cut result from a short one (chaz.domain.artifacts.is_excerpt)."""

from __future__ import annotations

import pytest

from chaz.domain.artifacts import is_excerpt
from chaz.domain.results import RESULT_CAP, excerpt


@pytest.mark.parametrize("length", [RESULT_CAP + 1, RESULT_CAP + 99, 200_000, 10**7])
def test_every_excerpt_is_recognised(length: int) -> None:
    text = "".join(chr(0x61 + i % 26) for i in range(length))
    cut, truncated = excerpt(text)
    assert truncated and len(cut) == RESULT_CAP
    assert is_excerpt(cut)


def test_a_text_that_was_never_cut_is_not_an_excerpt() -> None:
    assert not is_excerpt("a" * RESULT_CAP)
    assert not is_excerpt("short")
    # The marker alone, in the wrong place or at the wrong length, is not enough.
    marker = "\n[... 5 characters omitted ...]\n"
    assert not is_excerpt(marker + "a" * (RESULT_CAP - len(marker)))
    assert not is_excerpt(excerpt("b" * 50_000)[0] + "!")
