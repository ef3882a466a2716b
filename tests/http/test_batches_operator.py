"""Operators reach every tenant's batches (an operator key, jgo_…, on the batches routes, as on
the bulk actions): list them across tenants (narrowed by tenant and status), read one, cancel
one. A tenant key still sees only its own. Both backends."""

from __future__ import annotations

from typing import Any

import orjson

from tests.api_server import Api


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def batch_of(api: Api, key: str, count: int = 2) -> dict[str, Any]:
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
    content = b"".join(
        orjson.dumps(
            {"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
        )
        + b"\n"
        for i in range(count)
    )
    uploaded = await api.http.post(
        "/v1/files",
        data={"purpose": "batch"},
        files={"file": ("in.jsonl", content)},
        headers=auth(key),
    )
    assert uploaded.status_code == 200, uploaded.text
    created = await api.http.post(
        "/v1/batches",
        json={
            "input_file_id": uploaded.json()["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        },
        headers=auth(key),
    )
    assert created.status_code == 200, created.text
    batch: dict[str, Any] = created.json()
    return batch


async def test_an_operator_lists_and_cancels_any_tenants_batch(api: Api) -> None:
    acme, other = await api.key("acme"), await api.key("other")
    mine = await batch_of(api, acme)
    theirs = await batch_of(api, other)
    operator = await api.runtime.operators.create("ops")

    listed = await api.http.get("/v1/batches", headers=auth(operator))
    assert listed.status_code == 200, listed.text
    page = listed.json()
    assert [b["id"] for b in page["data"]] == [theirs["id"], mine["id"]]  # newest first
    tenants = {b["id"]: b["tenant"] for b in page["data"]}
    assert tenants == {theirs["id"]: "other", mine["id"]: "acme"}
    narrowed = await api.http.get("/v1/batches?tenant=acme", headers=auth(operator))
    assert [b["id"] for b in narrowed.json()["data"]] == [mine["id"]]
    nobody = await api.http.get("/v1/batches?tenant=nobody", headers=auth(operator))
    assert nobody.json()["data"] == []
    validating = await api.http.get("/v1/batches?status=validating", headers=auth(operator))
    assert len(validating.json()["data"]) == 2
    done = await api.http.get("/v1/batches?status=completed", headers=auth(operator))
    assert done.json()["data"] == []

    got = await api.http.get(f"/v1/batches/{mine['id']}", headers=auth(operator))
    assert got.status_code == 200 and got.json()["tenant"] == "acme"
    cancelled = await api.http.post(f"/v1/batches/{mine['id']}/cancel", headers=auth(operator))
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelling"

    # A tenant key sees only its own, and never the operator's extra member.
    own = await api.http.get("/v1/batches", headers=auth(other))
    assert [b["id"] for b in own.json()["data"]] == [theirs["id"]]
    assert "tenant" not in own.json()["data"][0]
    foreign = await api.http.post(f"/v1/batches/{mine['id']}/cancel", headers=auth(other))
    assert foreign.status_code == 404
    narrowing = await api.http.get("/v1/batches?tenant=acme", headers=auth(other))
    assert narrowing.status_code == 400  # only an operator names a tenant
    bad = await api.http.get("/v1/batches", headers=auth("jgo_not-a-key"))
    assert bad.status_code == 401
