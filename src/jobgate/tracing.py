"""OpenTelemetry spans when `opentelemetry` is installed (the `otel` extra), nothing otherwise.

Spans: jobgate.submit, jobgate.claim, jobgate.provider_call, jobgate.webhook_delivery, each
with the job id as the `jobgate.job_id` attribute where there is one. Configure exporters the
usual way (opentelemetry-instrument, or an SDK TracerProvider set up by the host program).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

try:
    from opentelemetry import trace as _trace
except ImportError:  # the extra is not installed: spans cost nothing
    _trace = None  # type: ignore[assignment]


class _NoSpan:
    def set_attribute(self, key: str, value: Any) -> None:
        return None


def recording() -> bool:
    """Whether spans are recorded: a tracer provider is set (by the host program or
    opentelemetry-instrument). Asked per use, so a provider set later is used from then on."""
    return _trace is not None and not isinstance(
        _trace.get_tracer_provider(), _trace.ProxyTracerProvider
    )


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    """A span named `name` with `jobgate.<key>` attributes (None values are left out)."""
    if not recording():
        # No tracer provider is set (by the host program or opentelemetry-instrument): the
        # span would be a non-recording no-op, and entering one (a context attach and detach)
        # costs more than a zero-latency job's own work in the worker.
        yield _NoSpan()
        return
    tracer = _trace.get_tracer("jobgate")
    values = {f"jobgate.{key}": value for key, value in attributes.items() if value is not None}
    with tracer.start_as_current_span(name, attributes=values) as current:
        yield current
