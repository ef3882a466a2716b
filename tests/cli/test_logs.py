"""Logs for people and machines: JSON lines unless on a terminal (or asked), a readable coloured
line on a terminal, only safe fields either way."""

from __future__ import annotations

import io
import json
import logging

import pytest

from jobgate import logs


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def record(**extra: object) -> logging.LogRecord:
    entry = logging.LogRecord("jobgate.worker", logging.WARNING, __file__, 1, "lease lost %s",
                              ("now",), None)  # fmt: skip
    entry.__dict__.update(extra)
    return entry


@pytest.mark.parametrize(
    ("setting", "terminal", "kind"),
    [
        ("auto", False, logs.JsonFormatter),
        ("auto", True, logs.HumanFormatter),
        ("json", True, logs.JsonFormatter),
        ("human", False, logs.HumanFormatter),
    ],
)
def test_the_format_follows_the_setting_and_the_stream(
    setting: logs.LogFormat, terminal: bool, kind: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    stream = Terminal() if terminal else io.StringIO()
    formatter = logs.formatter_for(setting, stream)
    assert isinstance(formatter, kind)
    if isinstance(formatter, logs.HumanFormatter):
        assert formatter.colour is terminal


def test_a_human_line_is_readable_and_carries_only_safe_fields() -> None:
    line = logs.HumanFormatter(colour=False).format(
        record(job_id="job_1", attempt=2, body="secret prompt", api_key="jg_x")
    )
    assert line.endswith("WARNING worker: lease lost now  attempt=2 job_id=job_1")
    assert "secret" not in line and "jg_x" not in line and "{" not in line
    coloured = logs.HumanFormatter(colour=True).format(record())
    assert "\x1b[33mWARNING" in coloured


def test_a_json_line_carries_only_safe_fields() -> None:
    line = json.loads(logs.JsonFormatter().format(record(job_id="job_1", body="secret prompt")))
    assert line["message"] == "lease lost now" and line["job_id"] == "job_1"
    assert "body" not in line and line["level"] == "warning"


def test_no_colour_with_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    formatter = logs.formatter_for("auto", Terminal())
    assert isinstance(formatter, logs.HumanFormatter) and not formatter.colour


def test_the_access_log_is_off_unless_asked() -> None:
    logs.configure("warning", stream=io.StringIO())
    assert not logging.getLogger("jobgate.access").isEnabledFor(logging.INFO)
    logs.configure("warning", stream=io.StringIO(), access_log=True)
    assert logging.getLogger("jobgate.access").isEnabledFor(logging.INFO)
    logs.configure("warning", stream=io.StringIO())
