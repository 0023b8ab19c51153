"""``client.webhooks``: runs' webhook deliveries and the project's signing
secret (docs/http.md#webhooks)."""

from __future__ import annotations

import builtins
from datetime import timedelta

from chaz.client.base import Acting, translating
from chaz.domain.principals import Grant
from chaz.domain.validation import check_limit, check_ref, check_seconds
from chaz.domain.webhooks import Webhook, WebhookState
from chaz.errors import ValidationError
from chaz.usecases import webhooks as webhook_cases


@translating
class Webhooks(Acting):
    """The acting project's webhook deliveries, and (an operator's client
    only) its signing secret."""

    def list(self, *, state: str | None = None, limit: int = 100) -> builtins.list[Webhook]:
        """The project's deliveries, newest first; ``state`` keeps one of
        ``pending``, ``delivered``, ``dead``."""
        self._principal.require(Grant.HISTORY_READ, "list webhook deliveries")
        states = [s.value for s in WebhookState]
        if state is not None and state not in states:
            raise ValidationError("state must be one of " + ", ".join(states), field="state")
        wanted = None if state is None else WebhookState(state)
        return self._svc.store.webhooks.list(
            project=self._principal.project, state=wanted, limit=check_limit("limit", limit)
        )

    def retry(self, delivery_id: str) -> Webhook:
        """Send a ``dead`` delivery of the project again, attempts counted from
        zero (``webhook.not_found``, ``conflict`` for one not dead)."""
        self._principal.require(Grant.RUNTIME_CONTROL, "retry webhook deliveries")
        ref = check_ref("delivery_id", delivery_id)
        return webhook_cases.retry(self._svc, ref, self._principal.project)

    def secret(self) -> str:
        """The project's signing secret (made now if it has none)."""
        self._principal.require_operator("read the webhook signing secret")
        return self._svc.store.webhooks.secret(self._principal.project)

    def rotate_secret(self, overlap_seconds: float | None = None) -> str:
        """A new signing secret for the project. Deliveries from now on are
        signed with it and, for ``overlap_seconds`` (default
        ``CHAZ_WEBHOOK_ROTATION_OVERLAP_SECONDS``, a day; 0 for none), with
        the replaced one too: give receivers the new secret within that time."""
        self._principal.require_operator("rotate the webhook signing secret")
        if overlap_seconds is None:
            overlap_seconds = self._svc.settings.webhook_rotation_overlap_seconds
        overlap = check_seconds("overlap_seconds", overlap_seconds)
        return self._svc.store.webhooks.rotate(
            self._principal.project, overlap=timedelta(seconds=overlap)
        )
