"""Bridges: people talk to agents from a chat platform (docs/bridges.md).

A bridge is a producer that holds only a chaz URL and API keys
(``chaz.Client(url=..., api_key=...)``), never database or Redis settings.
:mod:`chaz.bridges.base` is the seam a platform implements,
:mod:`chaz.bridges.relay` the platform-independent rest, and
:mod:`chaz.bridges.matrix` the first platform.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chaz.bridges.relay import Relay

__all__ = ["matrix_relay"]


def matrix_relay(config_path: Path) -> Relay:
    """A relay over Matrix, from the config file at ``config_path``; its keys are
    checked now (a wrong one is ``auth.unauthenticated`` before anything runs)."""
    import chaz
    from chaz.bridges.config import load
    from chaz.bridges.matrix import MatrixBridge
    from chaz.bridges.relay import Relay
    from chaz.bridges.state import State

    config = load(config_path)
    state = State(config.state)

    def connect(url: str, key: str) -> chaz.Client:
        return chaz.Client(url=url, api_key=key)

    return Relay(MatrixBridge(config.matrix), config, state, connect)
