"""Fixtures shared by the functional tests."""

from __future__ import annotations

import pytest

from acceld.api import router


@pytest.fixture
def dispatched(monkeypatch):
    """The requests (path and query) that went through routing and a handler: a list
    answered from the router's store of whole answers is not among them."""
    seen: list[str] = []
    real = router.Router._dispatch

    def counting(self, req):
        seen.append(req.path_qs)
        return real(self, req)

    monkeypatch.setattr(router.Router, "_dispatch", counting)
    return seen
