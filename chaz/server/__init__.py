"""chaz over HTTP: ``chaz serve``'s ASGI app (docs/http.md).

LangGraph Platform's routes, as the ``langgraph-sdk`` calls them, over chaz's
use cases: an assistant is an agent, a thread a session, a run the job a
message admits. A top layer beside the client and the CLI; it never goes
through the producer client.
"""

from chaz.server.app import create_app

__all__ = ["create_app"]
