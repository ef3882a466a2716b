"""verify_webhook, and the signatures jobgate sends, checked against the Standard Webhooks,
Svix and OpenAI libraries."""

from __future__ import annotations

import ast
import time
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
import standardwebhooks
import svix.webhooks

from jobgate.client.webhooks import WebhookVerificationError, verify_webhook
from jobgate.services.tenants import new_webhook_secret
from jobgate.wire import standard_webhooks

OLD = new_webhook_secret()
NEW = new_webhook_secret()
EVENT: dict[str, Any] = {
    "id": "evt_0123456789abcdef01234567",
    "object": "event",
    "type": "response.completed",
    "created_at": 1_900_000_000,
    "data": {"id": "resp_abc", "status": "succeeded"},
}
BODY = orjson.dumps(EVENT)


def signed(secrets: list[str], *, body: bytes = BODY, age_s: int = 0) -> dict[str, str]:
    return standard_webhooks.signed_headers(secrets, EVENT["id"], int(time.time()) - age_s, body)


def third_party_verifiers(secret: str):  # type: ignore[no-untyped-def]
    client = openai.OpenAI(api_key="unused", webhook_secret=secret)
    return [
        lambda body, headers: standardwebhooks.Webhook(secret).verify(body, headers),
        lambda body, headers: svix.webhooks.Webhook(secret).verify(body, headers),
        lambda body, headers: client.webhooks.verify_signature(body, headers),
        lambda body, headers: client.webhooks.unwrap(body, headers),
    ]


def test_secrets_have_the_standard_shape() -> None:
    assert NEW.startswith("whsec_") and len(standard_webhooks.secret_bytes(NEW)) == 32


@pytest.mark.parametrize("secrets", [[NEW], [NEW, OLD]], ids=["one", "rotating"])
def test_every_library_verifies_our_signatures(secrets: list[str]) -> None:
    headers = signed(secrets)
    assert len(headers["webhook-signature"].split()) == len(secrets)
    for secret in secrets:  # during a rotation, a receiver on either secret verifies
        assert verify_webhook(BODY, headers, secret) == EVENT
        for verify in third_party_verifiers(secret):
            verify(BODY, headers)


def test_openai_unwrap_types_a_responses_event() -> None:
    client = openai.OpenAI(api_key="unused", webhook_secret=NEW)
    event = client.webhooks.unwrap(BODY, signed([NEW]))
    assert type(event).__name__ == "ResponseCompletedWebhookEvent"
    assert event.type == "response.completed" and event.data.id == "resp_abc"


def test_verify_accepts_str_bodies_and_any_header_case() -> None:
    headers = {k.upper(): v for k, v in signed([NEW]).items()}
    assert verify_webhook(BODY.decode(), headers, NEW)["id"] == EVENT["id"]


def test_a_tampered_body_is_rejected() -> None:
    headers = signed([NEW])
    tampered = BODY.replace(b"succeeded", b"failed")
    with pytest.raises(WebhookVerificationError):
        verify_webhook(tampered, headers, NEW)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(BODY + b" ", headers, NEW)


def test_a_stale_timestamp_is_rejected() -> None:
    with pytest.raises(WebhookVerificationError, match="too old"):
        verify_webhook(BODY, signed([NEW], age_s=301), NEW)
    assert verify_webhook(BODY, signed([NEW], age_s=290), NEW) == EVENT
    with pytest.raises(WebhookVerificationError, match="future"):
        verify_webhook(BODY, signed([NEW], age_s=-301), NEW)
    assert verify_webhook(BODY, signed([NEW], age_s=301), NEW, tolerance_s=600) == EVENT


def test_a_wrong_secret_is_rejected() -> None:
    with pytest.raises(WebhookVerificationError, match="no signature"):
        verify_webhook(BODY, signed([NEW]), OLD)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(BODY, signed([NEW]), "whsec_not base64!")


def test_a_replayed_signature_under_another_id_is_rejected() -> None:
    headers = {**signed([NEW]), "webhook-id": "evt_other"}
    with pytest.raises(WebhookVerificationError):
        verify_webhook(BODY, headers, NEW)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_headers_are_rejected(missing: str) -> None:
    headers = signed([NEW])
    del headers[missing]
    with pytest.raises(WebhookVerificationError, match="missing"):
        verify_webhook(BODY, headers, NEW)


def test_unknown_signature_versions_are_ignored() -> None:
    headers = signed([NEW])
    headers["webhook-signature"] = "v2,abc " + headers["webhook-signature"]
    assert verify_webhook(BODY, headers, NEW) == EVENT
    headers["webhook-signature"] = "v1a," + headers["webhook-signature"].split(",")[-1]
    with pytest.raises(WebhookVerificationError):
        verify_webhook(BODY, headers, NEW)


def test_the_helper_imports_nothing_from_jobgate() -> None:
    import jobgate.client.webhooks as module

    tree = ast.parse(Path(module.__file__ or "").read_text())
    imported = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ] + [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [name for name in imported if name.startswith("jobgate")]
