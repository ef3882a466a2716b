"""The provider simulator: an HTTP server speaking OpenAI Chat Completions and Responses
(background mode, retrieve, cancel, signed webhooks) and Anthropic Messages (streaming too) and
Message Batches, over one SimEngine shared with the in-process `sim` provider.

Behaviour comes from each request's directives (see `jobgate.simulator.model`), read from
the `x-jobgate-sim` header (where jobgate's adapters put them) or a `sim` member of the body.
The `profile` (default `realistic`, see `jobgate.simulator.profiles`) decides whether it
copies the real APIs where they are unkind: no deduplication by Idempotency-Key, 400 for a
cancel after the end, batch counts only at the end, rate-limit reset headers, request ids.
Tests may also `inject()` faults into any route, e.g. failing status checks; a simulator in
another process takes the same through `POST /_simulator/inject` and shows what it saw at
`GET /_simulator/state`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
from typing import Any

import httpx
import orjson

from jobgate import errors
from jobgate.clock import Clock
from jobgate.simulator import (
    anthropic_batch_routes,
    choices,
    model,
    openai_batch_routes,
    parameters,
    profiles,
    rate_limits,
    stream_faults,
    streams,
    wire,
)
from jobgate.simulator.enforcement import Charge, Enforcer, Limits, Refusal
from jobgate.simulator.engine import (
    CancelRefused,
    Outgoing,
    SimEngine,
    replay_key,
    request_key,
)
from jobgate.simulator.http11 import Answer, Drop, H11Server, Hang, Reply, Request, Stream
from jobgate.simulator.profiles import SimProfile
from jobgate.wire import anthropic_requests, openai_requests, sim, standard_webhooks
from jobgate.wire.sim import Directives

log = logging.getLogger(__name__)
SIM_HEADER = "x-jobgate-sim"
_RESPONSE = re.compile(r"^/v1/responses/([\w-]+)(/cancel)?$")
# The calls a rate-limited account meters (batches have limits of their own, not simulated).
METERED = frozenset({"/v1/chat/completions", "/v1/responses", "/v1/messages"})
WEBHOOK_ATTEMPTS = 3
CONTROL_PREFIX = "/_simulator/"


@dataclasses.dataclass(slots=True)
class _Injected:
    method: str
    path_prefix: str
    fault: str
    times: int


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    webhook_id: str
    event_type: str
    status_code: int | None


class Simulator:
    def __init__(
        self,
        engine: SimEngine | None = None,
        *,
        clock: Clock | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
        idempotent: bool | None = None,
        responses_api: bool = True,
        profile: str | SimProfile = profiles.REALISTIC,
        limits: Limits | None = None,
    ) -> None:
        chosen = profiles.profile(profile) if isinstance(profile, str) else profile
        self.engine = engine or SimEngine(clock, idempotent=idempotent, profile=chosen)
        self.profile = self.engine.profile
        # rpm/tpm per model, enforced with 429s as the providers do (None: unlimited).
        self.enforcer = (
            Enforcer(limits, self.engine.now) if limits is not None and limits.enforced else None
        )
        self._usage: dict[int, Any] = {}  # the usage each metered answer reports, by request
        # False: no /v1/responses routes (404), like most OpenAI-compatible servers.
        self.responses_api = responses_api
        self.api_key = api_key
        self.webhook_url = webhook_url
        self.webhook_secret = webhook_secret
        self.deliveries: list[Delivery] = []
        self.max_concurrent = 0  # the most requests in flight at once, for concurrency caps
        self._inflight = 0
        self._injected: list[_Injected] = []
        self._server = H11Server(self.handle, host=host, port=port)
        self._wake = asyncio.Event()
        self._delivery_task: asyncio.Task[None] | None = None
        self._http: httpx.AsyncClient | None = None

    @property
    def url(self) -> str:
        return f"http://{self._server.host}:{self._server.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    async def start(self) -> Simulator:
        await self._server.start()
        self._http = httpx.AsyncClient(timeout=5.0)
        self._delivery_task = asyncio.create_task(self._deliver_forever(), name="sim webhooks")
        return self

    async def close(self) -> None:
        if self._delivery_task is not None:
            self._delivery_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._delivery_task
        await self._server.close()
        if self._http is not None:
            await self._http.aclose()

    async def __aenter__(self) -> Simulator:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    def inject(self, method: str, path_prefix: str, fault: str, *, times: int = 1) -> None:
        """Fail the next `times` requests matching method and path prefix with `fault`."""
        self._injected.append(_Injected(method.upper(), path_prefix, fault, times))

    # -- dispatch ----------------------------------------------------------------------------

    async def handle(self, request: Request) -> Answer:
        if request.path.startswith(CONTROL_PREFIX):
            return self._control(request)
        anthropic = request.path.startswith("/v1/messages")
        try:
            multipart = request.headers.get("content-type", "").startswith("multipart/")
            body = None if multipart else request.json()
        except orjson.JSONDecodeError:
            return _error(anthropic, "invalid_request", "the body is not valid JSON")
        self.engine.record(request.method, request.path, request.headers, body)
        self._inflight += 1
        self.max_concurrent = max(self.max_concurrent, self._inflight)
        try:
            answer = self._injected_fault(request, anthropic) or self._unauthorized(
                request, anthropic
            )
            if answer is None:
                answer = await self._metered(request, body if isinstance(body, dict) else {})
        finally:
            self._inflight -= 1
            self._wake.set()
        return self._with_request_id(answer, anthropic)

    async def _metered(self, request: Request, body: dict[str, Any]) -> Answer:
        """Route the request; a metered call of a rate-limited account is first admitted by
        its model's buckets (429 when over), then settled to its usage, and its answer
        carries the account's rate-limit headers."""
        if self.enforcer is None or request.method != "POST" or request.path not in METERED:
            return await self._route(request, body)
        anthropic = request.path == "/v1/messages"
        model = str(body.get("model") or "")
        charge = self.enforcer.admit(model, body)
        if isinstance(charge, Refusal):
            return self._refused(charge, model, anthropic)
        try:
            answer = await self._route(request, body)
        finally:
            self.enforcer.settle(charge, self._usage.pop(id(request), None))
        return self._with_account_headers(answer, charge, anthropic)

    def _refused(self, refusal: Refusal, model: str, anthropic: bool) -> Answer:
        assert self.enforcer is not None
        requests, tokens = self.enforcer.state(model)
        headers = rate_limits.refusal_headers(
            refusal, requests, tokens, anthropic, self.engine.now()
        )
        message = rate_limits.refusal_message(refusal, model, self.enforcer.limits, anthropic)
        return _error(anthropic, "rate_limit", message, headers=headers)

    def _with_account_headers(self, answer: Answer, charge: Charge, anthropic: bool) -> Answer:
        if self.enforcer is None or not isinstance(answer, Reply | Stream):
            return answer
        requests, tokens = self.enforcer.state(charge.model)
        headers = rate_limits.account_headers(requests, tokens, anthropic, self.engine.now())
        return dataclasses.replace(answer, headers={**answer.headers, **headers})

    def _with_request_id(self, answer: Answer, anthropic: bool) -> Answer:
        """Every answer names its request, as the real APIs do (OpenAI `x-request-id`,
        Anthropic `request-id`)."""
        if not self.profile.request_ids or not isinstance(answer, Reply | Stream):
            return answer
        header = "request-id" if anthropic else "x-request-id"
        return dataclasses.replace(answer, headers={**answer.headers, header: wire.new_id("req_")})

    # -- test hooks, for a simulator running in another process ------------------------------

    def state(self) -> dict[str, Any]:
        """What the provider saw and did: objects created (billed work; those in background
        mode apart), cancels, every request
        (method, path, Idempotency-Key) and every webhook delivery (its final status)."""
        return {
            "created": list(self.engine.created),
            "created_background": list(self.engine.created_background),
            "cancel_calls": list(self.engine.cancel_calls),
            "requests": len(self.engine.requests),
            "request_log": [
                {"method": r.method, "path": r.path,
                 "idempotency_key": r.headers.get("idempotency-key"), "at": r.at}
                for r in self.engine.requests
            ],
            "rate_limits": None if self.enforcer is None else {
                "admitted": self.enforcer.admitted, "refused": self.enforcer.refused,
            },
            "deliveries": [dataclasses.asdict(d) for d in self.deliveries],
        }  # fmt: skip

    def _control(self, request: Request) -> Answer:
        """`GET /_simulator/state`, and `POST /_simulator/inject` with `{"method",
        "path_prefix", "fault", "times"}` (see `inject`)."""
        if request.method == "GET" and request.path == f"{CONTROL_PREFIX}state":
            return Reply.json(200, self.state())
        if request.method == "POST" and request.path == f"{CONTROL_PREFIX}inject":
            try:
                spec = request.json()
                fault = spec["fault"]
                if fault not in wire.FAULT_STATUS and fault not in ("hang", "drop"):
                    raise ValueError(f"unknown fault {fault!r}")
                self.inject(
                    str(spec["method"]),
                    str(spec["path_prefix"]),
                    fault,
                    times=int(spec.get("times", 1)),
                )
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                return _error(False, "invalid_request", f"bad injection: {exc}")
            return Reply.json(200, {"injected": spec})
        return _error(False, "not_found", f"no route {request.method} {request.path}")

    def _injected_fault(self, request: Request, anthropic: bool) -> Answer | None:
        for rule in self._injected:
            if rule.times > 0 and request.method == rule.method:
                if request.path.startswith(rule.path_prefix):
                    rule.times -= 1
                    return _fault_answer(
                        rule.fault, Directives(), anthropic, self.profile, self.engine.now()
                    )
        return None

    def _unauthorized(self, request: Request, anthropic: bool) -> Answer | None:
        if self.api_key is None:
            return None
        offered = request.headers.get("x-api-key") or request.headers.get(
            "authorization", ""
        ).removeprefix("Bearer ")
        if offered == self.api_key:
            return None
        return _error(anthropic, "unauthorized", "invalid api key")

    async def _route(self, request: Request, body: dict[str, Any]) -> Answer:
        method, path = request.method, request.path
        if method == "POST" and path == "/v1/chat/completions":
            return await self._chat(request, body)
        if not self.responses_api and path.startswith("/v1/responses"):
            return _error(False, "not_found", f"no route {method} {path}")
        if method == "POST" and path == "/v1/responses":
            return await self._responses_create(request, body)
        if (match := _RESPONSE.match(path)) is not None:
            if method == "GET" and not match.group(2):
                return self._found(self.engine.response(match.group(1)), anthropic=False)
            if method == "POST" and match.group(2):
                return self._responses_cancel(match.group(1))
        if openai_batch_routes.serves(path):
            try:
                plan = openai_batch_routes.plan_of(request)
            except errors.InvalidRequest as exc:
                return _error(False, "invalid_request", str(exc))
            return openai_batch_routes.route(self.engine, request, plan, self._openai_fault)
        if path.startswith("/v1/messages") and "anthropic-version" not in request.headers:
            return _error(True, "invalid_request", "anthropic-version: header is required")
        if method == "POST" and path == "/v1/messages":
            return await self._messages(request, body)
        if anthropic_batch_routes.serves(path):
            return anthropic_batch_routes.route(
                self.engine, request, body, self._anthropic_fault, base_url=self.url
            )
        return _error(path.startswith("/v1/messages"), "not_found", f"no route {method} {path}")

    def _openai_fault(self, fault: str, plan: Directives) -> Answer:
        return _fault_answer(fault, plan, False, self.profile, self.engine.now())

    def _anthropic_fault(self, fault: str, plan: Directives) -> Answer:
        return _fault_answer(fault, plan, True, self.profile, self.engine.now())

    def _plan(self, request: Request, body: dict[str, Any]) -> Directives:
        raw = body.pop("sim", None)
        header = request.headers.get(SIM_HEADER)
        if header:
            raw = orjson.loads(header)
        return sim.directives({} if raw is None else {"sim": raw})

    async def _begin(
        self, request: Request, body: dict[str, Any], route: str, anthropic: bool
    ) -> tuple[Directives, str | None, Answer | None, bool, str | None]:
        """Directives, where to remember the answer, the answer if this call is replayed or
        faulted, whether to drop the connection once the call has been accepted, and the
        fault to report inside the streamed answer (simulator.stream_faults)."""
        try:
            plan = self._plan(request, body)
        except (errors.InvalidRequest, orjson.JSONDecodeError) as exc:
            early = _error(anthropic, "invalid_request", str(exc))
            return Directives(), None, early, False, None
        idempotency_key = request.headers.get("idempotency-key")
        key = replay_key(route, idempotency_key)
        replayed = self.engine.replay(key)
        if replayed is not None:
            status, stored = replayed
            early = Reply.json(status, stored, {"idempotent-replayed": "true"})
            return plan, key, early, False, None
        call_number = self.engine.count_call(request_key(route, idempotency_key, body))
        fault = plan.fail_with if plan.fails_on(call_number) else None
        if fault in sim.STREAM_FAULTS:
            if body.get("stream") is True:
                return plan, key, None, False, fault
            fault = stream_faults.AS_STATUS[fault]  # the same fault, as an HTTP answer
        if fault == "drop":
            return plan, key, None, True, None
        if fault is not None:
            if fault != "hang" and plan.latency_s and route != "responses-bg":
                await asyncio.sleep(plan.latency_s)
            return (
                plan,
                key,
                _fault_answer(fault, plan, anthropic, self.profile, self.engine.now()),
                False,
                None,
            )
        return plan, key, None, False, None

    # -- OpenAI ------------------------------------------------------------------------------

    def _unknown(
        self, endpoint: str, body: dict[str, Any], *, anthropic: bool, where: str = ""
    ) -> Answer | None:
        """The refusal of a parameter `endpoint` does not know (realistic profile only)."""
        if not self.profile.strict_parameters:
            return None
        found = parameters.unknown(endpoint, body, where=where)
        return None if found is None else _unknown_answer(found, anthropic=anthropic)

    async def _chat(self, request: Request, body: dict[str, Any]) -> Answer:
        plan, key, early, drop, fault = await self._begin(request, body, "chat", anthropic=False)
        early = early or self._unknown(request.path, body, anthropic=False)
        if early is not None:
            return early
        try:
            openai_requests.validate_chat(body)
        except errors.InvalidRequest as exc:
            return _error(False, "invalid_request", exc.message, param=exc.param)
        problem = sim.tool_calls_problem(plan, body)
        if problem is not None:
            return _error(False, "invalid_request", problem, param="sim.tool_calls")
        completion = model.chat_completion(body, created=int(self.engine.now()))
        completion = wire.with_chat_tool_calls(completion, body, plan.tool_calls)
        completion = choices.with_choices(completion, body)
        self._usage[id(request)] = completion["usage"]
        self.engine.created.append(completion["id"])
        self.engine.remember(key, 200, completion)
        if body.get("stream"):
            return streams.chat_stream(completion, body, plan, drop=drop, fault=fault)
        await asyncio.sleep(plan.latency_s)
        return Drop() if drop else Reply.json(200, completion)

    async def _responses_create(self, request: Request, body: dict[str, Any]) -> Answer:
        background = body.get("background") is True
        route = "responses-bg" if background else "responses"
        plan, key, early, drop, fault = await self._begin(request, body, route, anthropic=False)
        early = early or self._unknown(request.path, body, anthropic=False)
        if early is not None:
            return early
        problem = openai_requests.validate_responses(body) or sim.tool_calls_problem(plan, body)
        if background and body.get("store") is False:
            problem = "background mode requires store=true"
        if problem is not None:
            return _error(False, "invalid_request", problem)
        response_id = self.engine.create_response(body, plan, background=background)
        if background:
            answer = self.engine.response(response_id, as_created=True)
            for outgoing in self.engine.due_webhooks(early_for=response_id):
                await self._deliver(outgoing)
        elif body.get("stream"):
            final = wire.response_object(
                body,
                response_id=response_id,
                created_at=self.engine.now(),
                status="incomplete" if plan.outcome == "incomplete" else "completed",
                completed_at=self.engine.now() + plan.latency_s,
                tool_calls=plan.tool_calls,
            )
            self.engine.remember(key, 200, final)
            self._usage[id(request)] = final.get("usage")
            return streams.responses_stream(final, plan, drop=drop, fault=fault)
        else:
            await asyncio.sleep(plan.latency_s)
            answer = self.engine.response(response_id)
        assert answer is not None
        self._usage[id(request)] = answer.get("usage")
        self.engine.remember(key, 200, answer)
        return Drop() if drop else Reply.json(200, answer)

    def _responses_cancel(self, response_id: str) -> Answer:
        plan = self.engine.response_plan(response_id)
        if plan is not None and plan.cancel == "unsupported":
            return _error(False, "not_allowed", "this server cannot cancel responses")
        try:
            found = self.engine.cancel_response(response_id)
        except CancelRefused as exc:
            return _error(False, "invalid_request", str(exc))
        return self._found(found, anthropic=False)

    # -- Anthropic ---------------------------------------------------------------------------

    async def _messages(self, request: Request, body: dict[str, Any]) -> Answer:
        plan, key, early, drop, fault = await self._begin(request, body, "messages", anthropic=True)
        replayed = isinstance(early, Reply) and "idempotent-replayed" in early.headers
        if early is not None and not replayed:
            return early
        refused = self._unknown(request.path, body, anthropic=True)
        if refused is not None:
            return refused
        problem = anthropic_requests.validate_messages(body) or sim.tool_calls_problem(plan, body)
        if problem is not None:
            return _error(True, "invalid_request", problem)
        if replayed:
            assert isinstance(early, Reply)
            message = orjson.loads(early.body)
        else:
            message = wire.anthropic_message(body, tool_calls=plan.tool_calls)
            self._usage[id(request)] = message["usage"]
            self.engine.created.append(message["id"])
            self.engine.remember(key, 200, message)
        if not body.get("stream"):
            await asyncio.sleep(plan.latency_s)
            return Drop() if drop else Reply.json(200, message)
        now_s = self.engine.now()
        return streams.messages_stream(message, plan, drop=drop, fault=fault, now_s=now_s)

    @staticmethod
    def _found(body: dict[str, Any] | None, *, anthropic: bool) -> Answer:
        if body is None:
            return _error(anthropic, "not_found", "no such object")
        return Reply.json(200, body)

    # -- webhooks ----------------------------------------------------------------------------

    async def _deliver_forever(self) -> None:
        while True:
            for outgoing in self.engine.due_webhooks():
                await self._deliver(outgoing)
            due = self.engine.next_webhook_at()
            wait_s = 0.25 if due is None else min(0.25, max(0.0, due - self.engine.now()))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._wake.wait()
            self._wake.clear()

    async def _deliver(self, outgoing: Outgoing) -> None:
        """POST one signed event, retrying a few times; a webhook that fails them is lost."""
        if self.webhook_url is None or self.webhook_secret is None or self._http is None:
            return
        body = orjson.dumps(outgoing.event)
        status: int | None = None
        for attempt in range(WEBHOOK_ATTEMPTS):
            timestamp = int(self.engine.now())
            headers = standard_webhooks.signed_headers(
                [self.webhook_secret], outgoing.webhook_id, timestamp, body
            )
            try:
                response = await self._http.post(
                    self.webhook_url,
                    content=body,
                    headers={**headers, "content-type": "application/json"},
                )
                status = response.status_code
                if 200 <= status < 300:
                    break
            except httpx.HTTPError:
                status = None
            await asyncio.sleep(0.2 * 2**attempt)
        self.deliveries.append(Delivery(outgoing.webhook_id, outgoing.event["type"], status))


def _fault_answer(
    fault: str,
    plan: Directives,
    anthropic: bool,
    profile: SimProfile | None = None,
    now_s: float = 0.0,
) -> Answer:
    if fault == "hang":
        return Hang()
    if fault == "drop":
        return Drop()
    headers: dict[str, str] = {}
    if fault == "rate_limit":
        headers = rate_limits.headers(plan.retry_after_s, anthropic, profile, now_s)
    if fault == "quota":
        message = (
            "This request would exceed your account's monthly spend limit."
            if anthropic
            else "You exceeded your current quota, please check your plan and billing details."
        )
        return _error(anthropic, fault, message)
    if fault == "overloaded" and not anthropic:
        fault_status = 503  # OpenAI answers overload with 503; Anthropic with 529
        return Reply.json(fault_status, wire.openai_error("overloaded", "the engine is overloaded"))
    return _error(anthropic, fault, f"simulated {fault.replace('_', ' ')}", headers=headers)


def _error(
    anthropic: bool,
    fault: str,
    message: str,
    *,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    status = wire.FAULT_STATUS[fault][0]
    body = (
        wire.anthropic_error(fault, message)
        if anthropic
        else wire.openai_error(fault, message, param=param)
    )
    return Reply.json(status, body, headers)


def _unknown_answer(found: parameters.Unknown, *, anthropic: bool) -> Reply:
    """A 400 for a parameter the API does not know, in that API's words."""
    if anthropic:
        return _error(True, "invalid_request", found.message)
    body = wire.openai_error("invalid_request", found.message, param=found.param, code=found.code)
    return Reply.json(400, body)
