"""SqsTransport.open under concurrency, against moto's server: a process's relay and intake share
one transport and open it together at start; the broker tests' connection cut closes it while
another task is opening it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiobotocore.session import get_session

from jobgate.testing import eventually
from jobgate.transports import sqs
from jobgate.transports.base import TransportUnavailable
from jobgate.transports.sqs import SqsTransport
from tests.transports.brokers import unique
from tests.transports.sqs_broker import moto_endpoint

pytestmark = pytest.mark.asyncio


def _transport() -> SqsTransport:
    url = f"sqs://{unique('jobgate-open')}?endpoint_url={moto_endpoint()}&region=us-east-1"
    return SqsTransport(url, visibility_s=30)


def _created_clients(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every SQS client the transport module creates from now on (the real ones). Each takes a
    moment to make, as on AWS, where the credential chain may ask the instance metadata
    service over HTTP; with moto's environment credentials it never gives up the loop."""
    created: list[Any] = []

    class Creating:
        def __init__(self, context: Any) -> None:
            self._context = context

        async def __aenter__(self) -> Any:
            await asyncio.sleep(0.01)
            return await self._context.__aenter__()

        async def __aexit__(self, *exc_info: Any) -> Any:
            return await self._context.__aexit__(*exc_info)

    class Session:
        def __init__(self) -> None:
            self._session = get_session()

        def create_client(self, *args: Any, **kwargs: Any) -> Any:
            created.append(kwargs.get("endpoint_url"))
            return Creating(self._session.create_client(*args, **kwargs))

    monkeypatch.setattr(sqs, "get_session", Session)
    return created


async def test_concurrent_first_opens_make_one_client(monkeypatch: pytest.MonkeyPatch) -> None:
    created = _created_clients(monkeypatch)
    transport = _transport()
    try:
        await asyncio.gather(*(transport.open() for _ in range(5)))
        assert len(created) == 1  # was 5: four clients opened and dropped unclosed
        await transport.publish(["job_1"])
        deliveries = await transport.receive(max_count=10, wait_s=1)
        assert [d.job_id for d in deliveries] == ["job_1"]
    finally:
        await transport.close()


async def test_a_close_during_an_open_leaves_it_closed_and_reopenable() -> None:
    transport = _transport()
    opening = asyncio.create_task(transport.open())
    try:
        # The client exists: the queues are being declared (a few ms over HTTP).
        await eventually(lambda: transport._client is not None, interval_s=0)
        await transport.close()
        with pytest.raises(TransportUnavailable):
            await opening
        await transport.publish(["job_2"])
        deliveries = await transport.receive(max_count=10, wait_s=1)
        assert [d.job_id for d in deliveries] == ["job_2"]
    finally:
        opening.cancel()
        await transport.close()
