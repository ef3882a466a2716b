"""SQS transport (aiobotocore), for Amazon SQS or a server speaking its API: long-poll
ReceiveMessage, ChangeMessageVisibility renewed with each lease heartbeat, DeleteMessage after
the job's verdict committed, and a redrive policy that moves a message received too often to a
dead-letter queue (the relay's sweep republishes its job if it is still ready).

A queue that exists already (made by Terraform, say) is used as it is: its attributes are the
operator's, and each receive asks for the visibility jobgate needs. Only a missing queue is
created, with its dead-letter queue and redrive policy; an existing one without a redrive
policy is used with a warning (a message received too often then stays in the queue).

`sqs://QUEUE_NAME?endpoint_url=…&region=…`: credentials come from the usual AWS chain
(environment, profile, instance role), never from the URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import urllib.parse
from collections.abc import Sequence
from typing import Any

from aiobotocore.session import get_session
from botocore import exceptions as botocore_errors

from jobgate.transports.base import Delivery, TransportUnavailable

log = logging.getLogger(__name__)

MAX_RECEIVE_COUNT = 20  # receives of one message before the redrive policy moves it
_BATCH = 10  # SQS's batch limit
_ERRORS = (botocore_errors.BotoCoreError, botocore_errors.ClientError, OSError, TimeoutError)


def parse_url(url: str) -> tuple[str, str | None, str]:
    """(queue name, endpoint URL or None, region) from an `sqs://` URL."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qs(parts.query)
    queue = parts.netloc or parts.path.strip("/")
    endpoint = query.get("endpoint_url", [None])[0]
    region = query.get("region", ["us-east-1"])[0]
    return queue, endpoint, region


# How SQS (and servers speaking its API) name a missing queue, by API flavour (JSON, query).
_NO_QUEUE = ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")


def _code(exc: botocore_errors.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


async def _create_or_get(client: Any, name: str, attributes: dict[str, str]) -> str:
    """The URL of the queue `name`, created with `attributes`; one that exists with other
    attributes (made meanwhile by another process, or by the operator) is used as it is."""
    try:
        created = await client.create_queue(QueueName=name, Attributes=attributes)
    except botocore_errors.ClientError as exc:
        if _code(exc) != "QueueAlreadyExists":
            raise
        return str((await client.get_queue_url(QueueName=name))["QueueUrl"])
    log.info("created the SQS queue", extra={"queue": name})
    return str(created["QueueUrl"])


def _chunks(items: Sequence[Any]) -> list[Sequence[Any]]:
    return [items[i : i + _BATCH] for i in range(0, len(items), _BATCH)]


class SqsTransport:
    name = "sqs"

    def __init__(
        self,
        url: str,
        *,
        visibility_s: float,
        max_receive_count: int = MAX_RECEIVE_COUNT,
    ) -> None:
        self._queue_name, self._endpoint, self._region = parse_url(url)
        self._visibility_s = max(1, min(int(visibility_s), 43_200))
        self._max_receive_count = max_receive_count
        self._exit: contextlib.AsyncExitStack | None = None
        self._client: Any = None
        self._queue_url: str | None = None
        # One open at a time: a process's relay and intake share this transport and both
        # open it at start; two concurrent first opens made a client each, one of them then
        # dropped without being closed.
        self._opening = asyncio.Lock()

    async def open(self) -> None:
        if self._queue_url is not None:
            return
        async with self._opening:
            if self._queue_url is None:  # not opened by the call this one waited for
                await self._open()

    async def _open(self) -> None:
        try:
            if self._client is None:
                stack = contextlib.AsyncExitStack()
                self._client = await stack.enter_async_context(
                    get_session().create_client(
                        "sqs", region_name=self._region, endpoint_url=self._endpoint
                    )
                )
                self._exit = stack
            client = self._client
            queue_url = await self._existing(client) or await self._create(client)
        except _ERRORS as exc:
            raise TransportUnavailable(f"sqs: {type(exc).__name__}: {exc}") from exc
        if self._client is not client:  # closed while it was being declared
            raise TransportUnavailable("sqs: the transport was closed")
        self._queue_url = queue_url

    async def _existing(self, client: Any) -> str | None:
        """The queue's URL if it exists (warning when it has no redrive policy), else None."""
        try:
            found = await client.get_queue_url(QueueName=self._queue_name)
        except botocore_errors.ClientError as exc:
            if _code(exc) in _NO_QUEUE:
                return None
            raise
        queue_url = str(found["QueueUrl"])
        answer = await client.get_queue_attributes(
            QueueUrl=queue_url, AttributeNames=["RedrivePolicy"]
        )
        if "RedrivePolicy" not in answer.get("Attributes", {}):
            log.warning(
                "the SQS queue has no redrive policy: a message received too often is never "
                "dead-lettered (add one pointing to a dead-letter queue)",
                extra={"queue": self._queue_name},
            )
        return queue_url

    async def _create(self, client: Any) -> str:
        """Create the missing queue with its dead-letter queue and redrive policy."""
        dead_url = await _create_or_get(client, f"{self._queue_name}-dead", {})
        dead_attributes = await client.get_queue_attributes(
            QueueUrl=dead_url, AttributeNames=["QueueArn"]
        )
        redrive = {
            "deadLetterTargetArn": dead_attributes["Attributes"]["QueueArn"],
            "maxReceiveCount": str(self._max_receive_count),
        }
        attributes = {
            "VisibilityTimeout": str(self._visibility_s),
            "RedrivePolicy": json.dumps(redrive),
        }
        return await _create_or_get(client, self._queue_name, attributes)

    async def close(self) -> None:
        stack, self._exit, self._client, self._queue_url = self._exit, None, None, None
        if stack is not None:
            with contextlib.suppress(*_ERRORS):
                await stack.aclose()

    async def _call(self, method: str, **kwargs: Any) -> Any:
        await self.open()
        try:
            return await getattr(self._client, method)(QueueUrl=self._queue_url, **kwargs)
        except botocore_errors.ClientError as exc:
            if "NonExistentQueue" in str(exc):  # deleted behind our back: declare it again
                self._queue_url = None
            raise TransportUnavailable(f"sqs: {type(exc).__name__}: {exc}") from exc
        except _ERRORS as exc:
            raise TransportUnavailable(f"sqs: {type(exc).__name__}: {exc}") from exc

    async def publish(self, job_ids: Sequence[str]) -> None:
        for chunk in _chunks(job_ids):
            answer = await self._call(
                "send_message_batch",
                Entries=[{"Id": str(i), "MessageBody": job_id} for i, job_id in enumerate(chunk)],
            )
            if answer.get("Failed"):
                raise TransportUnavailable(f"sqs: {len(answer['Failed'])} messages refused")

    async def receive(self, *, max_count: int, wait_s: float) -> list[Delivery]:
        answer = await self._call(
            "receive_message",
            MaxNumberOfMessages=max(1, min(max_count, _BATCH)),
            WaitTimeSeconds=max(0, min(math.ceil(wait_s), 20)),  # long poll
            VisibilityTimeout=self._visibility_s,  # whatever the queue's own default is
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
        )
        return [
            Delivery(
                message["Body"],
                int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1)),
                message["ReceiptHandle"],
            )
            for message in answer.get("Messages", [])
        ]

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        for chunk in _chunks(deliveries):
            await self._call(
                "delete_message_batch",
                Entries=[{"Id": str(i), "ReceiptHandle": d.handle} for i, d in enumerate(chunk)],
            )

    async def release(self, deliveries: Sequence[Delivery]) -> None:
        await self._change_visibility(deliveries, 0)  # visible again now

    def credit(self) -> None:
        return None  # SQS's own bound (120,000 in flight per queue) is far beyond a worker's

    def outstanding(self) -> list[Delivery]:
        return []

    async def extend(self, deliveries: Sequence[Delivery], *, visibility_s: float) -> None:
        await self._change_visibility(deliveries, max(1, min(int(visibility_s), 43_200)))

    async def _change_visibility(self, deliveries: Sequence[Delivery], seconds: int) -> None:
        for chunk in _chunks(deliveries):
            await self._call(
                "change_message_visibility_batch",
                Entries=[
                    {"Id": str(i), "ReceiptHandle": d.handle, "VisibilityTimeout": seconds}
                    for i, d in enumerate(chunk)
                ],
            )

    async def lag(self) -> int:
        answer = await self._call(
            "get_queue_attributes",
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )
        attributes = answer.get("Attributes", {})
        return int(attributes.get("ApproximateNumberOfMessages", 0)) + int(
            attributes.get("ApproximateNumberOfMessagesNotVisible", 0)
        )
