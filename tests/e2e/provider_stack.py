"""A whole jobgate deployment as separate processes, for the provider scenarios: the provider
simulator server (`jobgate simulator`), then api, worker, reconciler, dispatcher and reaper on
PostgreSQL, and a webhook receiver standing for the user's endpoint. Each side can be read back:
the job through the HTTP API, the provider's view through the simulator's `/_simulator/state`,
the user's view through the receiver, the promises through `tests.support.audit`.

Any link can go through a `TcpProxy`: `provider_url` is what the worker and reconciler call
(point it at a proxy in front of the simulator), `webhook_target` is where the simulator sends
its webhooks (a proxy in front of the API).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from jobgate.client.webhooks import verify_webhook
from jobgate.testing.receiver import WebhookReceiver
from tests.e2e.support import Api, create_tenant
from tests.support import audit
from tests.support.audit import JobFacts
from tests.support.processes import JobgateProcess, ProcessHarness, free_port, wait_until
from tests.support.proxy import TcpProxy

PROVIDER = "upstream"
PROVIDER_SECRET = "whsec_" + "cHJvdmlkZXItc2NlbmFyaW9zLXNpZ25pbmcta2V5IQ=="
SECRET_ENV = "UPSTREAM_WEBHOOK_SECRET"
TERMINAL = audit.TERMINAL


def proxied(proxies: list[TcpProxy]) -> Callable[[str], str]:
    """A URL rewriter that puts a new TcpProxy (appended to `proxies`) in front of a URL."""

    def through(url: str) -> str:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        proxy = TcpProxy((host, int(port))).start()
        proxies.append(proxy)
        return f"http://{proxy.host}:{proxy.port}"

    return through


def provider_toml(base_url: str, **settings: Any) -> str:
    """A `[providers.upstream]` table: the simulator in background mode, its webhooks signed
    with PROVIDER_SECRET. By default the first status check is an hour away, so that only a
    webhook (or a test's own choice) settles a job quickly."""
    values: dict[str, Any] = {
        "kind": "openai",
        "base_url": f"{base_url}/v1",
        "mode": "background",
        "webhook_secret_env": SECRET_ENV,
        "reconcile_after_s": 3600,
        **settings,
    }
    lines = [f"[providers.{PROVIDER}]"]
    for key, value in values.items():
        if isinstance(value, bool):
            lines.append(f"{key} = {'true' if value else 'false'}")
        elif isinstance(value, int | float):
            lines.append(f"{key} = {value}")
        else:
            lines.append(f'{key} = "{value}"')
    return "\n".join(lines) + "\n"


@dataclasses.dataclass
class Stack:
    harness: ProcessHarness
    dsn: str
    simulator: JobgateProcess
    simulator_url: str
    api_process: JobgateProcess
    api: Api
    receiver: WebhookReceiver
    roles: dict[str, JobgateProcess]
    tenant_secret: str

    # -- jobs, through the HTTP API ------------------------------------------------------------

    def submit(self, sim: dict[str, Any] | None = None, **fields: Any) -> str:
        """A background Responses job at the simulator; its events go to the receiver."""
        body: dict[str, Any] = {"model": "gpt-4.1-mini", "input": "a provider scenario"}
        if sim:
            body["sim"] = sim
        return self.api.submit(
            {
                "provider": PROVIDER,
                "endpoint": "/v1/responses",
                "body": body,
                "webhook": {"url": self.receiver.url},
                **fields,
            }
        )

    def submit_chat(self, sim: dict[str, Any] | None = None) -> str:
        """A chat completion called under the worker's lease at the simulator."""
        body: dict[str, Any] = {
            "model": "gpt-4.1-mini",
            "messages": [{"role": "user", "content": "a provider scenario"}],
        }
        if sim:
            body["sim"] = sim
        return self.api.submit(
            {
                "provider": PROVIDER,
                "endpoint": "/v1/chat/completions",
                "body": body,
                "webhook": {"url": self.receiver.url},
            }
        )

    def job(self, job_id: str) -> dict[str, Any]:
        return self.api.get(job_id)

    def until(
        self, job_id: str, check: Callable[[dict[str, Any]], bool], *, timeout_s: float = 60
    ) -> dict[str, Any]:
        """Poll `GET /v1/jobs/{id}` until `check(job)` holds."""
        return wait_until(
            lambda: (job := self.job(job_id)) and check(job) and job,
            timeout_s=timeout_s,
            interval_s=0.1,
            what=f"{job_id} to satisfy {check}",
        )

    def terminal(self, job_id: str, *, timeout_s: float = 60) -> dict[str, Any]:
        return self.until(job_id, lambda j: j["status"] in TERMINAL, timeout_s=timeout_s)

    def wait_event(self, job_id: str, reason: str, *, timeout_s: float = 30) -> dict[str, Any]:
        """The first event of the job's log with this reason, once it is there."""

        def found() -> dict[str, Any] | None:
            return next((e for e in self.api.events(job_id) if e["reason"] == reason), None)

        return wait_until(found, timeout_s=timeout_s, interval_s=0.1, what=f"a {reason} event")

    # -- the provider's side ---------------------------------------------------------------

    def sim_state(self) -> dict[str, Any]:
        answer = httpx.get(f"{self.simulator_url}/_simulator/state", timeout=10)
        answer.raise_for_status()
        state: dict[str, Any] = answer.json()
        return state

    def inject(self, method: str, path_prefix: str, fault: str, *, times: int = 1) -> None:
        """Make the simulator fail the next `times` matching requests with `fault`."""
        answer = httpx.post(
            f"{self.simulator_url}/_simulator/inject",
            json={"method": method, "path_prefix": path_prefix, "fault": fault, "times": times},
            timeout=10,
        )
        assert answer.status_code == 200, answer.text

    def creates_sent(self, job_id: str, path: str = "/v1/responses") -> int:
        """Create requests the provider received for this job (keyed by its Idempotency-Key)."""
        return sum(
            1
            for r in self.sim_state()["request_log"]
            if r["method"] == "POST" and r["path"] == path and r["idempotency_key"] == job_id
        )

    def deliveries(self) -> list[dict[str, Any]]:
        """The provider's webhook deliveries so far (each with its final status code)."""
        return list(self.sim_state()["deliveries"])

    def provider_response(self, provider_job_id: str) -> dict[str, Any]:
        """The provider's own view of a background response (asked directly, not via jobgate)."""
        answer = httpx.get(f"{self.simulator_url}/v1/responses/{provider_job_id}", timeout=10)
        answer.raise_for_status()
        data: dict[str, Any] = answer.json()
        return data

    # -- the user's side -------------------------------------------------------------------

    def outbound(self, job_id: str) -> dict[str, set[str]]:
        """The verified events the user's endpoint received about a job: type -> webhook-ids
        (a receiver deduplicates on webhook-id; two ids for one type would be two effects)."""
        seen: dict[str, set[str]] = {}
        for request in list(self.receiver.received):
            payload = verify_webhook(request.body, request.headers, self.tenant_secret)
            if payload["data"]["id"] == job_id:
                seen.setdefault(payload["type"], set()).add(request.headers["webhook-id"])
        return seen

    def wait_outbound(self, job_id: str, event_type: str, *, timeout_s: float = 60) -> None:
        wait_until(
            lambda: event_type in self.outbound(job_id),
            timeout_s=timeout_s,
            interval_s=0.1,
            what=f"the user's endpoint to receive {event_type} for {job_id}",
        )

    # -- the promises ----------------------------------------------------------------------

    def facts(self, job_id: str) -> JobFacts:
        return audit.job_facts(self.dsn, [job_id])[job_id]

    def assert_settled_once(self, job_id: str, state: str = "succeeded") -> dict[str, Any]:
        """The user-visible outcome: the job in `state` through the API; exactly one applied
        terminal event; billed once if it succeeded; exactly one terminal event delivered to
        the user's endpoint (one webhook-id, however many redeliveries), and one outbox row."""
        job = self.terminal(job_id)
        assert job["status"] == state, job
        facts = self.facts(job_id)
        assert facts.terminal_events == 1, facts.events
        assert facts.ledger_rows == (1 if state == "succeeded" else 0), facts
        assert facts.outbox_rows == 1 and facts.outbox_duplicates == 0, facts
        event_type = f"job.{state}"  # submitted through /v1/jobs: the native event types
        self.wait_outbound(job_id, event_type)
        outbound = self.outbound(job_id)
        assert set(outbound) == {event_type}, outbound
        assert len(outbound[event_type]) == 1, outbound
        return job


def start_stack(
    harness: ProcessHarness,
    dsn: str,
    receiver: WebhookReceiver,
    *,
    roles: tuple[str, ...] = ("worker", "reconciler", "dispatcher", "reaper"),
    provider: dict[str, Any] | None = None,
    provider_url: Callable[[str], str] | None = None,
    role_provider_url: dict[str, Callable[[str], str]] | None = None,
    webhook_target: Callable[[str], str] | None = None,
    simulator_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Stack:
    """Start the simulator and the roles. `provider` adds settings to the provider's table;
    `provider_url(simulator_url)` is the base URL the worker and reconciler call (default the
    simulator itself), `role_provider_url` the same for one role only; `webhook_target(api_url)`
    where the simulator sends its webhooks."""
    harness.env.update(
        {
            "JOBGATE_DATABASE_URL": dsn,
            "JOBGATE_RECONCILER_INTERVAL_S": "0.2",
            "JOBGATE_WEBHOOK_ALLOW_HTTP": "1",
            "JOBGATE_WEBHOOK_ALLOW_CIDRS": "127.0.0.0/8",
            "JOBGATE_WEBHOOK_RETRY_PROFILE": "short",
            "JOBGATE_SIMULATOR_WEBHOOK_SECRET": PROVIDER_SECRET,
            SECRET_ENV: PROVIDER_SECRET,
            **(env or {}),
        }
    )
    simulator_url = f"http://127.0.0.1:{free_port()}"
    called_url = provider_url(simulator_url) if provider_url else simulator_url
    config = Path(harness.directory) / "jobgate.toml"
    config.write_text(provider_toml(called_url, **(provider or {})))
    harness.env["JOBGATE_CONFIG"] = str(config)
    api_process = harness.start("api")
    assert api_process.url is not None
    target = webhook_target(api_process.url) if webhook_target else api_process.url
    simulator = harness.start(
        "simulator",
        "--port",
        simulator_url.rsplit(":", 1)[1],
        "--webhook-url",
        f"{target}/v1/provider_webhooks/{PROVIDER}",
        *simulator_args,
        ready=False,
    )
    started = {}
    for role in roles:
        role_env = {}
        if role_provider_url and role in role_provider_url:
            own = Path(harness.directory) / f"jobgate-{role}.toml"
            own.write_text(
                provider_toml(role_provider_url[role](simulator_url), **(provider or {}))
            )
            role_env["JOBGATE_CONFIG"] = str(own)
        started[role] = harness.start(role, env=role_env, ready=False)
    wait_until(
        lambda: _answers(f"{simulator_url}/_simulator/state", simulator),
        timeout_s=60,
        what="the simulator to listen",
    )
    for process in started.values():
        process.wait_ready()
    if "reconciler" in started:
        # Its start-up refresh makes every running background job due at once; a job submitted
        # before it ran would be checked at once instead of in an hour (reconcile_after_s).
        reconciler = started["reconciler"]
        wait_until(
            lambda: bool(reconciler.log_lines_matching('"reconciler refresh"')),
            timeout_s=60,
            what="the reconciler's start-up refresh",
        )
    api = Api(api_process.url, create_tenant(dsn, "acme"))
    tenant_secret = api.client.get("/v1/webhook_secret").json()["secret"]
    return Stack(
        harness=harness,
        dsn=dsn,
        simulator=simulator,
        simulator_url=simulator_url,
        api_process=api_process,
        api=api,
        receiver=receiver,
        roles=started,
        tenant_secret=tenant_secret,
    )


def _answers(url: str, process: JobgateProcess) -> bool:
    if not process.alive:
        raise AssertionError(f"the simulator exited:\n{process.tail()}")
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
