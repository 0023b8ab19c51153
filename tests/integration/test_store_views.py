"""The read commands' views (chaz/store/views.py) read as the models they stand for."""

from __future__ import annotations

from typing import Any

from chaz.domain.entries import EntryType, NewEntry
from chaz.domain.jobs import JobStatus
from chaz.store import Store
from chaz.store.direct import DirectReads
from chaz.store.views import _EntryView, _JobView, _SessionView, _View
from chaz.usecases.completion import ended

pytest_plugins = ["tests.support.store_fixtures"]


def _fields(view_class: type[_View]) -> tuple[str, ...]:
    # Every name a view answers from its row, its properties included.
    own = tuple(n for n, v in vars(view_class).items() if isinstance(v, property))
    return (*view_class.PLAIN, *view_class.TIMES, *own)


def _same(view: Any, model: Any, view_class: type[_View]) -> None:
    assert isinstance(view, view_class)
    for name in _fields(view_class):
        assert getattr(view, name) == getattr(model, name), name
        assert type(getattr(view, name)) is type(getattr(model, name)), name
    assert view._model is None  # nothing above built the model
    # Anything else comes from the model, its dump included.
    assert view.model_dump(mode="json") == model.model_dump(mode="json")
    assert view == model


def test_a_views_fields_are_its_models(store: Store) -> None:
    root = store.create_session("bot")
    # A fork's session, whose forked_from a view answers from two columns.
    s = store.create_session("bot", name="forked", fork=(root.id, 0))
    with store.admitting(s.id) as tx:
        job = tx.insert(NewEntry(EntryType.MESSAGE, "user:u", "hi", metadata={"k": 1})).job
    assert job is not None
    store.transition(job.id, JobStatus.CANCELLED, completion=ended)
    with store.admitting(s.id) as tx:
        tx.insert(NewEntry(EntryType.MESSAGE, "user:u", "again"))
    plain = DirectReads.open(store.url)
    viewed = DirectReads.open(store.url, views=True)
    assert plain is not None and viewed is not None
    try:
        for ref in (root.id, s.id):
            view, model = (
                viewed.session(ref, project="default"),
                plain.session(ref, project="default"),
            )
            _same(view, model, _SessionView)
        for v, m in zip(viewed.entries(s.id, after=0), plain.entries(s.id, after=0), strict=True):
            _same(v, m, _EntryView)
        kw: dict[str, Any] = dict(
            session_id=s.id, statuses=None, limit=10, newest_first=False, project=None
        )
        jobs = plain.jobs(**kw)
        assert len(jobs) == 2
        for jv, jm in zip(viewed.jobs(**kw), jobs, strict=True):
            _same(jv, jm, _JobView)
    finally:
        plain.close()
        viewed.close()
