"""The soak's webhook receiver: the user's endpoint, written as docs/webhooks.md says (verify
the signature, deduplicate on webhook-id, then apply the event), for the jobs' own webhook URLs
and for the tenant's endpoint that subscribes to batch events."""

from __future__ import annotations

import random
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from jobgate.client.webhooks import WebhookVerificationError, verify_webhook


class Receiver:
    """A share of deliveries is answered 500 after the effect was applied (a receiver that
    crashed before answering), so that redeliveries of applied events really happen."""

    def __init__(self, *, fail_rate: float, seed: int | None) -> None:
        self.secrets: list[str] = []  # the tenant's secret and the batch endpoint's
        self.fail_rate = fail_rate
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.seen: set[str] = set()  # webhook-ids applied
        self.effects: Counter[tuple[str, str]] = Counter()  # (object id, event type) -> applied
        self.deliveries = 0
        self.redeliveries = 0  # a webhook-id seen before: acknowledged, not applied again
        self.rejected = 0  # failed verification
        self.failed_on_purpose = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(receiver.receive(body, dict(self.headers.items())))
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def receive(self, body: bytes, headers: dict[str, str]) -> int:
        payload = self._verified(body, headers)
        if payload is None:
            with self.lock:
                self.rejected += 1
            return 400
        webhook_id = {k.lower(): v for k, v in headers.items()}["webhook-id"]
        with self.lock:
            self.deliveries += 1
            if webhook_id in self.seen:
                self.redeliveries += 1
            else:
                self.seen.add(webhook_id)
                self.effects[(payload["data"]["id"], payload["type"])] += 1
            if self.rng.random() < self.fail_rate:
                self.failed_on_purpose += 1
                return 500
        return 200

    def _verified(self, body: bytes, headers: dict[str, str]) -> dict[str, Any] | None:
        for secret in list(self.secrets):
            try:
                return dict(verify_webhook(body, headers, secret))
            except WebhookVerificationError:
                continue
        return None

    def applied_for(self, object_id: str) -> int:
        with self.lock:
            return sum(n for (found, _type), n in self.effects.items() if found == object_id)

    def applied(self) -> dict[str, int]:
        """Effects applied per object id (job or batch)."""
        totals: Counter[str] = Counter()
        with self.lock:
            for (found, _type), n in self.effects.items():
                totals[found] += n
        return dict(totals)

    @property
    def duplicate_effects(self) -> int:
        with self.lock:
            return sum(n - 1 for n in self.effects.values() if n > 1)

    def close(self) -> None:
        self.server.shutdown()
