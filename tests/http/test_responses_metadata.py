"""OpenAI's metadata limits on /v1/responses (16 pairs, keys up to 64 characters, values up
to 512, strings only): refused at submit with 400, never stored to fail later at the
provider (https://platform.openai.com/docs/api-reference/responses/create#metadata)."""

from __future__ import annotations

from typing import Any

import pytest

from jobgate import errors
from jobgate.config import ProviderConfig
from jobgate.providers.openai import RESPONSES, OpenAIProvider
from tests.api_server import Api

BAD = [
    {f"k{i}": "v" for i in range(17)},
    {"k" * 65: "v"},
    {"k": "v" * 513},
    {"k": 1},
]


@pytest.mark.parametrize("metadata", BAD, ids=["17_keys", "long_key", "long_value", "number"])
async def test_metadata_over_openai_limits_is_refused_at_submit(
    api: Api, metadata: dict[str, Any]
) -> None:
    key = await api.key("acme")
    answer = await api.http.post(
        "/v1/responses",
        json={"model": "sim-echo", "input": "x", "background": True, "metadata": metadata},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert answer.status_code == 400, answer.text
    listed = await api.http.get("/v1/jobs", headers={"Authorization": f"Bearer {key}"})
    assert listed.json()["data"] == []


async def test_metadata_at_the_limits_is_accepted(api: Api) -> None:
    key = await api.key("acme")
    metadata = {f"{i:02d}" + "k" * 62: "v" * 512 for i in range(16)}
    answer = await api.http.post(
        "/v1/responses",
        json={"model": "sim-echo", "input": "x", "background": True, "metadata": metadata},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    "metadata",
    [*BAD, {f"k{i}": "v" for i in range(16)}],
    ids=["17_keys", "long_key", "long_value", "number", "16_keys_plus_ours"],
)
def test_the_openai_adapter_checks_the_same_limits_for_native_jobs(
    metadata: dict[str, Any],
) -> None:
    """POST /v1/jobs reaches the adapter's check: OpenAI would answer 400 at create time,
    after the job was accepted (16 of ours is one too many: jobgate adds its job id)."""
    provider = OpenAIProvider("oai", ProviderConfig(kind="openai"))
    with pytest.raises(errors.InvalidRequest) as refused:
        provider.validate(RESPONSES, {"model": "m", "input": "x", "metadata": metadata})
    assert refused.value.param == "body.metadata"
