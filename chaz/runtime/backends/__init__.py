"""Model backends: ``scripted`` for demos and tests, ``openai`` for real models."""

from __future__ import annotations

from chaz.domain.agents import AgentSpec
from chaz.runtime.backends.base import ModelBackend
from chaz.settings import Settings


def make_backend(spec: AgentSpec, settings: Settings) -> ModelBackend:
    """The backend an agent's ``model`` names."""
    kind = spec.model.split(":", 1)[0]
    # Each backend is imported when an agent first needs it: the openai
    # client is a heavy import that a scripted-only install never uses.
    if kind == "scripted":
        from chaz.runtime.backends.scripted import ScriptedBackend

        return ScriptedBackend.from_script(spec.script or [], settings.home)
    from chaz.runtime.backends.openai_backend import OpenAIBackend

    return OpenAIBackend.from_spec(spec, settings)
