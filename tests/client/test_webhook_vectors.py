"""The webhook vectors shared with the TypeScript client (tests/client/webhook_vectors.json):
verify_webhook answers each valid one's payload and refuses each invalid one with its message,
so both clients accept and refuse exactly the same webhooks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jobgate.client.webhooks import WebhookVerificationError, verify_webhook
from jobgate.wire import standard_webhooks as signing

VECTORS = json.loads((Path(__file__).parent / "webhook_vectors.json").read_text())


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: v["name"])
def test_each_vector_verifies_as_recorded(
    vector: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("jobgate.client.webhooks.time.time", lambda: float(VECTORS["now"]))
    body = vector["body"].encode()
    if "error" in vector:
        with pytest.raises(WebhookVerificationError) as refused:
            verify_webhook(body, vector["headers"], vector["secret"])
        assert str(refused.value) == vector["error"]
    else:
        assert verify_webhook(body, vector["headers"], vector["secret"]) == vector["payload"]


def test_the_valid_vectors_are_what_the_server_signs() -> None:
    for vector in VECTORS["vectors"]:
        if vector["name"] == "one signature":
            headers = vector["headers"]
            expected = signing.sign(
                vector["secret"],
                headers["webhook-id"],
                int(headers["webhook-timestamp"]),
                vector["body"].encode(),
            )
            assert headers["webhook-signature"] == expected
