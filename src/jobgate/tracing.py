"""OpenTelemetry spans when `opentelemetry` is installed (the `otel` extra), nothing otherwise.

Spans: jobgate.submit, jobgate.claim, jobgate.provider_call, jobgate.webhook_delivery, each
with the job id as the `jobgate.job_id` attribute where there is one. Configure exporters the
usual way (opentelemetry-instrument, or an SDK TracerProvider set up by the host program).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

try:
    from opentelemetry import trace as _trace
except ImportError:  # the extra is not installed: spans cost nothing
    _trace = None  # type: ignore[assignment]


class _NoSpan:
    def set_attribute(self, key: str, value: Any) -> None:
        return None


# Whether "no provider is set" can be read from the API's global (a dictionary lookup)
# rather than from `get_tracer_provider()`, which looks for OTEL_PYTHON_TRACER_PROVIDER in
# os.environ on every call while none is set (~1.7 us, 1.3 % of the API's CPU on submits).
# A provider named by that variable is loaded by the first public call, so then it is used.
_READS_GLOBAL = (
    _trace is not None
    and "_TRACER_PROVIDER" in vars(_trace)
    and "OTEL_PYTHON_TRACER_PROVIDER" not in os.environ
)


def recording() -> bool:
    """Whether spans are recorded: a tracer provider is set (by the host program or
    opentelemetry-instrument). Asked per use, so a provider set later is used from then on."""
    if _trace is None:
        return False
    if _READS_GLOBAL and vars(_trace)["_TRACER_PROVIDER"] is None:
        return False  # none set: the proxy provider's spans would not record
    return not isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider)


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
