"""Sending one webhook: vet the URL, then connect only to the addresses the guard vetted.

httpx is given a network backend whose `connect_tcp` ignores DNS and dials the pinned
addresses of the request's host (a context variable set around each send), so DNS
rebinding between the check and the connection cannot redirect it. The URL itself is left
alone: TLS SNI, certificate verification and the Host header all use the real host name.
Redirects are never followed, proxies from the environment are ignored, and the whole
exchange (DNS included) is bounded by one timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import ssl
import typing
from collections.abc import Iterator, Mapping

import httpcore
import httpx

import jobgate
from jobgate import errors
from jobgate.clock import Clock, SystemClock
from jobgate.domain import ssrf
from jobgate.services.webhook_guard import Destination, UrlGuard

USER_AGENT = f"jobgate-webhooks/{jobgate.__version__}"
_MAX_RESPONSE_BYTES = 64 * 1024  # read (and discard) at most this much of an answer
_CONNECTIONS_PER_POOL = 8

# (host as httpx sends it, port) -> the vetted addresses to dial, for the current send only.
_PINS: contextvars.ContextVar[Mapping[tuple[str, int], tuple[str, ...]] | None] = (
    contextvars.ContextVar("jobgate_webhook_pins", default=None)
)
_DEFAULT_LIMITS = httpx.Limits(max_connections=256, max_keepalive_connections=64)


@contextlib.contextmanager
def pinned(host: str, port: int, addresses: tuple[str, ...]) -> Iterator[None]:
    token = _PINS.set({(host, port): addresses})
    try:
        yield
    finally:
        _PINS.reset(token)


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Dials only pinned addresses, and checks each against the policy once more."""

    def __init__(self, policy: ssrf.UrlPolicy) -> None:
        self._policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = (_PINS.get() or {}).get((host, port))
        if not addresses:
            raise httpcore.ConnectError(f"{host}:{port} was not vetted by the SSRF guard")
        failure: Exception | None = None
        for text in addresses:
            address = ssrf.parse_address(text)
            if address is None or ssrf.refusal(address, self._policy) is not None:
                raise httpcore.ConnectError(f"refusing to connect to {text}")
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc  # try the next vetted address
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("webhooks are never sent over unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class PinnedTransport(httpx.AsyncHTTPTransport):
    def __init__(
        self,
        policy: ssrf.UrlPolicy,
        *,
        ssl_context: ssl.SSLContext | None = None,
        limits: httpx.Limits = _DEFAULT_LIMITS,
    ) -> None:
        context = ssl_context or httpx.create_ssl_context()
        super().__init__(verify=context, limits=limits, trust_env=False)
        # httpx takes no network backend, so the pool it built is replaced by an identical
        # one that dials through PinnedBackend.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=PinnedBackend(policy),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class SendResult:
    status_code: int | None  # None: no HTTP answer
    headers: Mapping[str, str]
    latency_ms: int
    error: str | None  # why no HTTP answer came (refused, timeout, connection error)
    refusal: errors.WebhookUrlRefused | None = None

    @property
    def answered(self) -> bool:
        return self.status_code is not None


class WebhookSender:
    """POSTs signed bodies to vetted destinations over one pooled httpx client."""

    def __init__(
        self,
        guard: UrlGuard,
        *,
        timeout_s: float = 15.0,
        ssl_context: ssl.SSLContext | None = None,
        clock: Clock | None = None,
        max_connections: int = 256,
    ) -> None:
        self.guard = guard
        self.timeout_s = timeout_s
        self._clock = clock or SystemClock()
        # httpcore's pool does work quadratic in its connection count on every request, so
        # the connections are split over small pools; each send takes the least busy one.
        shards = max(1, -(-max_connections // _CONNECTIONS_PER_POOL))
        per_pool = -(-max_connections // shards)
        limits = httpx.Limits(max_connections=per_pool, max_keepalive_connections=per_pool)
        ssl_context = ssl_context or httpx.create_ssl_context()  # one for every pool
        self._clients = [
            httpx.AsyncClient(
                transport=PinnedTransport(guard.policy, ssl_context=ssl_context, limits=limits),
                timeout=httpx.Timeout(timeout_s),
                follow_redirects=False,
                trust_env=False,  # an environment proxy would dial hosts the guard never vetted
                headers={"user-agent": USER_AGENT},
            )
            for _ in range(shards)
        ]
        self._busy = [0] * shards

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()

    async def __aenter__(self) -> WebhookSender:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def send(self, url: str, body: bytes, headers: Mapping[str, str]) -> SendResult:
        """One POST, never raising for what the destination does: a refusal, a timeout or a
        connection error come back as `error`, an HTTP answer as `status_code`."""
        started = self._clock.monotonic()

        def elapsed_ms() -> int:
            return max(0, round((self._clock.monotonic() - started) * 1000))

        try:
            async with asyncio.timeout(self.timeout_s):
                destination = await self.guard.resolve(url)
                return await self._post(destination, body, headers, elapsed_ms)
        except errors.WebhookUrlRefused as exc:
            return SendResult(None, {}, elapsed_ms(), f"refused: {exc.reason}", exc)
        except TimeoutError:
            return SendResult(None, {}, elapsed_ms(), f"timeout after {self.timeout_s:g} s")
        except httpx.TimeoutException:
            return SendResult(None, {}, elapsed_ms(), f"timeout after {self.timeout_s:g} s")
        except httpx.HTTPError as exc:
            return SendResult(None, {}, elapsed_ms(), f"{type(exc).__name__}: {exc}"[:500])

    async def _post(
        self,
        destination: Destination,
        body: bytes,
        headers: Mapping[str, str],
        elapsed_ms: typing.Callable[[], int],
    ) -> SendResult:
        shard = min(range(len(self._clients)), key=self._busy.__getitem__)
        client = self._clients[shard]
        request = client.build_request(
            "POST", destination.target.url, content=body, headers=dict(headers)
        )
        host = request.url.raw_host.decode("ascii")
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        if not _same_host(host, destination.target.host) or port != destination.target.port:
            # Two URL parsers disagree about where this URL points: send nothing.
            raise errors.WebhookUrlRefused(
                "ambiguous_url", "webhook URL refused: its host is ambiguous"
            )
        self._busy[shard] += 1
        try:
            with pinned(host, port, destination.addresses):
                response = await client.send(request, stream=True)
            try:
                read = 0
                async for chunk in response.aiter_raw():
                    read += len(chunk)
                    if read >= _MAX_RESPONSE_BYTES:
                        break
            finally:
                await response.aclose()
        finally:
            self._busy[shard] -= 1
        return SendResult(response.status_code, response.headers, elapsed_ms(), None)


def _same_host(sent: str, vetted: str) -> bool:
    if sent.lower() == vetted.lower():
        return True
    a, b = ssrf.parse_address(sent), ssrf.parse_address(vetted)
    return a is not None and a == b
