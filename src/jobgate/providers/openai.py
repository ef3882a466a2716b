"""The `openai` adapter: Chat Completions called under the worker's lease, and the Responses
API either the same way (`mode = "sync"`) or in OpenAI's background mode (`mode =
"background"`: create with `background: true` and the job id in `metadata`, then the
reconciler retrieves it and cancels it at the provider). Any OpenAI-compatible server (vLLM,
Ollama, LiteLLM, OpenRouter, `jobgate simulator`) works through `base_url`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import orjson

from jobgate import errors
from jobgate.clock import Clock, SystemClock
from jobgate.config import ProviderConfig
from jobgate.providers import calls, openai_stream
from jobgate.providers.background import ProviderEvent, ProviderJobRef, Snapshot
from jobgate.providers.base import JSONObject, ProviderCall, ProviderResult, openai_usage
from jobgate.providers.response_snapshots import response_snapshot
from jobgate.providers.streaming import DeltaSink
from jobgate.wire import openai_requests, sim

DEFAULT_BASE_URL = "https://api.openai.com/v1"
CHAT_COMPLETIONS = "/v1/chat/completions"
RESPONSES = "/v1/responses"
# Endpoints an OpenAI-compatible server answers whole, with nothing to stream or reconcile:
# the call posts the body to the same path and keeps the answer (batch lines use them too).
PLAIN = {"/v1/embeddings": "embeddings", "/v1/completions": "completions"}
ENDPOINTS = frozenset({CHAT_COMPLETIONS, RESPONSES, *PLAIN})
JOB_ID_METADATA = "jobgate_job_id"
SYNC_POLL_INTERVAL_S = 1.0


def api_client(
    config: ProviderConfig, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """The HTTP client of an OpenAI-kind provider: its base URL, its Bearer key from the
    environment variable the config names."""
    auth = None
    if config.api_key_env:
        auth = calls.EnvKey(config.api_key_env, "authorization", "Bearer ")
    return calls.client(
        config,
        base_url=config.base_url or DEFAULT_BASE_URL,
        headers={},
        auth=auth,
        transport=transport,
    )


class OpenAIProvider:
    kind = "openai"

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
        if body.get("stream"):
            raise errors.InvalidRequest(
                "body.stream: jobgate stores the whole answer; read it from the job",
                param="body.stream",
            )
        if endpoint == CHAT_COMPLETIONS:
            openai_requests.validate_chat(body)
            return
        if endpoint in PLAIN:
            if not isinstance(body.get("model"), str) or not body["model"]:
                raise errors.InvalidRequest("body.model is required", param="body.model")
            return
        problem = openai_requests.validate_responses(body)
        if problem is not None:
            raise errors.InvalidRequest(f"body.{problem}", param="body")
        if "background" in body:
            raise errors.InvalidRequest(
                "body.background: set by jobgate from the provider's configured mode",
                param="body.background",
            )
        _check_metadata(body.get("metadata"))

    def runs_in_background(self, endpoint: str) -> bool:
        return endpoint == RESPONSES and self._config.mode == "background"

    # -- sync calls, under the worker's lease ------------------------------------------------

    async def call(self, call: ProviderCall) -> ProviderResult:
        if call.endpoint == CHAT_COMPLETIONS or call.endpoint in PLAIN:
            path = PLAIN.get(call.endpoint, "chat/completions")
            payload, request_id = await self._post(
                path, call.body, idempotency_key=call.idempotency_key
            )
            return ProviderResult(
                body=payload,
                usage=openai_usage(payload.get("usage")),
                provider_request_id=payload.get("id"),
                request_id=request_id,
            )
        payload, request_id = await self._post(
            "responses", call.body, idempotency_key=call.idempotency_key
        )
        snapshot = self._snapshot(payload)
        # A server that chose to run it in the background anyway: wait for it here.
        ref = ProviderJobRef(call.job_id, snapshot.provider_job_id, call.endpoint, call.model)
        while not snapshot.terminal:
            await self._clock.sleep(SYNC_POLL_INTERVAL_S)
            snapshot = await self.retrieve(ref)
        return dataclasses.replace(_result_or_raise(snapshot), request_id=request_id)

    # -- live output streaming (providers/openai_stream.py) -----------------------------------

    def streams(self, endpoint: str) -> bool:
        return endpoint in (CHAT_COMPLETIONS, RESPONSES) and not self.runs_in_background(endpoint)

    def prefills(self, endpoint: str) -> bool:
        """A trailing assistant message is continued only where the configuration says the
        server does so (`assistant_prefill`), and only on Chat Completions."""
        return self._config.assistant_prefill and endpoint == CHAT_COMPLETIONS

    async def stream(self, call: ProviderCall, on_delta: DeltaSink) -> ProviderResult:
        """`call` with `stream: true`, handing each text delta on as it arrives."""
        if call.endpoint == CHAT_COMPLETIONS:
            return await openai_stream.chat(self, call, on_delta)
        return await openai_stream.responses(self, call, on_delta)

    # -- background mode ---------------------------------------------------------------------

    async def create(self, call: ProviderCall) -> Snapshot:
        metadata = dict(call.body.get("metadata") or {})
        metadata[JOB_ID_METADATA] = call.job_id
        body = {**call.body, "background": True, "store": True, "metadata": metadata}
        created, _ = await self._post("responses", body, idempotency_key=call.idempotency_key)
        return self._snapshot(created)

    async def retrieve(self, ref: ProviderJobRef) -> Snapshot:
        return self._snapshot(await self._send("GET", f"responses/{ref.provider_job_id}"))

    async def fetch_result(self, ref: ProviderJobRef, snapshot: Snapshot) -> ProviderResult:
        return _result_or_raise(snapshot)

    async def cancel(self, ref: ProviderJobRef) -> Snapshot:
        try:
            payload = await self._send("POST", f"responses/{ref.provider_job_id}/cancel")
        except errors.ProviderFatal as exc:
            if exc.status_code in (404, 405, 501):
                # No cancel route (many OpenAI-compatible servers): jobgate cancels locally.
                raise errors.ProviderCancelUnsupported(
                    f"provider {self.name!r} cannot cancel responses ({exc.message})",
                    status_code=exc.status_code,
                ) from exc
            if exc.status_code in (400, 409) and not isinstance(exc, errors.ProviderQuotaExceeded):
                # OpenAI refuses to cancel a response that already finished ("Cannot cancel a
                # completed response", 400): too late, so answer with where it stands.
                return await self._refused_cancel(ref, exc)
            raise
        return self._snapshot(payload)

    async def _refused_cancel(self, ref: ProviderJobRef, exc: errors.ProviderFatal) -> Snapshot:
        snapshot = await self.retrieve(ref)
        if snapshot.terminal:
            return snapshot
        raise errors.ProviderCancelUnsupported(
            f"provider {self.name!r} refused to cancel a running response ({exc.message})",
            status_code=exc.status_code,
        ) from exc

    def webhook_event(self, payload: JSONObject) -> ProviderEvent | None:
        event_type = payload.get("type")
        data = payload.get("data")
        if not isinstance(event_type, str) or not event_type.startswith("response."):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            return None
        return ProviderEvent(event_type, data["id"])

    async def aclose(self) -> None:
        await self._client.aclose()

    # -- plumbing ----------------------------------------------------------------------------

    async def _post(
        self, path: str, body: JSONObject, *, idempotency_key: str
    ) -> tuple[JSONObject, str | None]:
        """A create: sent once; an answer lost after sending is an unknown outcome. Answers
        the body and the provider's request id."""
        sent, headers = calls.wire_body(body)
        headers["idempotency-key"] = idempotency_key
        headers["content-type"] = "application/json"
        response = await self._answer("POST", path, content=orjson.dumps(sent), headers=headers)
        return calls.decode_json(response), calls.request_id(response.headers)

    async def _send(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> JSONObject:
        return calls.decode_json(await self._answer(method, path, content=content, headers=headers))

    async def _answer(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """A request's successful answer; failures raised classified."""
        creates = content is not None
        try:
            response = await self._client.request(method, path, content=content, headers=headers)
        except httpx.TransportError as exc:
            raise calls.classify_transport(
                exc, creates=creates, safe_to_retry=self.idempotent_creates
            ) from exc
        if not response.is_success:
            raise calls.classify_status(
                response,
                now=self._clock.now(),
                default_retry_after_s=self._config.retry_after_default_s,
            )
        return response

    def _snapshot(self, payload: JSONObject) -> Snapshot:
        return response_snapshot(payload)


MAX_METADATA_PAIRS = 15  # OpenAI allows 16; jobgate adds its job id
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512


def _check_metadata(metadata: Any) -> None:
    """OpenAI's metadata limits, checked at submit: the provider would refuse the create
    with 400 after the job was accepted."""
    if metadata is None:
        return
    fits = isinstance(metadata, dict) and len(metadata) <= MAX_METADATA_PAIRS
    if fits:
        fits = all(
            isinstance(key, str)
            and len(key) <= MAX_METADATA_KEY
            and isinstance(value, str)
            and len(value) <= MAX_METADATA_VALUE
            for key, value in metadata.items()
        )
    if not fits:
        raise errors.InvalidRequest(
            f"body.metadata must be an object of at most {MAX_METADATA_PAIRS} string pairs "
            f"(jobgate adds {JOB_ID_METADATA}), keys up to {MAX_METADATA_KEY} characters and "
            f"values up to {MAX_METADATA_VALUE}",
            param="body.metadata",
        )


def _result_or_raise(snapshot: Snapshot) -> ProviderResult:
    if snapshot.result is not None:
        return snapshot.result
    if snapshot.error is not None:
        raise snapshot.error
    raise errors.ProviderFatal(
        f"the response ended {snapshot.status} at the provider", code=f"response_{snapshot.status}"
    )
