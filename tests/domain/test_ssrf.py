"""The SSRF corpus, judged without DNS: every refused class, in every spelling."""

from __future__ import annotations

import ipaddress

import pytest

from jobgate import errors
from jobgate.domain import ssrf

STRICT = ssrf.UrlPolicy()
DEV = ssrf.UrlPolicy.build(allow_http=True)

# host as written in a URL -> the reason it is refused
CORPUS: list[tuple[str, str]] = [
    # loopback, in every IPv4 spelling inet_aton accepts
    ("127.0.0.1", "loopback"),
    ("127.1", "loopback"),
    ("127.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("2130706433", "loopback"),  # decimal
    ("017700000001", "loopback"),  # octal, one part
    ("0177.0.0.1", "loopback"),  # octal
    ("0177.0000.0000.0001", "loopback"),
    ("0x7f.0.0.1", "loopback"),  # hex
    ("0x7f000001", "loopback"),
    ("0X7F.1", "loopback"),
    ("0x7f.0x0.0x0.0x1", "loopback"),
    ("127.0.0.1.", "loopback"),  # trailing dot
    # unspecified / this network
    ("0.0.0.0", "unspecified"),
    ("0", "unspecified"),
    ("0x0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    # RFC 1918
    ("10.0.0.1", "private"),
    ("012.0.0.1", "private"),  # octal 10
    ("167772161", "private"),  # decimal 10.0.0.1
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("0xc0.0xa8.1.1", "private"),
    ("3232235777", "private"),
    # link-local and the metadata service
    ("169.254.169.254", "link_local"),
    ("2852039166", "link_local"),  # decimal 169.254.169.254
    ("0xa9.0xfe.0xa9.0xfe", "link_local"),
    ("0251.0376.0251.0376", "link_local"),
    ("169.254.0.1", "link_local"),
    # CGNAT
    ("100.64.0.1", "cgnat"),
    ("100.127.255.254", "cgnat"),
    # multicast, broadcast, reserved, documentation, benchmarking
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("255.255.255.255", "reserved"),
    ("240.0.0.1", "reserved"),
    ("192.0.2.1", "reserved"),
    ("198.18.0.1", "reserved"),
    ("192.0.0.8", "reserved"),
    # IPv6 classes
    ("[::1]", "loopback"),
    ("[0:0:0:0:0:0:0:1]", "loopback"),
    ("[::]", "unspecified"),
    ("[fe80::1]", "link_local"),
    ("[fe80::1%25eth0]", "link_local"),  # with a zone index
    ("[fc00::1]", "unique_local"),
    ("[fd12:3456:789a::1]", "unique_local"),
    ("[fec0::1]", "private"),
    ("[ff02::1]", "multicast"),
    ("[2001:db8::1]", "reserved"),
    # IPv4 embedded in IPv6
    ("[::ffff:127.0.0.1]", "loopback"),  # IPv4-mapped
    ("[::ffff:7f00:1]", "loopback"),
    ("[0:0:0:0:0:ffff:7f00:1]", "loopback"),
    ("[::ffff:169.254.169.254]", "link_local"),
    ("[::ffff:10.0.0.1]", "private"),
    ("[::127.0.0.1]", "loopback"),  # IPv4-compatible
    ("[::ffff:0:127.0.0.1]", "loopback"),  # IPv4-translated (SIIT)
    ("[64:ff9b::127.0.0.1]", "loopback"),  # NAT64
    ("[64:ff9b::a9fe:a9fe]", "link_local"),
    ("[2002:7f00:1::]", "loopback"),  # 6to4 of 127.0.0.1
    ("[2002:a9fe:a9fe::1]", "link_local"),  # 6to4 of the metadata service
    ("[2001:0:4136:e378:8000:63bf:80ff:fffe]", "loopback"),  # Teredo, client 127.0.0.1
]


@pytest.mark.parametrize(("host", "reason"), CORPUS)
def test_corpus_is_refused_statically(host: str, reason: str) -> None:
    for scheme, policy in (("https", STRICT), ("http", DEV)):
        with pytest.raises(errors.WebhookUrlRefused) as caught:
            ssrf.check_url(f"{scheme}://{host}:8443/hook", policy)
        assert caught.value.reason == reason, host
        assert caught.value.permanent
        assert caught.value.code == "webhook_url_refused"


@pytest.mark.parametrize(
    ("spelling", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0177.0.0.01", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("10.1.2", "10.1.0.2"),
        ("1.2.3.4", "1.2.3.4"),
        ("0xffffffff", "255.255.255.255"),
    ],
)
def test_legacy_ipv4_spellings(spelling: str, address: str) -> None:
    assert ssrf.parse_ipv4(spelling) == ipaddress.IPv4Address(address)


@pytest.mark.parametrize(
    "host", ["example.com", "1.2.3.4.5", "256.0.0.1", "0x100.0.0.1", "08.0.0.1", "1e3", "", "a.1"]
)
def test_not_ipv4(host: str) -> None:
    assert ssrf.parse_ipv4(host) is None


@pytest.mark.parametrize(
    "url",
    [
        "https://93.184.216.34/hook",
        "https://1.1.1.1:8443/x",
        "https://[2606:4700:4700::1111]/x",
        "https://[::ffff:8.8.8.8]/x",  # mapped public address: reaches 8.8.8.8
        "https://example.com/hook?x=1",
        "https://xn--nxasmq6b.example/hook",
    ],
)
def test_public_destinations_pass(url: str) -> None:
    target = ssrf.check_url(url, STRICT)
    assert target.scheme == "https" and target.port in (443, 8443)


def test_http_needs_the_operator_switch() -> None:
    with pytest.raises(errors.WebhookUrlRefused) as caught:
        ssrf.check_url("http://example.com/hook", STRICT)
    assert caught.value.reason == "scheme_not_allowed"
    assert ssrf.check_url("http://example.com/hook", DEV).port == 80


@pytest.mark.parametrize(
    "url", ["ftp://example.com/x", "https:///x", "example.com/x", "https://[::1/x", "gopher://a"]
)
def test_malformed_urls_are_invalid(url: str) -> None:
    with pytest.raises(errors.InvalidRequest) as caught:
        ssrf.check_url(url, DEV)
    assert not isinstance(caught.value, errors.WebhookUrlRefused)
    assert caught.value.code == "invalid_webhook_url"


def test_credentials_in_the_url_are_refused() -> None:
    with pytest.raises(errors.WebhookUrlRefused) as caught:
        ssrf.check_url("https://user:pw@example.com/x", STRICT)
    assert caught.value.reason == "credentials_in_url"


def test_allow_cidrs_exempt_operator_networks() -> None:
    policy = ssrf.UrlPolicy.build(allow_http=True, allow_cidrs=["127.0.0.0/8", "fd00::/8"])
    assert ssrf.check_url("http://127.0.0.1:9000/x", policy).address is not None
    assert ssrf.check_url("http://2130706433:9000/x", policy).port == 9000
    assert ssrf.check_url("http://[::ffff:127.0.0.1]/x", policy).port == 80
    assert ssrf.check_url("http://[fd00::5]/x", policy).port == 80
    for host in ("10.0.0.1", "169.254.169.254", "[::1]"):
        with pytest.raises(errors.WebhookUrlRefused):
            ssrf.check_url(f"http://{host}/x", policy)


def test_bad_allow_cidr_is_a_config_error() -> None:
    with pytest.raises(errors.ConfigError) as caught:
        ssrf.UrlPolicy.build(allow_cidrs=["not-a-network"])
    assert "JOBGATE_WEBHOOK_ALLOW_CIDRS" in str(caught.value)


def test_the_message_names_the_reason() -> None:
    with pytest.raises(errors.WebhookUrlRefused) as caught:
        ssrf.check_url("https://0x7f.1/x", STRICT)
    assert "loopback" in caught.value.message and "127.0.0.1" in caught.value.message
