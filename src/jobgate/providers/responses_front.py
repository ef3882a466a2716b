"""How /v1/responses jobs reach a provider: natively (its own Responses API), or translated to
the wire it speaks (Chat Completions, Anthropic Messages) and back, so that every provider
behind jobgate answers Responses.

The stored request is the client's Responses body. A response that continues earlier turns
(`previous_response_id`, `conversation`) carries them in its stored request: every wire gets
them joined to its `input` (wire.response_items.upstream). A native provider gets it without the
members that only concern jobgate (`background`: jobgate runs every response as a job, and
the provider's configured mode decides how it reaches the provider). A translated provider
gets the translated request; its answer comes back as a Response object, which is what the
job stores as its result. Other endpoints pass through untouched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

from jobgate import errors
from jobgate.clock import Clock, SystemClock
from jobgate.config import DEFAULT_MAX_OUTPUT_TOKENS
from jobgate.domain import responses
from jobgate.providers import background, streaming
from jobgate.providers.background import ProviderEvent, ProviderJobRef, Snapshot
from jobgate.providers.base import (
    JSONObject,
    Provider,
    ProviderCall,
    ProviderResult,
    anthropic_usage,
    openai_usage,
)
from jobgate.wire import response_items, responses_chat, responses_messages

Wire = Literal["native", "chat_completions", "messages"]
# Members of a stored Responses body that never go to a provider.
FRONT_ONLY = frozenset({"background", "stream", "stream_options"})


class ResponsesFront:
    """A Provider that serves /v1/responses on `inner` over `wire`; `output_bound` is the
    largest output cap the provider allows a model (its configuration's), which sizes a
    translated request that must name one."""

    def __init__(
        self,
        inner: Provider,
        wire: Wire,
        *,
        clock: Clock | None = None,
        output_bound: Callable[[str | None], int] | None = None,
    ) -> None:
        self.inner = inner
        self.wire = wire
        self.name = inner.name
        self.kind = inner.kind
        self._clock = clock or SystemClock()
        self._output_bound = output_bound or (lambda _model: DEFAULT_MAX_OUTPUT_TOKENS)

    @property
    def idempotent_creates(self) -> bool:
        return bool(getattr(self.inner, "idempotent_creates", False))

    def translate(self, body: JSONObject) -> tuple[str, JSONObject]:
        """The endpoint and body the provider receives for a Responses body."""
        sent = response_items.upstream(
            {key: value for key, value in body.items() if key not in FRONT_ONLY}
        )
        if self.wire == "chat_completions":
            return responses_chat.ENDPOINT, responses_chat.to_chat(sent)
        if self.wire == "messages":
            model = sent.get("model")
            bound = self._output_bound(model if isinstance(model, str) else None)
            return responses_messages.ENDPOINT, responses_messages.to_messages(
                sent, output_bound=bound
            )
        return responses.ENDPOINT, sent

    def validate(self, endpoint: str, body: JSONObject) -> None:
        if endpoint != responses.ENDPOINT:
            self.inner.validate(endpoint, body)
            return
        wire_endpoint, wire_body = self.translate(body)
        try:
            self.inner.validate(wire_endpoint, wire_body)
        except errors.InvalidRequest as exc:
            if self.wire == "native":
                raise
            # The translated request is what the provider refused: say so.
            raise errors.InvalidRequest(
                f"{exc.message} (in the {wire_endpoint} request translated from this one)",
                param=exc.param,
                code=exc.code,
            ) from exc

    def runs_in_background(self, endpoint: str) -> bool:
        if endpoint == responses.ENDPOINT and self.wire != "native":
            return False
        return background.background_for(self.inner, endpoint) is not None

    async def call(self, call: ProviderCall) -> ProviderResult:
        if call.endpoint != responses.ENDPOINT:
            return await self.inner.call(call)
        wire_endpoint, wire_body = self.translate(call.body)
        answer = await self.inner.call(
            dataclasses.replace(call, endpoint=wire_endpoint, body=wire_body)
        )
        return self._from_wire(call, answer)

    # -- live output streaming: the inner provider's stream, answered as a Response --------

    def streams(self, endpoint: str) -> bool:
        if endpoint == responses.ENDPOINT and self.wire == "chat_completions":
            endpoint = responses_chat.ENDPOINT
        elif endpoint == responses.ENDPOINT and self.wire == "messages":
            endpoint = responses_messages.ENDPOINT
        return streaming.streaming_for(self.inner, endpoint) is not None

    def prefills(self, endpoint: str) -> bool:
        """Whether a trailing assistant input item is continued: by the wire a Responses body
        is translated to (a trailing assistant message there), else by the provider itself."""
        if endpoint == responses.ENDPOINT and self.wire == "chat_completions":
            endpoint = responses_chat.ENDPOINT
        elif endpoint == responses.ENDPOINT and self.wire == "messages":
            endpoint = responses_messages.ENDPOINT
        return streaming.prefills(self.inner, endpoint)

    async def stream(self, call: ProviderCall, on_delta: streaming.DeltaSink) -> ProviderResult:
        if call.endpoint != responses.ENDPOINT:
            wire_call = call
        else:
            wire_endpoint, wire_body = self.translate(call.body)
            wire_call = dataclasses.replace(call, endpoint=wire_endpoint, body=wire_body)
        inner = streaming.streaming_for(self.inner, wire_call.endpoint)
        if inner is None:
            raise errors.ProviderFatal(
                f"provider {self.name!r} cannot stream {wire_call.endpoint}", code="internal_error"
            )
        answer = await inner.stream(wire_call, on_delta)
        return answer if call.endpoint != responses.ENDPOINT else self._from_wire(call, answer)

    def _from_wire(self, call: ProviderCall, answer: ProviderResult) -> ProviderResult:
        """The Response a translated provider's answer stands for (same request id)."""
        return dataclasses.replace(self._translated(call, answer), request_id=answer.request_id)

    def _translated(self, call: ProviderCall, answer: ProviderResult) -> ProviderResult:
        if self.wire == "chat_completions":
            return chat_result(
                answer.body,
                request=call.body,
                job_id=call.job_id,
                provider_request_id=answer.provider_request_id,
            )
        if self.wire == "messages":
            return message_result(
                answer.body,
                request=call.body,
                job_id=call.job_id,
                created_at=int(self._clock.now().timestamp()),
            )
        return answer

    # -- background mode: only ever native; delegated ---------------------------------------

    def _background(self) -> background.BackgroundProvider:
        if not isinstance(self.inner, background.BackgroundProvider):
            raise errors.ProviderFatal(
                f"provider {self.name!r} has no background mode", code="internal_error"
            )
        return self.inner

    async def create(self, call: ProviderCall) -> Snapshot:
        if call.endpoint == responses.ENDPOINT:
            _, sent = self.translate(call.body)
            call = dataclasses.replace(call, body=sent)
        return await self._background().create(call)

    async def retrieve(self, ref: ProviderJobRef) -> Snapshot:
        return await self._background().retrieve(ref)

    async def fetch_result(self, ref: ProviderJobRef, snapshot: Snapshot) -> ProviderResult:
        return await self._background().fetch_result(ref, snapshot)

    async def cancel(self, ref: ProviderJobRef) -> Snapshot:
        return await self._background().cancel(ref)

    def webhook_event(self, payload: JSONObject) -> ProviderEvent | None:
        return self._background().webhook_event(payload)

    async def aclose(self) -> None:
        return None  # the registry closes the inner provider


def wire_for(kind: str, responses_api: str) -> Wire:
    if kind == "anthropic":
        return "messages"
    return "chat_completions" if responses_api == "chat_completions" else "native"


def chat_result(
    completion: JSONObject, *, request: JSONObject, job_id: str, provider_request_id: str | None
) -> ProviderResult:
    """The Response a `chat.completion` stands for (wire.responses_chat), and its usage."""
    body = responses_chat.from_chat(completion, request=request, job_id=job_id)
    return ProviderResult(
        body=body,
        # What the ledger prices: cached prompt tokens are cache reads (of input_tokens).
        usage=openai_usage(body["usage"]),
        provider_request_id=provider_request_id,
    )


def message_result(
    message: JSONObject, *, request: JSONObject, job_id: str, created_at: int
) -> ProviderResult:
    """The Response an Anthropic `message` stands for (wire.responses_messages), and its
    usage as Anthropic counts it (cache reads and writes apart from input_tokens)."""
    body = responses_messages.from_message(
        message, request=request, job_id=job_id, created_at=created_at
    )
    message_id = message.get("id")
    return ProviderResult(
        body=body,
        usage=anthropic_usage(message.get("usage")),
        provider_request_id=message_id if isinstance(message_id, str) else None,
    )
