"""The `anthropic` adapter: Messages called under the worker's lease, always streamed (so a long
generation keeps the connection alive and `request_timeout_s` bounds silence, not length) and
assembled into the same `message` object a non-streaming call returns; and Message Batches for
bulk jobs, which always run in the background: create, poll, fetch results, cancel.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import httpx
import orjson

from jobgate import errors
from jobgate.clock import Clock, SystemClock
from jobgate.config import ProviderConfig
from jobgate.providers import calls, error_codes
from jobgate.providers.background import ProviderEvent, ProviderJobRef, Snapshot, Status
from jobgate.providers.base import JSONObject, ProviderCall, ProviderResult, Usage, anthropic_usage
from jobgate.providers.streaming import DeltaSink
from jobgate.wire import anthropic_requests, sim

DEFAULT_BASE_URL = "https://api.anthropic.com"
MESSAGES = "/v1/messages"
BATCHES = "/v1/messages/batches"
ENDPOINTS = frozenset({MESSAGES, BATCHES})
MAX_BATCH_REQUESTS = 100_000
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_BATCH_ERRORS_RETRYABLE = frozenset({"overloaded_error", "api_error", "timeout_error"})
BATCH_ERRORED = "batch_errored"


def api_client(
    config: ProviderConfig, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """The HTTP client of an Anthropic-kind provider: its base URL, its API version, its
    x-api-key from the environment variable the config names."""
    headers = {"anthropic-version": config.anthropic_version}
    auth = calls.EnvKey(config.api_key_env, "x-api-key") if config.api_key_env else None
    # Paths carry the /v1 (as in Anthropic's SDK, whose base URL has none); forgive a
    # base_url written the OpenAI way.
    base_url = (config.base_url or DEFAULT_BASE_URL).rstrip("/").removesuffix("/v1")
    return calls.client(config, base_url=base_url, headers=headers, auth=auth, transport=transport)


class AnthropicProvider:
    kind = "anthropic"

    def __init__(
        self,
        name: str,
        config: ProviderConfig,
        *,
        clock: Clock | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.name = name
        self._config = config
        self._clock = clock or SystemClock()
        self._client = api_client(config, transport)
        self.idempotent_creates = config.idempotent_creates

    # -- submit-time checks ------------------------------------------------------------------

    def validate(self, endpoint: str, body: JSONObject) -> None:
        if endpoint not in ENDPOINTS:
            raise errors.InvalidRequest(
                f"provider {self.name!r} does not serve {endpoint!r} "
                f"(it serves {', '.join(sorted(ENDPOINTS))})",
                param="endpoint",
                code="unsupported_endpoint",
            )
        sim.directives(body)
        if endpoint == MESSAGES:
            _check_params(body, "body")
            return
        requests = body.get("requests")
        if not isinstance(requests, list) or not 1 <= len(requests) <= MAX_BATCH_REQUESTS:
            raise errors.InvalidRequest(
                f"body.requests must hold 1 to {MAX_BATCH_REQUESTS} requests",
                param="body.requests",
            )
        seen: set[str] = set()
        for index, item in enumerate(requests):
            where = f"body.requests[{index}]"
            custom_id = item.get("custom_id") if isinstance(item, dict) else None
            if not isinstance(custom_id, str) or not _CUSTOM_ID.match(custom_id):
                raise errors.InvalidRequest(
                    f"{where}.custom_id must be 1-64 letters, digits, _ or -",
                    param=f"{where}.custom_id",
                )
            if custom_id in seen:
                raise errors.InvalidRequest(
                    f"{where}.custom_id {custom_id!r} is not unique", param=f"{where}.custom_id"
                )
            seen.add(custom_id)
            params = item.get("params")
            if not isinstance(params, dict):
                raise errors.InvalidRequest(f"{where}.params is required", param=f"{where}.params")
            _check_params(params, f"{where}.params")

    def runs_in_background(self, endpoint: str) -> bool:
        return endpoint == BATCHES

    # -- Messages, streamed under the worker's lease -----------------------------------------

    async def call(self, call: ProviderCall) -> ProviderResult:
        return await self._messages(call, None)

    def streams(self, endpoint: str) -> bool:
        return endpoint == MESSAGES

    def prefills(self, endpoint: str) -> bool:
        """Messages continues a trailing assistant turn (prefill) that ends in no whitespace."""
        return endpoint == MESSAGES

    async def stream(self, call: ProviderCall, on_delta: DeltaSink) -> ProviderResult:
        """`call`, handing each text delta of the Messages stream on (live output)."""
        return await self._messages(call, on_delta)

    async def _messages(self, call: ProviderCall, on_delta: DeltaSink | None) -> ProviderResult:
        if call.endpoint != MESSAGES:
            raise errors.ProviderFatal(
                f"{call.endpoint} runs in the background, not as a call", code="internal_error"
            )
        sent, headers = calls.wire_body(call.body)
        sent["stream"] = True
        headers.update(
            {
                "idempotency-key": call.idempotency_key,
                "content-type": "application/json",
                "accept": "text/event-stream",
            }
        )
        request = self._client.build_request(
            "POST", "v1/messages", content=orjson.dumps(sent), headers=headers
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.TransportError as exc:
            raise self._transport_error(exc) from exc
        try:
            if not response.is_success:
                await response.aread()
                raise self._status_error(response)
            message = await self._assemble(response, call, on_delta)
        except httpx.TransportError as exc:
            # The provider accepted the request and was answering: its outcome is unknown.
            raise self._transport_error(exc) from exc
        except errors.ProviderError as exc:
            exc.request_id = exc.request_id or calls.request_id(response.headers)
            raise
        finally:
            await response.aclose()
        return ProviderResult(
            body=message,
            usage=anthropic_usage(message.get("usage")),
            provider_request_id=message.get("id"),
            request_id=calls.request_id(response.headers),
        )

    # -- Message Batches ---------------------------------------------------------------------

    async def create(self, call: ProviderCall) -> Snapshot:
        requests = [
            {"custom_id": item["custom_id"], "params": calls.wire_body(item["params"])[0]}
            for item in call.body["requests"]
        ]
        _, headers = calls.wire_body(call.body)
        headers["idempotency-key"] = call.idempotency_key
        headers["content-type"] = "application/json"
        payload = await self._json(
            "POST",
            "v1/messages/batches",
            content=orjson.dumps({"requests": requests}),
            headers=headers,
        )
        return batch_snapshot(payload)

    async def retrieve(self, ref: ProviderJobRef) -> Snapshot:
        payload = await self._json("GET", f"v1/messages/batches/{ref.provider_job_id}")
        return await self._why_errored(ref, batch_snapshot(payload))

    async def _why_errored(self, ref: ProviderJobRef, snapshot: Snapshot) -> Snapshot:
        """A batch whose every request errored: the counts do not say why, the results file
        does. All server-side errors (`api_error`, `overloaded_error`): retryable, like the
        same error on a Messages call; any request error among them: fatal."""
        if snapshot.error is None or snapshot.error.code != BATCH_ERRORED:
            return snapshot
        lines = await self._result_lines(ref)
        kinds = {kind for item in lines if (kind := _result_error_type(item)) is not None}
        if not kinds or not kinds <= _BATCH_ERRORS_RETRYABLE:
            return snapshot
        error = errors.ProviderRetryable(
            f"every request of the batch errored at the provider ({', '.join(sorted(kinds))})",
            code=BATCH_ERRORED,
        )
        return dataclasses.replace(snapshot, error=error)

    async def _result_lines(self, ref: ProviderJobRef) -> list[JSONObject]:
        # The results file is read from the configured base URL, never from the `results_url`
        # the answer names: the API key goes to the configured host only.
        path = f"v1/messages/batches/{ref.provider_job_id}/results"
        try:
            response = await self._client.get(path)
        except httpx.TransportError as exc:
            raise calls.classify_transport(exc, creates=False) from exc
        if not response.is_success:
            raise self._status_error(response)
        lines = []
        for line in response.text.splitlines():
            if not line.strip():
                continue
            try:
                item = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise errors.ProviderRetryable(
                    "the batch results file has a line that is not JSON", code="bad_response"
                ) from exc
            if isinstance(item, dict):
                lines.append(item)
        return lines

    async def fetch_result(self, ref: ProviderJobRef, snapshot: Snapshot) -> ProviderResult:
        results = []
        usage = Usage()
        for item in await self._result_lines(ref):
            results.append(item)
            result = item.get("result") or {}
            if result.get("type") == "succeeded":
                usage += anthropic_usage((result.get("message") or {}).get("usage"))
        return ProviderResult(
            body={"object": "message_batch.results", "batch": snapshot.body, "results": results},
            usage=usage,
            provider_request_id=ref.provider_job_id,
        )

    async def cancel(self, ref: ProviderJobRef) -> Snapshot:
        try:
            payload = await self._json("POST", f"v1/messages/batches/{ref.provider_job_id}/cancel")
        except errors.ProviderFatal as exc:
            if exc.status_code in (405, 501):
                raise errors.ProviderCancelUnsupported(
                    f"provider {self.name!r} cannot cancel batches", status_code=exc.status_code
                ) from exc
            if exc.status_code in (400, 409) and not isinstance(exc, errors.ProviderQuotaExceeded):
                # A batch that has ended cannot be canceled: too late; answer where it stands.
                snapshot = await self.retrieve(ref)  # what the job is: never a second cancel
                if snapshot.terminal:
                    return snapshot
                raise errors.ProviderCancelUnsupported(
                    f"provider {self.name!r} refused to cancel a batch ({exc.message})",
                    status_code=exc.status_code,
                ) from exc
            raise
        return await self._why_errored(ref, batch_snapshot(payload))

    def webhook_event(self, payload: JSONObject) -> ProviderEvent | None:
        return None  # Anthropic sends no webhooks for batches: the reconciler polls

    async def aclose(self) -> None:
        await self._client.aclose()

    # -- plumbing ----------------------------------------------------------------------------

    async def _json(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> JSONObject:
        try:
            response = await self._client.request(method, path, content=content, headers=headers)
        except httpx.TransportError as exc:
            raise calls.classify_transport(
                exc, creates=content is not None, safe_to_retry=self.idempotent_creates
            ) from exc
        if not response.is_success:
            raise self._status_error(response)
        return calls.decode_json(response)

    def _status_error(self, response: httpx.Response) -> errors.ProviderError:
        return calls.classify_status(
            response,
            now=self._clock.now(),
            default_retry_after_s=self._config.retry_after_default_s,
        )

    def _transport_error(self, exc: httpx.TransportError) -> errors.ProviderError:
        return calls.classify_transport(exc, creates=True, safe_to_retry=self.idempotent_creates)

    async def _assemble(
        self, response: httpx.Response, call: ProviderCall, on_delta: DeltaSink | None
    ) -> JSONObject:
        """Build the complete `message` from a Messages event stream, handing each text delta
        to `on_delta` as it arrives. An `error` event is classified by its type and code as
        the same error answered as an HTTP status would be (providers.error_codes)."""
        try:
            return await _assemble(response, call.stall_timeout_s, on_delta)
        except _StreamError as reported:
            raise error_codes.stream_error(
                reported.error,
                response_headers=response.headers,
                now=self._clock.now(),
                default_retry_after_s=self._config.retry_after_default_s,
            ) from None
        except _EndedEarly as ended:
            # Accepted and answering: whatever it did is billed, its outcome unknown.
            raise errors.ProviderOutcomeUnknown(
                str(ended), safe_to_retry=self.idempotent_creates
            ) from None


def _check_params(params: JSONObject, where: str) -> None:
    problem = anthropic_requests.validate_messages(params)
    if problem is not None:
        raise errors.InvalidRequest(f"{where}.{problem}", param=where)
    if "stream" in params:
        raise errors.InvalidRequest(
            f"{where}.stream: jobgate streams on its own and stores the whole message",
            param=f"{where}.stream",
        )


class _StreamError(Exception):
    def __init__(self, error: Any) -> None:
        super().__init__("an error event")
        self.error = error


class _EndedEarly(Exception):
    pass


async def _assemble(
    response: httpx.Response, stall_timeout_s: float | None, on_delta: DeltaSink | None = None
) -> JSONObject:
    """Build the complete `message` from a Messages event stream, handing each text delta to
    `on_delta` as it arrives; raises _StreamError for an `error` event, _EndedEarly for a
    stream that stopped short."""
    message: JSONObject | None = None
    blocks: dict[int, JSONObject] = {}
    partial_json: dict[int, list[str]] = {}
    events = calls.server_sent_events(response, stall_timeout_s=stall_timeout_s)
    async for _event, data in events:
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise _EndedEarly("the event stream carried invalid JSON") from exc
        kind = payload.get("type")
        if kind == "message_start":
            message = dict(payload["message"])
        elif kind == "content_block_start":
            blocks[payload["index"]] = dict(payload["content_block"])
        elif kind == "content_block_delta":
            delta = payload["delta"]
            _apply_delta(blocks[payload["index"]], delta, partial_json, payload["index"])
            if on_delta is not None and delta.get("type") == "text_delta" and delta.get("text"):
                await on_delta(delta["text"])
        elif kind == "content_block_stop":
            index = payload["index"]
            if index in partial_json:
                text = "".join(partial_json.pop(index))
                blocks[index]["input"] = orjson.loads(text) if text else {}
        elif kind == "message_delta" and message is not None:
            message.update({k: v for k, v in payload.get("delta", {}).items() if k != "usage"})
            usage = dict(message.get("usage") or {})
            usage.update({k: v for k, v in (payload.get("usage") or {}).items() if v is not None})
            message["usage"] = usage
        elif kind == "message_stop" and message is not None:
            message["content"] = [blocks[index] for index in sorted(blocks)]
            return message
        elif kind == "error":
            raise _StreamError(payload.get("error"))
    raise _EndedEarly("the event stream ended before message_stop")


def _apply_delta(
    block: JSONObject, delta: JSONObject, partial_json: dict[int, list[str]], index: int
) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = block.get("text", "") + delta.get("text", "")
    elif kind == "input_json_delta":
        partial_json.setdefault(index, []).append(delta.get("partial_json", ""))
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
    elif kind == "signature_delta":
        block["signature"] = delta.get("signature", "")
    elif kind == "citations_delta":
        block["citations"] = [*(block.get("citations") or []), delta.get("citation")]


def batch_snapshot(payload: JSONObject) -> Snapshot:
    """An Anthropic `message_batch` object, as a Snapshot. An ended batch that produced
    anything needs its results file fetched."""
    batch_id = payload.get("id")
    if not isinstance(batch_id, str) or not batch_id:
        raise errors.ProviderRetryable("the batch object has no id", code="bad_response")
    processing = payload.get("processing_status")
    if processing == "canceling":
        return Snapshot(batch_id, Status.CANCELLING, payload)
    if processing != "ended":
        return Snapshot(batch_id, Status.IN_PROGRESS, payload)
    counts = payload.get("request_counts") or {}
    succeeded = int(counts.get("succeeded") or 0)
    if payload.get("cancel_initiated_at") and int(counts.get("canceled") or 0):
        return Snapshot(batch_id, Status.CANCELLED, payload, needs_result=succeeded > 0)
    if succeeded:
        return Snapshot(batch_id, Status.COMPLETED, payload, needs_result=True)
    if int(counts.get("expired") or 0) and not int(counts.get("errored") or 0):
        error: errors.ProviderError = errors.ProviderRetryable(
            "every request of the batch expired before the provider ran it", code="batch_expired"
        )
    else:
        error = errors.ProviderFatal("every request of the batch errored", code=BATCH_ERRORED)
    return Snapshot(batch_id, Status.FAILED, payload, error=error)


def _result_error_type(item: JSONObject) -> str | None:
    """The error type of an `errored` results line (`{"type": "error", "error": {"type"}}`,
    or the bare error object of older answers); None for any other line."""
    result = item.get("result")
    if not isinstance(result, dict) or result.get("type") != "errored":
        return None
    error = result.get("error")
    if isinstance(error, dict) and isinstance(error.get("error"), dict):
        error = error["error"]
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else "api_error"
