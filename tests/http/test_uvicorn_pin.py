"""jobgate's HTTP edge subclasses uvicorn's private httptools protocol
(http/middleware/edge_limits.py, http/middleware/receipt_timeout.py): the uvicorn installed must be
the pinned series and still have every private name the subclasses override or use, or this says
which is gone."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

MODULE = "uvicorn.protocols.http.httptools_impl"
PIN_HINT = (
    "jobgate's HTTP edge (src/jobgate/http/middleware/edge_limits.py, receipt_timeout.py) "
    "subclasses "
    f"uvicorn's private {MODULE}.HttpToolsProtocol; keep uvicorn at the release pyproject.toml "
    "pins, or adapt the subclasses and raise the pin together"
)
# Methods of HttpToolsProtocol the subclasses override, call or replace.
METHODS = (
    "__init__", "connection_made", "connection_lost", "data_received", "on_url", "on_header",
    "on_headers_complete", "on_message_begin", "on_message_complete", "on_response_complete",
    "_should_upgrade", "_start_asgi_task", "_unset_keepalive_if_required",
    "_unsupported_upgrade_warning", "handle_websocket_upgrade", "timeout_keep_alive_handler",
)  # fmt: skip
# Attributes its __init__ sets that the subclasses read or write.
ATTRIBUTES = (
    "cycle", "expect_100_continue", "flow", "headers", "loop", "parser", "pipeline",
    "server_state", "timeout_keep_alive", "timeout_keep_alive_task", "transport",
)  # fmt: skip


def _protocol() -> type:
    try:
        module = importlib.import_module(MODULE)
    except ImportError as exc:
        pytest.fail(f"uvicorn has no {MODULE} ({exc}): {PIN_HINT}")
    cls = getattr(module, "HttpToolsProtocol", None)
    if not isinstance(cls, type):
        pytest.fail(f"{MODULE} has no HttpToolsProtocol class: {PIN_HINT}")
    return cls


def test_the_installed_uvicorn_is_the_pinned_release() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    [pin] = [
        Requirement(spec)
        for spec in pyproject["project"]["dependencies"]
        if Requirement(spec).name == "uvicorn"
    ]
    installed = importlib.metadata.version("uvicorn")
    assert installed in pin.specifier, f"uvicorn {installed} is not {pin.specifier}: {PIN_HINT}"
    assert any(s.operator in ("<", "==", "~=") for s in pin.specifier), (
        f"uvicorn's pin {pin.specifier} has no upper bound: {PIN_HINT}"
    )


def test_the_private_protocol_has_what_the_edge_subclasses_use() -> None:
    cls = _protocol()
    missing = [name for name in METHODS if not callable(getattr(cls, name, None))]
    assert not missing, f"HttpToolsProtocol lacks {missing}: {PIN_HINT}"
    init = inspect.getsource(cls.__init__)  # type: ignore[misc]
    unset = [name for name in ATTRIBUTES if not re.search(rf"self\.{name}\b", init)]
    assert not unset, f"HttpToolsProtocol.__init__ no longer sets {unset}: {PIN_HINT}"


def test_the_edge_protocols_are_its_subclasses() -> None:
    from jobgate.http.middleware import edge_limits, receipt_timeout

    cls = _protocol()
    assert issubclass(receipt_timeout.ReceiptTimeoutProtocol, cls)
    assert issubclass(edge_limits.EdgeLimitsProtocol, cls)
