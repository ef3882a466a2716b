"""Which webhook destinations jobgate refuses to reach (pure: no DNS, no sockets).

A webhook URL is chosen by a tenant, so without a guard jobgate would be a proxy into the
operator's network. Every address that is not on the public internet is refused by class
(loopback, private, link-local incl. cloud metadata, CGNAT, unspecified, multicast, reserved,
IPv6 ULA/link-local/site-local), whatever way it is spelled: legacy IPv4 forms that
`inet_aton` accepts (`2130706433`, `0177.0.0.1`, `0x7f.1`) and IPv6 forms that embed an IPv4
address (mapped, compatible, SIIT, NAT64, 6to4, Teredo) are unwrapped and judged by what they
embed. Operators exempt their own networks with an allow-list of CIDRs.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from jobgate import errors

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# (network, reason), most specific first; the reason is what a refusal names.
_V4_REFUSED: tuple[tuple[ipaddress.IPv4Network, str], ...] = tuple(
    (ipaddress.IPv4Network(cidr), reason)
    for cidr, reason in (
        ("0.0.0.0/8", "unspecified"),  # "this network"; 0.0.0.0 reaches the local host
        ("127.0.0.0/8", "loopback"),
        ("10.0.0.0/8", "private"),
        ("172.16.0.0/12", "private"),
        ("192.168.0.0/16", "private"),
        ("100.64.0.0/10", "cgnat"),
        ("169.254.0.0/16", "link_local"),  # includes 169.254.169.254, the metadata service
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "reserved"),  # limited broadcast
        ("240.0.0.0/4", "reserved"),
        ("192.0.0.0/24", "reserved"),  # IETF protocol assignments
        ("192.0.2.0/24", "reserved"),  # documentation
        ("198.51.100.0/24", "reserved"),
        ("203.0.113.0/24", "reserved"),
        ("198.18.0.0/15", "reserved"),  # benchmarking
        ("192.88.99.0/24", "reserved"),  # 6to4 relay anycast
    )
)
_V6_REFUSED: tuple[tuple[ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.IPv6Network(cidr), reason)
    for cidr, reason in (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("fe80::/10", "link_local"),
        ("fc00::/7", "unique_local"),
        ("fec0::/10", "private"),  # deprecated site-local
        ("ff00::/8", "multicast"),
        ("64:ff9b:1::/48", "reserved"),  # local-use NAT64
        ("100::/64", "reserved"),  # discard-only
        ("2001:db8::/32", "reserved"),  # documentation
    )
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIIT = ipaddress.IPv6Network("::ffff:0:0:0/96")  # IPv4-translated

REASON_TEXT = {
    "unspecified": "an unspecified ('this network') address",
    "loopback": "a loopback address",
    "private": "a private network address",
    "cgnat": "a carrier-grade NAT (shared, 100.64.0.0/10) address",
    "link_local": "a link-local address (this includes cloud metadata services)",
    "unique_local": "an IPv6 unique local address",
    "multicast": "a multicast address",
    "reserved": "a reserved or non-global address",
}


@dataclasses.dataclass(frozen=True, slots=True)
class UrlPolicy:
    """What the operator allows: plain http (development) and networks exempt from the guard."""

    allow_http: bool = False
    allow_cidrs: tuple[IPNetwork, ...] = ()

    @classmethod
    def build(cls, *, allow_http: bool = False, allow_cidrs: Iterable[str] = ()) -> UrlPolicy:
        networks: list[IPNetwork] = []
        for cidr in allow_cidrs:
            try:
                networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
            except ValueError as exc:
                raise errors.ConfigError("JOBGATE_WEBHOOK_ALLOW_CIDRS", str(exc)) from None
        return cls(allow_http=allow_http, allow_cidrs=tuple(networks))

    def allows(self, address: IPAddress) -> bool:
        return any(address.version == net.version and address in net for net in self.allow_cidrs)


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """A URL the static checks passed: where to resolve and connect."""

    url: str
    scheme: str
    host: str  # lower-case, IDNA-encoded; IPv6 without brackets
    port: int
    address: IPAddress | None  # set when the host is an address literal (in any spelling)


def parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """An IPv4 address in any spelling `inet_aton` (and so getaddrinfo) accepts, or None.

    1 to 4 dot-separated parts, each decimal, octal (leading 0) or hex (0x); the last part
    fills the remaining bytes: `2130706433`, `0x7f.1`, `0177.0.0.01` and `127.1` are all
    127.0.0.1.
    """
    if host.endswith("."):
        host = host[:-1]
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values: list[int] = []
    for part in parts:
        value = _number(part)
        if value is None:
            return None
        values.append(value)
    *leading, last = values
    if any(v > 0xFF for v in leading) or last >= 1 << (8 * (5 - len(values))):
        return None
    number = 0
    for index, value in enumerate(leading):
        number |= value << (24 - 8 * index)
    return ipaddress.IPv4Address(number | last)


def _number(part: str) -> int | None:
    try:
        if part[:2].lower() == "0x":
            return int(part[2:], 16) if part[2:] else 0
        if len(part) > 1 and part.startswith("0"):
            return int(part[1:], 8)
        return int(part, 10) if part.isdigit() else None
    except ValueError:
        return None


def parse_address(text: str) -> IPAddress | None:
    """An address literal (IPv6 with or without brackets, IPv4 in any spelling), or None."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        text = text.split("%", 1)[0]  # a zone index names an interface, not another address
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            return None
    if not text or not all(c.isalnum() or c == "." for c in text):
        return None
    return parse_ipv4(text)


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 form carries, and the name of the form."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped, "IPv4-mapped"
    number = int(address)
    if number >> 32 == 0 and number > 1:
        return ipaddress.IPv4Address(number), "IPv4-compatible"
    if address in _SIIT:
        return ipaddress.IPv4Address(number & 0xFFFFFFFF), "IPv4-translated"
    if address in _NAT64:
        return ipaddress.IPv4Address(number & 0xFFFFFFFF), "NAT64"
    if address.sixtofour is not None:
        return address.sixtofour, "6to4"
    if address.teredo is not None:
        server, client = address.teredo
        return (client if _v4_reason(client) else server), "Teredo"
    return None


def _v4_reason(address: ipaddress.IPv4Address) -> str | None:
    for network, reason in _V4_REFUSED:
        if address in network:
            return reason
    return None if address.is_global else "reserved"


def refusal(address: IPAddress, policy: UrlPolicy) -> str | None:
    """Why `address` is refused (a reason from REASON_TEXT), or None when it may be reached."""
    if policy.allows(address):
        return None
    if isinstance(address, ipaddress.IPv4Address):
        return _v4_reason(address)
    inner = embedded_ipv4(address)
    if inner is not None:
        embedded, form = inner
        if policy.allows(embedded):
            return None
        reason = _v4_reason(embedded)
        if reason is not None:
            return reason
        if form in ("IPv4-mapped", "IPv4-compatible", "IPv4-translated"):
            return None  # these reach exactly the (public) IPv4 address they carry
    for network, reason in _V6_REFUSED:
        if address in network:
            return reason
    return None if address.is_global else "reserved"


def describe(address: IPAddress) -> str:
    inner = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
    return f"{address} ({inner[1]} {inner[0]})" if inner else str(address)


def refuse_address(
    host: str, address: IPAddress, policy: UrlPolicy, *, param: str | None, permanent: bool
) -> None:
    """Raise errors.WebhookUrlRefused if `address` (what `host` names) is refused."""
    reason = refusal(address, policy)
    if reason is None:
        return
    where = describe(address)
    subject = where if host == str(address) else f"{host} resolves to {where}, which"
    raise errors.WebhookUrlRefused(
        reason,
        f"webhook URL refused: {subject} is {REASON_TEXT[reason]}; "
        "allow it with JOBGATE_WEBHOOK_ALLOW_CIDRS if it is yours",
        param=param,
        permanent=permanent,
    )


def check_url(url: str, policy: UrlPolicy, *, param: str | None = "url") -> Target:
    """The checks that need no DNS: an absolute https URL (http only if allowed), no
    credentials, and a host that is not a refused address literal in any spelling."""
    if not isinstance(url, str) or len(url) > 2048:
        raise errors.InvalidRequest(
            "webhook URL must be a string of at most 2048 characters",
            param=param,
            code="invalid_webhook_url",
        )
    invalid = errors.InvalidRequest(
        "webhook URL must be an absolute http(s) URL", param=param, code="invalid_webhook_url"
    )
    try:
        parts = urlsplit(url.strip())
        port, hostname, scheme = parts.port, parts.hostname, parts.scheme.lower()
    except ValueError:
        raise invalid from None
    if not hostname or scheme not in ("http", "https"):
        raise invalid
    if scheme == "http" and not policy.allow_http:
        raise errors.WebhookUrlRefused(
            "scheme_not_allowed",
            "webhook URL refused: only https URLs are allowed (JOBGATE_WEBHOOK_ALLOW_HTTP=1 "
            "allows http for development)",
            param=param,
        )
    if parts.username is not None or parts.password is not None:
        raise errors.WebhookUrlRefused(
            "credentials_in_url",
            "webhook URL refused: it must not carry credentials (user:password@)",
            param=param,
        )
    try:
        host = hostname.encode("idna").decode("ascii").lower() if ":" not in hostname else hostname
    except UnicodeError:
        raise errors.InvalidRequest(
            "webhook URL host is not a valid domain name", param=param, code="invalid_webhook_url"
        ) from None
    address = parse_address(host)
    if address is not None:
        refuse_address(host, address, policy, param=param, permanent=True)
    return Target(
        url=url.strip(),
        scheme=scheme,
        host=host,
        port=port or (443 if scheme == "https" else 80),
        address=address,
    )
