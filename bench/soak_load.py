"""The soak's clients: submits at a fixed rate a mix of plain, streaming, background, keyed
(`concurrency_key`) and rate-limited jobs, each with its own Idempotency-Key and webhook URL and
retried like a careful client; and OpenAI batches (`/v1/files`, `/v1/batches`) now and then,
a share of them cancelled soon after; with `--stream-faults`, a share of the streaming jobs meets
a fault inside its stream (bench/soak_stream_faults.py). Records what was accepted, of which
kind, which fault each faulted job meets, and when each batch cancel was answered."""

from __future__ import annotations

import dataclasses
import json
import random
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from bench import soak_stream_faults
from bench.soak_stream_faults import Planned

PROVIDER = "upstream"  # background mode at the simulator
LIMITED = "limited"  # sync calls at the simulator under a shared rpm
LIMITED_MODEL = "gpt-4.1-nano"
PROVIDER_WEBHOOKS = ("send", "send", "duplicate", "out_of_order", "none")
CHAT = "/v1/chat/completions"
KINDS = ("plain", "stream", "background", "keyed", "limited")
RETRIED = (409, 429, 502, 503, 504)


@dataclasses.dataclass(slots=True)
class SoakBatch:
    id: str
    custom_ids: list[str]
    created_at: float
    cancel_answered_at: float | None = None  # when a cancel was first answered 200
    cancel_refused: int | None = None  # the status of a refused cancel (409: it had ended)


class Load:
    def __init__(
        self,
        args: Any,
        *,
        api_url: str,
        key: str,
        webhook_url: str,
        log: Callable[[str], None],
    ) -> None:
        self.args = args
        self.api_url = api_url
        self.headers = {"Authorization": f"Bearer {key}"}
        self.webhook_url = webhook_url
        self.log = log
        self.rng = random.Random(args.seed)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.kinds: dict[str, str] = {}  # accepted job id -> kind
        self.streams: set[str] = set()  # accepted jobs submitted with "stream": true
        self.faulted: dict[str, Planned] = {}  # accepted jobs meeting a stream fault
        self.batches: dict[str, SoakBatch] = {}
        self.gave_up = 0  # submits that never got a 2xx within their retry budget
        self.answers: Counter[str] = Counter()
        self.batch_answers: Counter[str] = Counter()
        weights = [args.plain, args.stream, args.background, args.keyed, args.limited]
        self.weights = weights

    # -- jobs ------------------------------------------------------------------------

    def body(self, n: int) -> tuple[dict[str, Any], str, Planned | None]:
        """A job to submit: its body, its kind and the stream fault it meets (if any)."""
        kind = self.rng.choices(KINDS, self.weights)[0]
        latency_s = round(self.rng.uniform(0.1, self.args.max_latency_s), 2)
        webhook = {"url": self.webhook_url}
        if (
            kind == "stream"
            and self.args.stream_faults
            and self.rng.random() < self.args.stream_faults
        ):
            planned = soak_stream_faults.plan(self.rng)
            content = f"soak {n} {secrets.token_hex(3)}"
            faulted = soak_stream_faults.job(planned, content, self.rng.randint(2, 12))
            return {**faulted, "webhook": webhook}, kind, planned
        return (*self._body(n, kind, latency_s, webhook), None)

    def _body(
        self, n: int, kind: str, latency_s: float, webhook: dict[str, str]
    ) -> tuple[dict[str, Any], str]:
        if kind == "background":
            return self._background(n, latency_s, webhook), kind
        if kind == "limited":  # half of them streamed over HTTP from the simulator
            streamed = {"latency_s": min(latency_s, 0.5), "chunks": self.rng.randint(2, 6)}
            return {
                "provider": LIMITED,
                "endpoint": CHAT,
                "body": _chat(LIMITED_MODEL, f"soak {n}", streamed),
                "stream": self.rng.random() < 0.5,
                "webhook": webhook,
            }, kind
        sim: dict[str, Any] = {"latency_s": latency_s}
        job: dict[str, Any] = {"endpoint": CHAT, "webhook": webhook}
        if kind == "keyed":
            key = f"user-{self.rng.randrange(self.args.keys)}"
            if self.rng.random() < 0.4:  # a key's background jobs count towards its cap
                return {**self._background(n, latency_s, webhook), "concurrency_key": key}, kind
            job["concurrency_key"] = key
        if kind == "stream" or (kind == "keyed" and self.rng.random() < 0.5):
            job["stream"] = True
            sim["chunks"] = self.rng.randint(2, 12)
            if self.rng.random() < 0.2:  # the first attempt fails: retried, then streamed
                sim |= {"fail_with": "server_error", "fail_times": 1}
        job["body"] = _chat("sim-echo", f"soak {n} {secrets.token_hex(3)}", sim)
        return job, kind

    def _background(self, n: int, latency_s: float, webhook: dict[str, str]) -> dict[str, Any]:
        sim = {"latency_s": latency_s, "webhooks": self.rng.choice(PROVIDER_WEBHOOKS)}
        return {
            "provider": PROVIDER,
            "endpoint": "/v1/responses",
            "body": {"model": "gpt-4.1-mini", "input": f"soak {n}", "sim": sim},
            "webhook": webhook,
        }

    def submit_one(self, client: httpx.Client, n: int) -> None:
        with self.lock:
            body, kind, planned = self.body(n)
        headers = {"Idempotency-Key": f"soak-{n}-{secrets.token_hex(4)}"}
        answer = self._post(client, "/v1/jobs", body, headers, self.answers)
        with self.lock:
            if answer is None:
                self.gave_up += 1
                return
            self.kinds[answer["id"]] = kind
            if body.get("stream"):
                self.streams.add(answer["id"])
            if planned is not None:
                self.faulted[answer["id"]] = planned

    def _post(
        self,
        client: httpx.Client,
        path: str,
        body: dict[str, Any],
        headers: dict[str, str],
        answers: Counter[str],
    ) -> dict[str, Any] | None:
        """POST until a 2xx (retrying 409, 429, 5xx and lost connections), within the submit
        budget; the answer, or None."""
        deadline = time.monotonic() + self.args.submit_budget_s
        while time.monotonic() < deadline:
            try:
                response = client.post(path, json=body, headers=headers)
            except httpx.TransportError as exc:
                self._count(answers, type(exc).__name__)
                time.sleep(0.2)
                continue
            self._count(answers, str(response.status_code))
            if response.status_code in (200, 201, 202):
                return dict(response.json())
            if response.status_code not in RETRIED:
                self.log(f"POST {path}: unexpected {response.status_code} {response.text[:200]}")
                return None
            time.sleep(min(float(response.headers.get("Retry-After", "1")), 5.0))
        return None

    def _count(self, answers: Counter[str], answer: str) -> None:
        with self.lock:
            answers[answer] += 1

    def submitter(self) -> None:
        interval = 1.0 / self.args.rate
        with (
            httpx.Client(base_url=self.api_url, headers=self.headers, timeout=15) as client,
            ThreadPoolExecutor(16) as pool,
        ):
            start = time.monotonic()
            n = 0
            while not self.stop.is_set():
                pool.submit(self.submit_one, client, n)
                n += 1
                self.stop.wait(max(0.0, start + n * interval - time.monotonic()))

    # -- batches ---------------------------------------------------------------------

    def batcher(self) -> None:
        """A batch every `batch_every` seconds; a share of them cancelled soon after."""
        if self.args.batch_every <= 0:
            return
        with (
            httpx.Client(base_url=self.api_url, headers=self.headers, timeout=30) as client,
            ThreadPoolExecutor(4) as pool,
        ):
            n = 0
            while not self.stop.wait(0 if n == 0 else self.args.batch_every):
                pool.submit(self.one_batch, client, n)
                n += 1

    def one_batch(self, client: httpx.Client, n: int) -> None:
        lines = self.args.batch_lines
        with self.lock:
            latencies = [round(self.rng.uniform(0.05, 1.0), 2) for _ in range(lines)]
            cancel = self.rng.random() < self.args.batch_cancel_share
            cancel_after_s = self.rng.uniform(0.0, self.args.batch_cancel_within_s)
        custom_ids = [f"b{n}-{i}" for i in range(lines)]
        data = "".join(
            json.dumps(
                {
                    "custom_id": custom_id,
                    "method": "POST",
                    "url": CHAT,
                    "body": _chat("sim-echo", f"batch {custom_id}", {"latency_s": latency}),
                }
            )
            + "\n"
            for custom_id, latency in zip(custom_ids, latencies, strict=True)
        ).encode()
        file_id = self._upload(client, f"soak-{n}.jsonl", data)
        if file_id is None:
            return
        batch_id = self._create_batch(client, file_id)
        if batch_id is None:
            return
        batch = SoakBatch(batch_id, custom_ids, time.time())
        with self.lock:
            self.batches[batch_id] = batch
        if cancel:
            time.sleep(cancel_after_s)
            self._cancel(client, batch)

    def _upload(self, client: httpx.Client, name: str, data: bytes) -> str | None:
        deadline = time.monotonic() + self.args.submit_budget_s
        while time.monotonic() < deadline:
            try:
                response = client.post(
                    "/v1/files", data={"purpose": "batch"}, files={"file": (name, data)}
                )
            except httpx.TransportError as exc:
                self._count(self.batch_answers, f"upload {type(exc).__name__}")
                time.sleep(0.5)
                continue
            self._count(self.batch_answers, f"upload {response.status_code}")
            if response.status_code == 200:
                return str(response.json()["id"])
            if response.status_code not in RETRIED:
                self.log(f"upload: unexpected {response.status_code} {response.text[:200]}")
                return None
            time.sleep(1)
        return None

    def _create_batch(self, client: httpx.Client, file_id: str) -> str | None:
        """Create the batch; after an answer that was lost, find it by its input file before
        creating it again (a create is not idempotent)."""
        body = {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"}
        deadline = time.monotonic() + self.args.submit_budget_s
        while time.monotonic() < deadline:
            found = self._batch_of(client, file_id)
            if found is not None:
                return found
            try:
                response = client.post("/v1/batches", json=body)
            except httpx.TransportError as exc:
                self._count(self.batch_answers, f"create {type(exc).__name__}")
                time.sleep(0.5)
                continue
            self._count(self.batch_answers, f"create {response.status_code}")
            if response.status_code == 200:
                return str(response.json()["id"])
            if response.status_code not in RETRIED:
                self.log(f"batch: unexpected {response.status_code} {response.text[:200]}")
                return None
            time.sleep(1)
        return None

    def _batch_of(self, client: httpx.Client, file_id: str) -> str | None:
        try:
            response = client.get("/v1/batches", params={"limit": 100})
        except httpx.TransportError:
            return None
        if response.status_code != 200:
            return None
        for batch in response.json()["data"]:
            if batch["input_file_id"] == file_id:
                return str(batch["id"])
        return None

    def _cancel(self, client: httpx.Client, batch: SoakBatch) -> None:
        deadline = time.monotonic() + self.args.submit_budget_s
        while time.monotonic() < deadline:
            try:
                response = client.post(f"/v1/batches/{batch.id}/cancel")
            except httpx.TransportError as exc:
                self._count(self.batch_answers, f"cancel {type(exc).__name__}")
                time.sleep(0.5)
                continue
            answered_at = time.time()
            self._count(self.batch_answers, f"cancel {response.status_code}")
            if response.status_code == 200:
                with self.lock:
                    batch.cancel_answered_at = answered_at
                return
            if response.status_code not in (429, 502, 503, 504):  # 409: it had ended
                with self.lock:
                    batch.cancel_refused = response.status_code
                return
            time.sleep(1)

    # -- the run ---------------------------------------------------------------------

    def threads(self) -> list[threading.Thread]:
        return [
            threading.Thread(target=self.submitter, name="submitter"),
            threading.Thread(target=self.batcher, name="batcher"),
        ]

    def stream_ids(self) -> list[str]:
        with self.lock:
            return sorted(self.streams)


def _chat(model: str, content: str, sim: dict[str, Any]) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], "sim": sim}
