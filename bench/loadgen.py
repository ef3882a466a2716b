"""`python -m bench.loadgen SPEC_JSON`: the HTTP load generator, run as its own process on
loopback so that the server under test does not share its event loop.

A minimal HTTP/1.1 keep-alive client (httptools parses the responses) on uvloop, in three modes:

- `open`: an open-loop arrival process at a fixed rate. Request i is due at t0 + i/rate; its
  latency runs from that scheduled time, not from when a connection became free, so a server
  that falls behind shows its queueing delay (no coordinated omission). Prints one JSON summary.
- `wake`: long-poll wake-up. Per trial: submit a job, park `GET /v1/jobs/{id}?wait=30` (on the
  poll URL), cancel the job (on the cancel URL), and time the poll's answer against the
  cancel's answer.
- `hold`: open N connections, each parked in a long poll; report when all are sent, keep them
  until a line arrives on stdin, then report how many answered early.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import urllib.parse
from collections import deque
from collections.abc import Sequence
from typing import Any

import httptools
import orjson
import uvloop

from bench.results import latency_summary


class HttpError(Exception):
    pass


class Connection(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.body = bytearray()
        self.closed = False

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(HttpError(f"bad response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(HttpError(f"connection lost: {exc}"))

    # -- httptools callbacks ---------------------------------------------------------------
    def on_message_begin(self) -> None:
        self.body = bytearray()

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((self.parser.get_status_code(), bytes(self.body)))

    # -- use -------------------------------------------------------------------------------
    def _fail(self, exc: Exception) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        if self.closed or self.transport is None:
            raise HttpError("connection closed")
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        return await self.waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Target:
    """Where requests go, and how to spell them."""

    def __init__(self, base_url: str, api_key: str) -> None:
        parts = urllib.parse.urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self._head = f"Host: {self.host}:{self.port}\r\nAuthorization: Bearer {api_key}\r\n"

    async def connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(Connection, self.host, self.port)
        return protocol

    def get(self, path: str) -> bytes:
        return f"GET {path} HTTP/1.1\r\n{self._head}\r\n".encode()

    def post(self, path: str, body: Any = None) -> bytes:
        payload = b"" if body is None else orjson.dumps(body)
        return (
            f"POST {path} HTTP/1.1\r\n{self._head}Content-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        ).encode() + payload


class Pool:
    """Idle keep-alive connections; a dead one is replaced on the next use."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.idle: asyncio.Queue[Connection] = asyncio.Queue()

    async def fill(self, count: int) -> None:
        for connection in await asyncio.gather(*(self.target.connect() for _ in range(count))):
            self.idle.put_nowait(connection)

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        connection = await self.idle.get()
        try:
            if connection.closed:
                connection = await self.target.connect()
            return await connection.request(raw)
        finally:
            if connection.closed:
                connection = await self.target.connect()
            self.idle.put_nowait(connection)

    def close(self) -> None:
        while not self.idle.empty():
            self.idle.get_nowait().close()


# -- open loop ---------------------------------------------------------------------------------

# The sender wakes at most once per tick and sends every request due by then. uvloop's timers
# count whole milliseconds and round a shorter delay down to zero, so a sender sleeping until
# the next request's due time (a third of a millisecond apart at 3,000/s) spun its event loop
# and burned a whole core of this 2-core machine, beside the server it measures. A request
# sent up to a tick late is still timed from when it was due.
SENDER_TICK_S = 0.001


class TimedConnection(asyncio.Protocol):
    """One keep-alive connection of the open loop, one request at a time, answered through
    callbacks (no task, future or queue per request: the generator's own CPU per request is
    what the server under test loses on a shared machine)."""

    def __init__(self, run: OpenRun) -> None:
        self.run = run
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.due = 0.0
        self.measured = False  # due after the warm-up
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.run.failed(self, f"bad response: {exc}")

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.transport = None
            self.run.failed(self, f"connection lost: {exc}")

    def on_message_complete(self) -> None:
        if self.busy:
            self.busy = False
            self.run.answered(self, self.parser.get_status_code())

    def send(self, raw: bytes, due: float, measured: bool) -> None:
        assert self.transport is not None
        self.due = due
        self.measured = measured
        self.busy = True
        self.transport.write(raw)


class OpenRun:
    """The open loop's bookkeeping: idle connections, requests due while none was idle (sent
    in order as connections free up), and what the answers measured."""

    def __init__(self, target: Target, requests: list[bytes]) -> None:
        self.target = target
        self.requests = requests
        self.start = 0.0
        self.idle: list[TimedConnection] = []
        self.backlog: deque[tuple[int, float, bool]] = deque()
        self.connections: set[TimedConnection] = set()
        self.closing = False
        self.scheduled_all = False
        self.all_answered = asyncio.Event()
        self.in_flight = 0
        self.latencies: list[float] = []
        self.completions: list[float] = []
        self.statuses: dict[int, int] = {}
        self.failures: list[str] = []
        self.reconnects: set[asyncio.Task[None]] = set()

    async def fill(self, count: int) -> None:
        loop = asyncio.get_running_loop()
        made = await asyncio.gather(
            *(
                loop.create_connection(
                    lambda: TimedConnection(self), self.target.host, self.target.port
                )
                for _ in range(count)
            )
        )
        for _, connection in made:
            self.connections.add(connection)
            self.idle.append(connection)

    def dispatch(self, index: int, due: float, measured: bool) -> None:
        self.in_flight += 1
        if self.idle:
            self._send(self.idle.pop(), index, due, measured)
        else:
            self.backlog.append((index, due, measured))

    def _send(self, connection: TimedConnection, index: int, due: float, measured: bool) -> None:
        connection.send(self.requests[index % len(self.requests)], due, measured)

    def _next(self, connection: TimedConnection) -> None:
        if self.backlog:
            self._send(connection, *self.backlog.popleft())
        else:
            self.idle.append(connection)

    def _settled(self) -> None:
        self.in_flight -= 1
        if self.scheduled_all and not self.in_flight:
            self.all_answered.set()

    def done_sending(self) -> None:
        self.scheduled_all = True
        if not self.in_flight:
            self.all_answered.set()

    def answered(self, connection: TimedConnection, status: int) -> None:
        done = time.perf_counter()
        self._settled()
        due = connection.due
        if 200 <= status < 300:
            self.completions.append(done - self.start)
        if connection.measured:
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if 200 <= status < 300:
                self.latencies.append(done - due)
        self._next(connection)

    def failed(self, connection: TimedConnection, message: str) -> None:
        """Counted, never fatal: the request in flight (if any) is a failure and the
        connection is replaced."""
        if connection.busy:
            connection.busy = False
            self._settled()
            if len(self.failures) < 20:
                self.failures.append(message)
            self.statuses[-1] = self.statuses.get(-1, 0) + 1
        if connection.transport is not None:
            connection.transport.close()
            connection.transport = None
        if connection in self.idle:
            self.idle.remove(connection)
        self.connections.discard(connection)
        if self.closing:
            return
        task = asyncio.get_running_loop().create_task(self._reconnect())
        self.reconnects.add(task)
        task.add_done_callback(self.reconnects.discard)

    async def _reconnect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(
                lambda: TimedConnection(self), self.target.host, self.target.port
            )
        except OSError as exc:
            if len(self.failures) < 20:
                self.failures.append(f"reconnect: {exc!r}")
            return
        self.connections.add(connection)
        self._next(connection)

    def close(self) -> None:
        self.closing = True
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.close()


async def open_loop(spec: dict[str, Any]) -> dict[str, Any]:
    target = Target(spec["url"], spec["api_key"])
    rate = float(spec["rate"])
    seconds = float(spec["seconds"])
    warmup_s = float(spec.get("warmup_s", min(1.0, seconds / 5)))
    if spec["op"] == "submit":
        requests = [target.post("/v1/jobs", spec["body"])]
    else:
        requests = [target.get(f"/v1/jobs/{job_id}") for job_id in spec["job_ids"]]
    run = OpenRun(target, requests)
    await run.fill(int(spec["connections"]))
    total = int(rate * (warmup_s + seconds))
    max_lag = 0.0
    run.start = start = time.perf_counter()
    sent = 0
    wakeups = 0
    while sent < total:
        wakeups += 1
        now = time.perf_counter()
        due_count = min(total, int((now - start) * rate) + 1)
        if sent < due_count:  # the first of them is the latest
            max_lag = max(max_lag, now - (start + sent / rate))
        while sent < due_count:
            # Measured by its place in the schedule (due after the warm-up), not by subtracting
            # clock readings: `start + i / rate - start` can land a hair under `i / rate`.
            run.dispatch(sent, start + sent / rate, sent / rate >= warmup_s)
            sent += 1
        await asyncio.sleep(max(SENDER_TICK_S, start + sent / rate - time.perf_counter()))
    schedule_end = time.perf_counter()
    run.done_sending()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(run.all_answered.wait(), float(spec.get("drain_timeout_s", 30)))
    unanswered = run.in_flight
    run.close()
    await asyncio.sleep(0)
    ok = len(run.latencies)
    window_end = warmup_s + seconds
    in_window = sum(1 for t in run.completions if warmup_s <= t < window_end)
    return {
        "op": spec["op"],
        "offered_per_s": rate,
        # 2xx answers that arrived inside the measured window, per second of it
        "achieved_per_s": round(in_window / seconds, 1),
        "measured_s": seconds,
        "ok": ok,
        "statuses": {str(k): v for k, v in sorted(run.statuses.items())},
        "unanswered": unanswered,
        "failures": run.failures,
        "sender_max_lag_ms": round(max_lag * 1000, 3),
        "sender_wakeups": wakeups,
        "schedule_overrun_ms": round((schedule_end - start - warmup_s - seconds) * 1000, 1),
        **latency_summary(run.latencies),
    }


# -- long-poll wake-up -------------------------------------------------------------------------


async def wake(spec: dict[str, Any]) -> dict[str, Any]:
    submit_target = Target(spec["cancel_url"], spec["api_key"])
    poll_target = Target(spec["poll_url"], spec["api_key"])
    park_s = float(spec.get("park_s", 0.2))
    from_response: list[float] = []
    from_request: list[float] = []
    failures: list[str] = []

    async def trial() -> None:
        control = await submit_target.connect()
        poller = await poll_target.connect()
        try:
            status, body = await control.request(submit_target.post("/v1/jobs", spec["body"]))
            if status != 202:
                raise HttpError(f"submit answered {status}")
            job_id = orjson.loads(body)["id"]
            poll = asyncio.ensure_future(
                poller.request(poll_target.get(f"/v1/jobs/{job_id}?wait=30"))
            )
            await asyncio.sleep(park_s)  # the long poll is parked on the server by now
            if poll.done():
                raise HttpError("the long poll answered before the cancel")
            sent = time.perf_counter()
            status, _ = await control.request(submit_target.post(f"/v1/jobs/{job_id}/cancel"))
            answered = time.perf_counter()
            if status != 200:
                raise HttpError(f"cancel answered {status}")
            poll_status, poll_body = await asyncio.wait_for(poll, 35)
            woke = time.perf_counter()
            if poll_status != 200 or orjson.loads(poll_body)["status"] != "cancelled":
                raise HttpError(f"the long poll answered {poll_status} {poll_body[:80]!r}")
            from_response.append(woke - answered)
            from_request.append(woke - sent)
        finally:
            control.close()
            poller.close()

    async def runner(count: int) -> None:
        for _ in range(count):
            try:
                await trial()
            except Exception as exc:  # counted in the summary
                failures.append(repr(exc))

    trials = int(spec["trials"])
    parallel = max(1, min(int(spec.get("parallel", 10)), trials))
    shares = [trials // parallel + (1 if i < trials % parallel else 0) for i in range(parallel)]
    await asyncio.gather(*(runner(n) for n in shares))
    return {
        "trials": trials,
        "ok": len(from_response),
        "failures": failures[:20],
        "failed": len(failures),
        **latency_summary(from_response),
        **latency_summary(from_request, prefix="from_cancel_sent_"),
        "min_ms": round(min(from_response) * 1000, 3) if from_response else None,
    }


# -- many parked long polls --------------------------------------------------------------------


async def hold(spec: dict[str, Any]) -> dict[str, Any]:
    target = Target(spec["url"], spec["api_key"])
    job_ids: Sequence[str] = spec["job_ids"]
    clients = int(spec["clients"])
    wait_s = int(spec["wait_s"])
    per_s = float(spec.get("connect_per_s", 1000))
    connections: list[Connection] = []
    polls: list[asyncio.Future[tuple[int, bytes]]] = []
    connect_failures = 0
    start = time.perf_counter()
    for index in range(clients):
        delay = start + index / per_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        try:
            connection = await target.connect()
        except OSError:
            connect_failures += 1
            continue
        connections.append(connection)
        raw = target.get(f"/v1/jobs/{job_ids[index % len(job_ids)]}?wait={wait_s}")
        polls.append(asyncio.ensure_future(connection.request(raw)))
    print(json.dumps({"holding": len(polls), "connect_failures": connect_failures}), flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    answered = [p.result()[0] for p in polls if p.done() and not p.exception()]
    errors = sum(1 for poll in polls if poll.done() and poll.exception())
    statuses: dict[str, int] = {}
    for status in answered:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    for connection in connections:
        connection.close()
    for poll in polls:
        if not poll.done():
            poll.cancel()
    await asyncio.sleep(0)
    return {
        "clients": clients,
        "held": len(polls),
        "answered_early": len(answered),
        "answered_statuses": statuses,
        "errors": errors,
        "connect_failures": connect_failures,
    }


MODES = {"open": open_loop, "wake": wake, "hold": hold}


def main() -> None:
    spec = json.loads(sys.argv[1])
    result = uvloop.run(MODES[spec["mode"]](spec))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
