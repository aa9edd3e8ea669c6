"""The SSRF table: every kind of address a webhook may not reach, by literal and by name."""

from __future__ import annotations

import ipaddress

import pytest

from a2a_gateway.tasks.push_guard import RefusedUrlError, UnresolvedHostError, WebhookGuard

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.1.2.3", "loopback"),
    ("::1", "loopback"),
    ("10.0.0.1", "private"),
    ("172.16.5.4", "private"),
    ("192.168.1.1", "private"),
    ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"),
    ("fc00::1", "unique-local"),
    ("fd12:3456::1", "unique-local"),
    ("fec0::1", "site-local"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("100.64.0.1", "shared (100.64.0.0/10)"),
    ("198.18.0.1", "private"),  # benchmarking
    ("192.0.2.1", "private"),  # documentation
    ("169.254.169.254", "cloud metadata"),
    ("169.254.170.2", "cloud metadata"),
    ("fd00:ec2::254", "cloud metadata"),
    ("100.100.100.200", "cloud metadata"),
    ("192.0.0.192", "cloud metadata"),
    ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
    ("::ffff:10.0.0.1", "private"),
    ("::ffff:169.254.169.254", "cloud metadata"),
    ("2002:7f00:1::", "loopback"),  # 6to4 around 127.0.0.1
    ("2002:a9fe:a9fe::", "cloud metadata"),  # 6to4 around 169.254.169.254
    ("64:ff9b::a00:1", "reserved"),  # NAT64 around 10.0.0.1
]

PUBLIC = ["93.184.215.14", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


def fake_dns(mapping: dict[str, list[str]]):
    calls: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        calls.append(host)
        if host not in mapping:
            raise OSError("no such host")
        return mapping[host]

    resolve.calls = calls  # type: ignore[attr-defined]
    return resolve


def literal_url(address: str) -> str:
    return f"http://[{address}]:8080/hook" if ":" in address else f"http://{address}:8080/hook"


@pytest.mark.parametrize(("address", "kind"), REFUSED)
async def test_an_address_literal_of_every_refused_kind_is_refused(address, kind):
    guard = WebhookGuard(resolver=fake_dns({}))
    with pytest.raises(RefusedUrlError) as err:
        await guard.check(literal_url(address))
    assert str(err.value) == f"push notification url is not allowed: {address} is a {kind} address"


@pytest.mark.parametrize(("address", "kind"), REFUSED)
async def test_a_name_resolving_to_every_refused_kind_is_refused(address, kind):
    guard = WebhookGuard(resolver=fake_dns({"hooks.example.com": [address]}))
    with pytest.raises(RefusedUrlError) as err:
        await guard.check("https://hooks.example.com/a2a")
    assert str(err.value) == (
        f"push notification url is not allowed: hooks.example.com resolves to a {kind} address"
    )


@pytest.mark.parametrize("address", PUBLIC)
async def test_public_addresses_pass_and_are_the_address_to_connect_to(address):
    guard = WebhookGuard(resolver=fake_dns({"hooks.example.com": [address]}))
    target = await guard.check("https://hooks.example.com/a2a?x=1")
    assert target.host == "hooks.example.com"
    assert ipaddress.ip_address(target.address) == ipaddress.ip_address(address)
    assert str(target.url) == "https://hooks.example.com/a2a?x=1"


async def test_one_private_address_among_public_ones_refuses_the_name():
    guard = WebhookGuard(resolver=fake_dns({"mixed.example.com": ["8.8.8.8", "10.0.0.5"]}))
    with pytest.raises(RefusedUrlError, match="resolves to a private address"):
        await guard.check("http://mixed.example.com/")


async def test_numeric_host_forms_are_judged_by_what_they_resolve_to():
    # 2130706433 and 0x7f.1 are 127.0.0.1 for the system resolver (inet_aton)
    guard = WebhookGuard()
    for url in ("http://2130706433/h", "http://0x7f.1/h", "http://localhost/h"):
        with pytest.raises(RefusedUrlError, match="loopback"):
            await guard.check(url)


async def test_loopback_is_allowed_for_local_tests_but_nothing_else_is():
    guard = WebhookGuard(
        allow_loopback=True, resolver=fake_dns({"localhost": ["127.0.0.1", "::1"]})
    )
    assert (await guard.check("http://localhost:9999/h")).address == "127.0.0.1"
    assert (await guard.check("http://[::ffff:127.0.0.1]/h")).address == "::ffff:7f00:1"
    for address in ("10.0.0.1", "169.254.169.254", "0.0.0.0", "fd00:ec2::254"):
        with pytest.raises(RefusedUrlError):
            await guard.check(literal_url(address))


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://hooks.example.com/",
        "gopher://x/",
        "http:///nohost",
        "not a url",
    ],
)
async def test_only_http_urls_with_a_host(url):
    with pytest.raises(RefusedUrlError):
        await WebhookGuard(resolver=fake_dns({})).check(url)


async def test_an_unresolvable_host_is_refused_as_unresolved():
    with pytest.raises(UnresolvedHostError, match="nowhere.example.com does not resolve"):
        await WebhookGuard(resolver=fake_dns({})).check("https://nowhere.example.com/")


async def test_the_allowlist_admits_only_its_hosts_and_still_checks_their_addresses():
    dns = fake_dns({"hooks.example.com": ["8.8.8.8"], "a.hooks.example.com": ["8.8.4.4"],
                    "other.example.org": ["1.1.1.1"], "internal.example.com": ["10.1.1.1"]})
    guard = WebhookGuard(allowed_hosts=[".hooks.example.com", "internal.example.com"], resolver=dns)
    assert (await guard.check("https://hooks.example.com/")).address == "8.8.8.8"
    assert (await guard.check("https://A.Hooks.Example.com./")).address == "8.8.4.4"
    with pytest.raises(RefusedUrlError, match="other.example.org is not on the allowlist"):
        await guard.check("https://other.example.org/")
    assert "other.example.org" not in dns.calls  # refused before any lookup
    with pytest.raises(RefusedUrlError, match="private"):
        await guard.check("https://internal.example.com/")


async def test_the_reason_never_shows_url_credentials():
    guard = WebhookGuard(resolver=fake_dns({"hooks.example.com": ["10.0.0.1"]}))
    with pytest.raises(RefusedUrlError) as err:
        await guard.check("https://admin:s3cret-pw@hooks.example.com/h?token=t0k")
    assert "s3cret-pw" not in str(err.value) and "t0k" not in str(err.value)
