"""The SSRF guard: resolve a webhook URL's host and refuse it unless every address it names may
be reached. The addresses it vets are the only ones the sender will connect to (see
webhook_transport), so a DNS answer that changes after the check (rebinding) changes nothing.

A lookup is bounded in time (`LOOKUP_TIMEOUT_S`: past it the URL is refused as unresolvable,
for now), and the many URLs of one call (a bulk submit) are resolved side by side, at most
`LOOKUP_CONCURRENCY` at once, each host once, within `CALL_BUDGET_S` for the whole call: a
thousand names that do not exist cost seconds, not a thousand lookups one after another."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import socket
from collections.abc import Awaitable, Callable, Sequence

from jobgate import errors
from jobgate.config import Settings
from jobgate.domain import ssrf

# host, port -> the addresses (as text) the name resolves to; raises OSError when it cannot.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

LOOKUP_TIMEOUT_S = 5.0  # one lookup (a resolver's own retries take longer)
LOOKUP_CONCURRENCY = 64  # lookups of one call at once (and threads of the system resolver)
CALL_BUDGET_S = 15.0  # every lookup of one call; those not answered by then are refused
# getaddrinfo blocks a thread; the loop's default pool has a handful (cpu + 4), which would
# queue a call's lookups behind each other whatever the concurrency above.
_DNS_THREADS = concurrent.futures.ThreadPoolExecutor(
    LOOKUP_CONCURRENCY, thread_name_prefix="jobgate-dns"
)


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().run_in_executor(
        _DNS_THREADS,
        lambda: socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP),
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclasses.dataclass(frozen=True, slots=True)
class Destination:
    """A vetted URL and the addresses its host resolved to: connect only to these."""

    target: ssrf.Target
    addresses: tuple[str, ...]


class UrlGuard:
    def __init__(self, policy: ssrf.UrlPolicy, *, resolver: Resolver | None = None) -> None:
        self.policy = policy
        self.resolver: Resolver = resolver or system_resolver

    @classmethod
    def from_settings(cls, settings: Settings, *, resolver: Resolver | None = None) -> UrlGuard:
        policy = ssrf.UrlPolicy.build(
            allow_http=settings.webhook_allow_http, allow_cidrs=settings.webhook_allow_cidrs
        )
        return cls(policy, resolver=resolver)

    def check_static(self, url: str, *, param: str | None = "url") -> ssrf.Target:
        """Scheme, credentials and address literals in any spelling; no DNS."""
        return ssrf.check_url(url, self.policy, param=param)

    async def resolve(self, url: str, *, param: str | None = "url") -> Destination:
        """Check `url`, resolve its host and vet every address. Raises errors.InvalidRequest
        for a malformed URL and errors.WebhookUrlRefused (naming the reason) for a refused one;
        a refusal that depends on what DNS answers now (none, or none in time) is marked not
        permanent."""
        return await self._vet(url, param, self._lookup)

    async def resolve_many(
        self, urls: Sequence[str], *, param: str | None = "url"
    ) -> list[Destination | errors.JobgateError]:
        """`resolve` for each of one call's URLs, in order (a refusal in its URL's place): at
        most LOOKUP_CONCURRENCY lookups at once, each host looked up once, and none waiting
        past CALL_BUDGET_S (refused as unresolvable, for now)."""
        lookups: dict[tuple[str, int], asyncio.Future[Sequence[str]]] = {}
        gate = asyncio.Semaphore(LOOKUP_CONCURRENCY)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CALL_BUDGET_S

        async def bounded(host: str, port: int) -> Sequence[str]:
            async with gate:  # the call's budget counts the wait for a turn, a lookup not
                left = deadline - loop.time()
                if left <= 0:
                    raise TimeoutError
                return await self._lookup(host, port, limit_s=min(left, LOOKUP_TIMEOUT_S))

        async def once(host: str, port: int) -> Sequence[str]:
            if (host, port) not in lookups:
                lookups[host, port] = asyncio.ensure_future(bounded(host, port))
            return await asyncio.shield(lookups[host, port])

        async def one(url: str) -> Destination | errors.JobgateError:
            try:
                return await self._vet(url, param, once)
            except errors.JobgateError as exc:
                return exc

        try:
            return list(await asyncio.gather(*(one(url) for url in urls)))
        finally:
            for lookup in lookups.values():
                lookup.cancel()

    async def _lookup(self, host: str, port: int, *, limit_s: float | None = None) -> Sequence[str]:
        """The resolver's answer; TimeoutError past `limit_s` (LOOKUP_TIMEOUT_S)."""
        async with asyncio.timeout(LOOKUP_TIMEOUT_S if limit_s is None else limit_s):
            return await self.resolver(host, port)

    async def _vet(self, url: str, param: str | None, lookup: Resolver) -> Destination:
        target = self.check_static(url, param=param)
        if target.address is not None:
            return Destination(target, (str(target.address),))
        try:
            answers = await lookup(target.host, target.port)
        except TimeoutError:
            cause = (
                f"it did not resolve within {LOOKUP_TIMEOUT_S:g} s (every lookup of one "
                f"call within {CALL_BUDGET_S:g} s)"
            )
            raise _unresolvable(target.host, cause, param) from None
        except (OSError, UnicodeError) as exc:
            cause = getattr(exc, "strerror", None) or type(exc).__name__
            raise _unresolvable(target.host, str(cause), param) from None
        vetted: list[str] = []
        for answer in answers:
            address = ssrf.parse_address(answer)
            if address is None:
                continue
            ssrf.refuse_address(target.host, address, self.policy, param=param, permanent=False)
            vetted.append(str(address))
        if not vetted:
            raise errors.WebhookUrlRefused(
                "unresolvable",
                f"webhook URL refused: {target.host} resolves to no address",
                param=param,
                permanent=False,
            )
        return Destination(target, tuple(dict.fromkeys(vetted)))


def _unresolvable(host: str, cause: str, param: str | None) -> errors.WebhookUrlRefused:
    # Refused rather than accepted unchecked: an endpoint is vetted when it is registered
    # and again before each delivery, and a name that resolves nowhere now cannot be vetted.
    # Say why, and what to do.
    return errors.WebhookUrlRefused(
        "unresolvable",
        f"webhook URL refused: cannot resolve {host} ({cause}); the host must resolve when "
        "the endpoint is registered (it is checked again at each delivery): check the name "
        "and this server's DNS. A receiver on this machine needs JOBGATE_WEBHOOK_ALLOW_HTTP=1 "
        "and JOBGATE_WEBHOOK_ALLOW_CIDRS=127.0.0.1/32",
        param=param,
        permanent=False,
    )
