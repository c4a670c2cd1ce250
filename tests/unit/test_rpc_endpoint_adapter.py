"""``rpc._EndpointAdapter``: how an endpoint's methods meet oslo.messaging's dispatcher.

The dispatcher looks a method up twice per message (``hasattr``, then ``getattr``); the
adapter builds each adapted method once and keeps it. What it exposes must not change:
public methods only, the (ctxt, **kwargs) signature, domain errors as expected ones.
"""

from __future__ import annotations

import oslo_messaging
import pytest

from acceld import exception, rpc


class Endpoint:
    def __init__(self) -> None:
        self.calls = 0

    def add(self, a: int, b: int) -> int:
        self.calls += 1
        return a + b

    def missing(self, uuid: str) -> None:
        raise exception.AcceleratorNotFound(f"Accelerator {uuid} not found.")

    def _private(self) -> None:
        raise AssertionError("never exposed")


def test_each_method_is_adapted_once_and_called_with_the_keywords() -> None:
    endpoint = Endpoint()
    adapter = rpc._EndpointAdapter(endpoint)
    first = adapter.add
    assert adapter.add is first                      # kept, not built again
    assert adapter.add({"request_id": "r"}, a=2, b=3) == 5
    assert endpoint.calls == 1


def test_only_public_existing_methods_are_exposed() -> None:
    adapter = rpc._EndpointAdapter(Endpoint())
    assert not hasattr(adapter, "_private")
    assert not hasattr(adapter, "nothing_here")
    assert not hasattr(adapter, "nothing_here")      # a miss is not kept either


def test_domain_errors_are_expected_and_keep_their_class() -> None:
    adapter = rpc._EndpointAdapter(Endpoint())
    with pytest.raises(oslo_messaging.ExpectedException) as raised:
        adapter.missing({}, uuid="u1")
    assert isinstance(raised.value.exc_info[1], exception.AcceleratorNotFound)
