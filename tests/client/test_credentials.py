"""Saved credentials name a server, not a spelling of its URL: `localhost`, `127.0.0.1` and
`[::1]` on one port are one server, and so is the wildcard address a server listens on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobgate.client import credentials

ONE_SERVER = (
    "http://127.0.0.1:8000",
    "http://localhost:8000",
    "http://LOCALHOST:8000/",
    "http://[::1]:8000",
    "http://0.0.0.0:8000",
    "http://[::]:8000",
    "HTTP://127.0.0.1:8000",
)


@pytest.mark.parametrize("url", ONE_SERVER)
def test_every_name_of_this_machine_is_one_server(url: str) -> None:
    assert credentials.server_identity(url) == "http://127.0.0.1:8000"


@pytest.mark.parametrize(
    ("url", "identity"),
    [
        ("http://127.0.0.1:8001", "http://127.0.0.1:8001"),  # another port, another server
        ("https://jobgate.example.com:443/", "https://jobgate.example.com"),
        ("http://jobgate.example.com:80", "http://jobgate.example.com"),
        ("https://Jobgate.Example.com:8443/gw/", "https://jobgate.example.com:8443/gw"),
        ("http://[2001:db8::1]:8000", "http://[2001:db8::1]:8000"),
        ("http://localhost", "http://127.0.0.1"),
        ("not a url", "not a url"),
        ("http://h:notaport", "http://h:notaport"),
    ],
)
def test_other_servers_keep_their_own_identity(url: str, identity: str) -> None:
    assert credentials.server_identity(url) == identity


@given(st.text(max_size=60))
def test_an_identity_is_its_own_identity(url: str) -> None:
    once = credentials.server_identity(url)
    assert credentials.server_identity(once) == once


def test_a_key_saved_for_one_name_is_found_by_the_others(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    env = {"JOBGATE_CREDENTIALS_PATH": str(path)}
    credentials.save(path, "http://127.0.0.1:8000", api_key="jg_a", operator_key="jgo_a")
    for url in ONE_SERVER:
        assert credentials.saved_key(url, env) == "jg_a"
        assert credentials.resolve(url, None, env) == (credentials.normal_url(url), "jg_a")
    assert credentials.saved_key("http://127.0.0.1:8001", env) is None
    credentials.save(path, "http://localhost:8000/", tenant="default")
    assert json.loads(path.read_text()) == {
        "http://127.0.0.1:8000": {"api_key": "jg_a", "operator_key": "jgo_a", "tenant": "default"}
    }


def test_entries_an_older_version_saved_under_two_names_merge(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    path.write_text(
        json.dumps(
            {
                "http://localhost:8000": {"api_key": "jg_old", "tenant": "default"},
                "http://127.0.0.1:8000": {"api_key": "jg_new", "operator_key": "jgo"},
            }
        )
    )
    assert credentials.saved_entry("http://[::1]:8000", path=path) == {
        "api_key": "jg_new",
        "tenant": "default",
        "operator_key": "jgo",
    }
