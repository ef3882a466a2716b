"""`jobgate listen`: a webhook receiver for trying jobgate on one machine. It verifies each
delivery's signature (Standard Webhooks, with the endpoint's secret), answers 204, and prints
the event as one JSON line. Client-side only: the standard library and jobgate.client."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

import click

from jobgate.client.webhooks import WebhookVerificationError, verify_webhook

MAX_BODY_BYTES = 4 * 1024 * 1024


def _handler(secret: str, events: list[Any], done: threading.Event, count: int) -> type:
    lock = threading.Lock()

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if length > MAX_BODY_BYTES:
                self.send_error(413)
                return
            body = self.rfile.read(length)
            try:
                event = verify_webhook(body, dict(self.headers.items()), secret)
            except WebhookVerificationError as exc:
                click.echo(f"jobgate: refused a delivery to {self.path}: {exc}", err=True)
                self.send_error(400, "bad signature")
                return
            self.send_response(204)
            self.end_headers()
            with lock:
                if any(seen.get("id") == event.get("id") for seen in events):
                    return  # at-least-once: a redelivery of an event already printed
                events.append(event)
                click.echo(json.dumps(event, ensure_ascii=False))
                if count and len(events) >= count:
                    done.set()

        def log_message(self, format: str, *args: Any) -> None:
            return  # the events are the output; no access log lines among them

    return Receiver


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), default=9200, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--secret", required=True, help="The endpoint's secret (whsec_…).")
@click.option(
    "--count", type=click.IntRange(min=0), default=0, help="Exit after N events (0: never)."
)
def listen(port: int, host: str, secret: str, count: int) -> None:
    """Receive webhooks on this machine: verify each, print it as a JSON line.

    The server must be allowed to call it: JOBGATE_WEBHOOK_ALLOW_HTTP=1 and
    JOBGATE_WEBHOOK_ALLOW_CIDRS=127.0.0.1/32 (the SSRF guard refuses loopback otherwise).
    """
    if not secret.startswith("whsec_"):
        raise click.UsageError("--secret must be the endpoint's whsec_… secret")
    events: list[Any] = []
    done = threading.Event()
    try:
        server = http.server.ThreadingHTTPServer(
            (host, port), _handler(secret, events, done, count)
        )
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    click.echo(f"listening on http://{host}:{server.server_address[1]}", err=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        done.wait() if count else thread.join()
    finally:
        server.shutdown()
        server.server_close()


COMMANDS = (listen,)
