"""``client.deliveries``: hand-offs between sessions (docs/collaboration.md#deliveries)."""

from __future__ import annotations

import builtins

from chaz.client.base import Acting, translating
from chaz.domain.deliveries import (
    Delivery,
    Reply,
    RequestStatus,
    request_status,
    result_key,
    stored_states,
)
from chaz.domain.entries import EntryType
from chaz.domain.principals import Grant
from chaz.domain.validation import check_choice, check_content, check_limit, check_ref
from chaz.errors import DeliveryNotFound, ValidationError
from chaz.usecases import deliveries as delivery_cases

_DIRECTIONS = ("in", "out", "both")


@translating
class Deliveries(Acting):
    """Hand-offs between sessions (docs/collaboration.md#deliveries)."""

    def get(self, delivery_id: str) -> Delivery:
        """One delivery (of the principal's project)."""
        self._may(Grant.HISTORY_READ, "read deliveries")
        return self._svc.store.deliveries.get(
            check_ref("delivery_id", delivery_id), project=self._project
        )

    def list(
        self,
        session_id: str,
        *,
        direction: str = "both",
        limit: int = 100,
        status: str | None = None,
    ) -> builtins.list[Delivery]:
        """Deliveries into (``in``), out of (``out``) or both ways of a session, newest first.

        ``status`` keeps those in one lifecycle status (``accepted``,
        ``delivering``, ``consumed``, ``failed``: docs/sessions.md#sending-between-sessions).
        """
        self._may(Grant.HISTORY_READ, "read deliveries")
        if direction not in _DIRECTIONS:
            raise ValidationError(
                f"direction must be one of {list(_DIRECTIONS)}", field="direction"
            )
        session = self._session(session_id)
        limit = check_limit("limit", limit)
        if status is None:
            return self._svc.store.deliveries.list(
                session.id, direction=direction, limit=limit, project=self._project
            )
        wanted = check_choice("status", status, RequestStatus, "status")
        found = self._svc.store.deliveries.requests(
            session.id, direction=direction, states=stored_states(wanted), limit=limit * 5
        )
        kept = [d for d, js in found if request_status(d.state, js) is wanted]
        return kept[:limit]

    # -- requests (docs/contracts.md#requests) ---------------------------------

    def send(
        self,
        target_session_id: str,
        message: str,
        *,
        reply: str = "none",
        sender: str | None = None,
        from_session: str | None = None,
    ) -> Delivery:
        """A person's ``session_send``: ``message`` runs as its own FIFO turn in the
        session ``target_session_id`` (an id, not a name, of the principal's
        project), carrying the principal's grants. Needs ``session.write``.

        ``reply="completion"`` freezes the turn's result (final text and
        artifact references) on the request (:meth:`result`), and delivers
        it once into ``from_session`` if given. Returns the request (its id
        is the ``requestId``) right after its commit. Nothing is written when
        it is refused: ``session.not_found``, ``session.archived``,
        ``topology.self``, ``request.invalid`` or a quota error. ``sender``
        defaults to the principal; an API-key client sends only as itself.
        """
        self._may(Grant.SESSION_WRITE, "send to sessions")
        target = check_ref("target_session_id", target_session_id)
        content = check_content(
            EntryType.DIRECTIVE, message, max_bytes=self._svc.settings.max_content_bytes
        )
        if reply not in (Reply.NONE.value, Reply.COMPLETION.value):
            raise ValidationError("reply must be 'none' or 'completion'", field="reply")
        mode = Reply(reply)
        sender = self._sender(sender)
        origin = check_ref("from_session", from_session) if from_session is not None else None
        done = delivery_cases.send_request(
            self._svc,
            target,
            content,
            reply=mode,
            sender=sender,
            from_session_id=origin,
            principal=self._principal,
        )
        return done.delivery

    def result(self, request_id: str) -> Delivery | None:
        """The result delivered back for a request, or None (none yet, or no
        session to deliver it to: then :meth:`get`'s ``metadata["result"]``)."""
        request = self.get(request_id)
        return self._svc.store.deliveries.by_key(result_key(request.id))

    def status(self, delivery_id: str) -> str:
        """A request's or result's lifecycle: ``accepted``, ``delivering``,
        ``consumed`` or ``failed`` (docs/sessions.md#sending-between-sessions)."""
        found = self._svc.store.deliveries.with_job_status(self.get(delivery_id).id)
        if found is None:
            raise DeliveryNotFound(f"no delivery {delivery_id!r}", delivery_id=delivery_id)
        return request_status(found[0].state, found[1]).value
