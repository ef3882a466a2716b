"""`tests.support.processes.free_port`, which every test server's port comes from: a port below the
kernel's ephemeral range, where no outgoing connection takes its local port (a port picked
inside it was taken by one before the simulator bound it: EADDRINUSE in CI), that is free."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support import processes


def test_a_picked_port_is_free_and_below_the_ephemeral_range() -> None:
    low = processes._ephemeral_low()
    for _ in range(20):
        port = processes.free_port()
        assert max(1024, low - processes._BELOW_EPHEMERAL) <= port < low
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))  # free: binds


def test_a_port_in_use_is_never_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        # A range of one port, held: the kernel's pick instead, never the held port.
        monkeypatch.setattr(processes, "_ephemeral_low", lambda: taken + 1)
        monkeypatch.setattr(processes, "_BELOW_EPHEMERAL", 1)
        assert processes.free_port() != taken


def test_an_unreadable_range_falls_back_to_linuxs_default(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(self: Path) -> str:
        raise FileNotFoundError(self)

    monkeypatch.setattr(Path, "read_text", missing)
    assert processes._ephemeral_low() == 32_768
