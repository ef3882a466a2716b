"""The SSRF guard: resolve a webhook URL's host and refuse it unless every address it names may
be reached. The addresses it vets are the only ones the sender will connect to (see
webhook_transport), so a DNS answer that changes after the check (rebinding) changes nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import Awaitable, Callable, Sequence

from jobgate import errors
from jobgate.config import Settings
from jobgate.domain import ssrf

# host, port -> the addresses (as text) the name resolves to; raises OSError when it cannot.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
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
        a refusal that depends on what DNS answers now is marked not permanent."""
        target = self.check_static(url, param=param)
        if target.address is not None:
            return Destination(target, (str(target.address),))
        try:
            answers = await self.resolver(target.host, target.port)
        except (OSError, UnicodeError) as exc:
            # Refused rather than accepted unchecked: an endpoint is vetted when it is
            # registered and again before each delivery, and a name that resolves nowhere now
            # cannot be vetted. Say why, and what to do.
            cause = getattr(exc, "strerror", None) or type(exc).__name__
            raise errors.WebhookUrlRefused(
                "unresolvable",
                f"webhook URL refused: cannot resolve {target.host} ({cause}); the host must "
                "resolve when the endpoint is registered (it is checked again at each "
                "delivery): check the name and this server's DNS. A receiver on this machine "
                "needs JOBGATE_WEBHOOK_ALLOW_HTTP=1 and JOBGATE_WEBHOOK_ALLOW_CIDRS=127.0.0.1/32",
                param=param,
                permanent=False,
            ) from None
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
