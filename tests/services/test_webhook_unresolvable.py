"""Registering a webhook whose host does not resolve (e.g. no DNS offline) is refused with a
message that says why and what to set, instead of a bare `gaierror`."""

from __future__ import annotations

import socket

import pytest

from jobgate import errors
from jobgate.domain import ssrf
from jobgate.services.webhook_guard import UrlGuard


async def no_dns(host: str, port: int) -> list[str]:
    raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")


async def test_an_unresolvable_host_is_refused_with_the_reason_and_the_way_out() -> None:
    guard = UrlGuard(ssrf.UrlPolicy(), resolver=no_dns)
    with pytest.raises(errors.WebhookUrlRefused) as caught:
        await guard.resolve("https://example.com/jobgate")
    refused = caught.value
    assert refused.reason == "unresolvable" and refused.permanent is False
    message = str(refused)
    assert "cannot resolve example.com (Temporary failure in name resolution)" in message
    assert "gaierror" not in message
    assert "checked again at each delivery" in message
    assert "JOBGATE_WEBHOOK_ALLOW_HTTP=1" in message and "JOBGATE_WEBHOOK_ALLOW_CIDRS" in message
