"""The scripted ``stream`` step (docs/runtime.md#streaming): its shape is checked
when an AgentSpec is validated, it publishes ``chunk`` characters at a time
and answers the whole text, and it stops at a cancel between chunks."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from chaz.domain.agents import AgentSpec
from chaz.errors import Cancelled, ValidationError
from chaz.runtime.backends.base import TurnContext
from chaz.runtime.backends.scripted import DEFAULT_CHUNK, ScriptedBackend
from chaz.runtime.cancel import CancelToken
from chaz.runtime.gates import open_gate

TURN = TurnContext(session_id="s1", job_id="j1", trigger_content="world")


class _Recorder:
    """Stands in for a PartialPublisher: what was flushed, one string a partial."""

    def __init__(self, on_flush: Any = None) -> None:
        self.flushed: list[str] = []
        self._buffer = ""
        self._on_flush = on_flush

    def write(self, step: int, text: str) -> None:
        assert step == 0
        self._buffer += text

    def flush(self) -> None:
        if self._buffer:
            self.flushed.append(self._buffer)
            self._buffer = ""
            if self._on_flush is not None:
                self._on_flush(self)


def _backend(step: dict[str, Any], recorder: _Recorder, **kw: Any) -> ScriptedBackend:
    return ScriptedBackend.from_script(
        [{"steps": [step]}],
        kw.get("home"),
        kw.get("cancel"),
        recorder,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("step", "why"),
    [
        ({"stream": "x", "chunk": 0}, "greater than or equal to 1"),
        ({"stream": "x", "chunk": -3}, "greater than or equal to 1"),
        ({"stream": "x", "chunk": "many"}, "valid integer"),
        ({"stream": "x", "pace": -1}, "greater than or equal to 0"),
        ({"say": "x", "chunk": 4}, "chunk, pace and hold go with stream"),
        ({"say": "x", "stream": "y"}, "exactly one of"),
        ({"stream": "x", "timeout": 5}, "timeout goes with wait or hold"),
    ],
)
def test_a_bad_stream_step_is_refused_when_the_spec_is_validated(
    step: dict[str, Any], why: str
) -> None:
    with pytest.raises(ValidationError) as info:
        AgentSpec(id="a", script=[{"steps": [step]}])
    assert (info.value.field or "").startswith("script")
    assert why in info.value.message


def test_a_stream_publishes_chunks_and_answers_the_whole_text() -> None:
    recorder = _Recorder()
    answer = _backend({"stream": "hello {input}!", "chunk": 3}, recorder).complete([], [], TURN)
    assert answer.text == "hello world!"
    assert recorder.flushed == ["hel", "lo ", "wor", "ld!"]
    recorder = _Recorder()
    text = "x" * (DEFAULT_CHUNK * 2 + 1)
    assert _backend({"stream": text}, recorder).complete([], [], TURN).text == text
    assert [len(p) for p in recorder.flushed] == [DEFAULT_CHUNK, DEFAULT_CHUNK, 1]


def test_an_empty_stream_answers_empty_text_with_no_partial() -> None:
    recorder = _Recorder()
    assert _backend({"stream": ""}, recorder).complete([], [], TURN).text == ""
    assert recorder.flushed == []


def test_a_held_stream_goes_on_when_its_gate_opens(tmp_path: Path) -> None:
    # The gate is opened by the first partial: the rest follows.
    recorder = _Recorder(on_flush=lambda r: open_gate(tmp_path, "more-s1"))
    step = {"stream": "abcdef", "chunk": 2, "hold": "more-{session_id}", "timeout": 600}
    answer = _backend(step, recorder, home=tmp_path).complete([], [], TURN)
    assert answer.text == "abcdef" and recorder.flushed == ["ab", "cd", "ef"]


def test_a_cancel_stops_a_stream_between_chunks(tmp_path: Path) -> None:
    cancel = CancelToken()
    # The first partial sets the token, from another thread as the watcher would.
    recorder = _Recorder(on_flush=lambda r: threading.Thread(target=cancel.set).start())
    step = {"stream": "abcdef", "chunk": 2, "hold": "never", "timeout": 600}
    with pytest.raises(Cancelled):
        _backend(step, recorder, home=tmp_path, cancel=cancel).complete([], [], TURN)
    assert recorder.flushed == ["ab"]


def test_a_paced_stream_stops_at_a_cancel() -> None:
    cancel = CancelToken()
    recorder = _Recorder(on_flush=lambda r: cancel.set())
    step = {"stream": "abcdef", "chunk": 2, "pace": 600}
    with pytest.raises(Cancelled):
        _backend(step, recorder, cancel=cancel).complete([], [], TURN)
    assert recorder.flushed == ["ab"]
