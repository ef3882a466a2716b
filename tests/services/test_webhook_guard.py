"""The guard's DNS side: a name is judged by every address it resolves to (resolver faked)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from jobgate import errors
from jobgate.domain import ssrf
from jobgate.services.webhook_guard import UrlGuard, system_resolver

pytestmark = pytest.mark.asyncio


def fake_dns(table: dict[str, Sequence[str]]):  # type: ignore[no-untyped-def]
    async def resolve(host: str, port: int) -> Sequence[str]:
        if host not in table:
            raise OSError(f"no such host {host}")
        return table[host]

    return resolve


DNS = fake_dns(
    {
        "public.test": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
        "loopback.test": ["127.0.0.1"],
        "mixed.test": ["93.184.216.34", "10.0.0.5"],
        "metadata.test": ["169.254.169.254"],
        "mapped.test": ["::ffff:127.0.0.1"],
        "v6local.test": ["fe80::1%eth0"],
        "empty.test": [],
    }
)


async def test_a_public_name_resolves_to_its_vetted_addresses() -> None:
    guard = UrlGuard(ssrf.UrlPolicy(), resolver=DNS)
    destination = await guard.resolve("https://public.test/hook")
    assert destination.addresses == ("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946")
    assert (destination.target.host, destination.target.port) == ("public.test", 443)


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("loopback.test", "loopback"),
        ("mixed.test", "private"),  # one bad answer is enough
        ("metadata.test", "link_local"),
        ("mapped.test", "loopback"),
        ("v6local.test", "link_local"),
        ("nowhere.test", "unresolvable"),
        ("empty.test", "unresolvable"),
    ],
)
async def test_names_resolving_to_refused_addresses(host: str, reason: str) -> None:
    guard = UrlGuard(ssrf.UrlPolicy(), resolver=DNS)
    with pytest.raises(errors.WebhookUrlRefused) as caught:
        await guard.resolve(f"https://{host}/hook")
    assert caught.value.reason == reason
    assert not caught.value.permanent  # DNS may answer otherwise later: a delivery retries


async def test_literals_are_not_resolved() -> None:
    async def must_not_resolve(host: str, port: int) -> Sequence[str]:
        raise AssertionError("resolved a literal")

    guard = UrlGuard(ssrf.UrlPolicy(), resolver=must_not_resolve)
    assert (await guard.resolve("https://1.1.1.1/x")).addresses == ("1.1.1.1",)
    with pytest.raises(errors.WebhookUrlRefused) as caught:
        await guard.resolve("https://017700000001/x")
    assert caught.value.permanent


async def test_allow_cidrs_admit_a_name_on_an_operator_network() -> None:
    policy = ssrf.UrlPolicy.build(allow_cidrs=["127.0.0.0/8"])
    guard = UrlGuard(policy, resolver=DNS)
    assert (await guard.resolve("https://loopback.test/x")).addresses == ("127.0.0.1",)
    with pytest.raises(errors.WebhookUrlRefused):
        await guard.resolve("https://mixed.test/x")


async def test_the_system_resolver_judges_localhost() -> None:
    assert "127.0.0.1" in await system_resolver("localhost", 80)
    with pytest.raises(errors.WebhookUrlRefused) as caught:
        await UrlGuard(ssrf.UrlPolicy()).resolve("https://localhost/x")
    assert caught.value.reason == "loopback"
