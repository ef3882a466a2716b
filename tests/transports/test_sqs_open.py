"""SqsTransport.open under concurrency, against moto's server: a process's relay and intake share
one transport and open it together at start; the broker tests' connection cut closes it while
another task is opening it. A queue that exists already (made by Terraform, say) is used as it
is; only a missing one is created, with its dead-letter queue."""

from __future__ import annotations

import asyncio
import json
import logging
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


def _named(queue: str) -> SqsTransport:
    url = f"sqs://{queue}?endpoint_url={moto_endpoint()}&region=us-east-1"
    return SqsTransport(url, visibility_s=30)


def _sqs() -> Any:
    return get_session().create_client("sqs", region_name="us-east-1", endpoint_url=moto_endpoint())


async def _attributes(client: Any, queue: str) -> dict[str, str]:
    url = (await client.get_queue_url(QueueName=queue))["QueueUrl"]
    answer = await client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    return dict(answer["Attributes"])


async def test_an_existing_queue_is_used_as_it_is(caplog: pytest.LogCaptureFixture) -> None:
    """Made by Terraform with its own attributes (here a 1 s visibility and no redrive
    policy): jobgate uses it unchanged, warns that nothing dead-letters, creates no queue of
    its own, and keeps a received message hidden for its own visibility, not the queue's."""
    queue = unique("jobgate-terraform")
    async with _sqs() as client:
        await client.create_queue(QueueName=queue, Attributes={"VisibilityTimeout": "1"})
        transport = _named(queue)
        try:
            with caplog.at_level(logging.WARNING, logger="jobgate.transports.sqs"):
                await transport.open()
            warned = [r for r in caplog.records if "no redrive policy" in r.getMessage()]
            assert len(warned) == 1
            await transport.publish(["job_1"])
            got = await transport.receive(max_count=10, wait_s=1)
            assert [d.job_id for d in got] == ["job_1"]
            # Long past the queue's 1 s: still hidden (jobgate asked for 30 s on receive).
            assert await transport.receive(max_count=10, wait_s=3) == []
            attributes = await _attributes(client, queue)
            assert attributes["VisibilityTimeout"] == "1" and "RedrivePolicy" not in attributes
            with pytest.raises(client.exceptions.QueueDoesNotExist):
                await client.get_queue_url(QueueName=f"{queue}-dead")
        finally:
            await transport.close()


async def test_an_existing_queue_with_a_redrive_policy_opens_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = unique("jobgate-terraform")
    async with _sqs() as client:
        dead = await client.create_queue(QueueName=f"{queue}-dlq")
        arn = (
            await client.get_queue_attributes(
                QueueUrl=dead["QueueUrl"], AttributeNames=["QueueArn"]
            )
        )["Attributes"]["QueueArn"]
        redrive = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "5"})
        await client.create_queue(QueueName=queue, Attributes={"RedrivePolicy": redrive})
        transport = _named(queue)
        try:
            with caplog.at_level(logging.INFO, logger="jobgate.transports.sqs"):
                await transport.open()
            assert [r.getMessage() for r in caplog.records if r.name == sqs.__name__] == []
            kept = json.loads((await _attributes(client, queue))["RedrivePolicy"])
            assert kept["deadLetterTargetArn"] == arn and int(kept["maxReceiveCount"]) == 5
        finally:
            await transport.close()


async def test_a_missing_queue_is_created_with_its_dead_letter_queue() -> None:
    queue = unique("jobgate-new")
    transport = _named(queue)
    try:
        await transport.open()
        async with _sqs() as client:
            attributes = await _attributes(client, queue)
            dead = await _attributes(client, f"{queue}-dead")
        assert attributes["VisibilityTimeout"] == "30"
        redrive = json.loads(attributes["RedrivePolicy"])
        assert redrive["deadLetterTargetArn"] == dead["QueueArn"]
        assert int(redrive["maxReceiveCount"]) == sqs.MAX_RECEIVE_COUNT
    finally:
        await transport.close()
