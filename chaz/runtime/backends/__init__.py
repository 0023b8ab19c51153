"""Model backends: ``scripted`` for demos and tests, ``openai`` for real models."""

from __future__ import annotations

from chaz.coord.partials import PartialPublisher
from chaz.domain.agents import AgentSpec
from chaz.runtime.backends.base import ModelBackend
from chaz.runtime.cancel import CancelToken
from chaz.settings import Settings


def make_backend(
    spec: AgentSpec,
    settings: Settings,
    cancel: CancelToken | None = None,
    partials: PartialPublisher | None = None,
) -> ModelBackend:
    """The backend an agent's ``model`` names; ``cancel`` (a turn's token) interrupts
    its waits and in-flight requests (docs/runtime.md#preemptive-cancel), and a
    streaming backend publishes its text to ``partials`` as it arrives
    (docs/runtime.md#streaming)."""
    kind = spec.model.split(":", 1)[0]
    # Each backend is imported when an agent first needs it: the openai
    # client is a heavy import that a scripted-only install never uses.
    if kind == "scripted":
        from chaz.runtime.backends.scripted import ScriptedBackend

        return ScriptedBackend.from_script(spec.script or [], settings.home, cancel, partials)
    from chaz.runtime.backends.openai_backend import OpenAIBackend

    return OpenAIBackend.from_spec(spec, settings, cancel, partials)
