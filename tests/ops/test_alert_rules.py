"""The alerting rules `jobgate alerts` prints: they use only metrics jobgate
exports, and `promtool test rules` shows each firing on a scripted bad scenario and every
one silent on a healthy one."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client import REGISTRY

from jobgate import alerts, metrics
from jobgate.cli import cli

PROMTOOL = shutil.which("promtool")
# CI installs it (.ci/run) and sets JOBGATE_TEST_REQUIRE_PROMTOOL=1: there a missing promtool
# fails these tests instead of skipping them.
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None and os.environ.get("JOBGATE_TEST_REQUIRE_PROMTOOL") != "1",
    reason="promtool not installed (Debian: apt-get install prometheus)",
)
MINUTES = 150


def exported_names() -> set[str]:
    """Every sample name the registry exposes (counters with _total, histograms' parts)."""
    assert metrics.QUEUE_WAIT_SECONDS is not None  # jobgate's metrics are registered
    return {sample.name for family in REGISTRY.collect() for sample in family.samples} | {
        family.name for family in REGISTRY.collect()
    }


def test_rules_use_only_metrics_jobgate_exports() -> None:
    metrics.QUEUE_WAIT_SECONDS.labels("acme").observe(0.1)  # so the families show samples
    metrics.REAPER_BULK_RECLAIMS.inc(0)
    names = exported_names()
    used = {n for rule in alerts.rules() for n in re.findall(r"\bjobgate_\w+", rule.expr)}
    histogram_parts = {f"{metrics.QUEUE_WAIT_SECONDS._name}_bucket"}
    assert used, "no metric found in the rules"
    missing = {n for n in used if n not in names and n not in histogram_parts}
    assert not missing, f"rules use metrics jobgate does not export: {missing}"


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def scenario(tenant: str, *, bad: bool) -> list[dict[str, str]]:
    """Two and a half hours of metrics, one sample a minute, as jobgate would export them."""
    n = MINUTES
    t = {"tenant": tenant, "instance": "api-1"}
    wait = {"tenant": tenant, "instance": "worker-1"}
    buckets = ("0.1", "60", "300", "+Inf")
    # Bad: ten claims a minute, each after ~2-5 minutes in the queue; healthy: within 100 ms.
    slow_from = 2 if bad else 0
    return [
        series("jobgate_jobs_dead_lettered", t, f"0+1x{n}" if bad else f"3x{n}"),
        series("jobgate_queue_oldest_age_seconds", t, f"0+60x{n}" if bad else f"5x{n}"),
        series(
            "jobgate_reaper_bulk_reclaims_total",
            {"instance": f"reaper-{tenant}"},
            f"0x50 1x{n - 51}" if bad else f"0x{n}",
        ),
        *[
            series(
                "jobgate_queue_wait_seconds_bucket",
                {**wait, "le": le},
                f"0x{n}" if i < slow_from else f"0+10x{n}",
            )
            for i, le in enumerate(buckets)
        ],
        series("jobgate_webhook_endpoints_failing", t, f"{int(bad)}x{n}"),
        series(
            "jobgate_provider_breaker_state",
            {"provider": f"prov-{tenant}", "instance": "worker-1"},
            f"{2 if bad else 0}x{n}",
        ),
        series("jobgate_tenant_spend_usd_today", t, f"0+1x{n}" if bad else f"0+0.1x{n}"),
        series("jobgate_tenant_daily_cost_budget_usd", t, f"100x{n}"),
        series("jobgate_tenant_tokens_today", t, f"0+1000x{n}" if bad else f"0+100x{n}"),
        series("jobgate_tenant_daily_token_budget", t, f"100000x{n}"),
    ]


def expected(alert: str, **labels: str) -> dict[str, Any]:
    [rule] = [r for r in alerts.rules() if r.alert == alert]

    def fill(text: str) -> str:
        for key, value in labels.items():
            text = text.replace(f"{{{{ $labels.{key} }}}}", value)
        return text

    return {
        "exp_labels": {**labels, "severity": rule.severity},
        "exp_annotations": {"summary": fill(rule.summary), "description": fill(rule.description)},
    }


# (alert, minute it must not fire yet or again, minute it must fire, labels when firing)
BAD = [
    ("JobgateDeadLettersGrowing", 50, 90, {"tenant": "acme"}),
    ("JobgateQueueStalled", 10, 20, {"tenant": "acme"}),
    ("JobgateBulkReclaim", 40, 55, {}),
    ("JobgateQueueWaitHigh", 10, 30, {"tenant": "acme"}),
    ("JobgateWebhookEndpointFailing", 20, 40, {"tenant": "acme"}),
    ("JobgateProviderBreakerOpen", 3, 10, {"provider": "prov-acme"}),
    ("JobgateCostBudgetNearlySpent", 80, 100, {"tenant": "acme"}),
    ("JobgateTokenBudgetNearlySpent", 80, 100, {"tenant": "acme"}),
]


def promtool_tests() -> dict[str, Any]:
    bad_checks: list[dict[str, Any]] = []
    for alert, quiet_at, firing_at, labels in BAD:
        bad_checks.append({"eval_time": f"{quiet_at}m", "alertname": alert, "exp_alerts": []})
        bad_checks.append(
            {
                "eval_time": f"{firing_at}m",
                "alertname": alert,
                "exp_alerts": [expected(alert, **labels)],
            }
        )
    bad_checks.append({"eval_time": "80m", "alertname": "JobgateBulkReclaim", "exp_alerts": []})
    healthy_checks = [
        {"eval_time": f"{minute}m", "alertname": rule.alert, "exp_alerts": []}
        for rule in alerts.rules()
        for minute in (30, 90, MINUTES - 1)
    ]
    return {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": scenario("acme", bad=True),
                "alert_rule_test": bad_checks,
            },
            {
                "interval": "1m",
                "input_series": scenario("calm", bad=False),
                "alert_rule_test": healthy_checks,
            },
        ],
    }


@needs_promtool
def test_rules_fire_on_a_bad_scenario_and_stay_silent_on_a_healthy_one(tmp_path: Path) -> None:
    assert PROMTOOL is not None, "promtool is required here (JOBGATE_TEST_REQUIRE_PROMTOOL=1)"
    (tmp_path / "rules.yml").write_text(alerts.render())
    (tmp_path / "tests.yml").write_text(json.dumps(promtool_tests(), indent=1))  # JSON is YAML
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        [PROMTOOL, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout[-4000:] + tested.stderr[-4000:]


@needs_promtool
def test_a_broken_rule_is_caught(tmp_path: Path) -> None:
    """The harness itself fails when a rule does not fire (so a pass above means something)."""
    assert PROMTOOL is not None
    quiet = alerts.render(alerts.Thresholds(oldest_queued_s=10**9))
    (tmp_path / "rules.yml").write_text(quiet)
    (tmp_path / "tests.yml").write_text(json.dumps(promtool_tests()))
    tested = subprocess.run(
        [PROMTOOL, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert tested.returncode != 0 and "JobgateQueueStalled" in tested.stdout + tested.stderr


def test_jobgate_alerts_prints_the_rules_with_thresholds() -> None:
    result = CliRunner().invoke(cli, ["alerts", "--oldest-queued-s", "120"])
    assert result.exit_code == 0, result.output
    assert result.output == alerts.render(alerts.Thresholds(oldest_queued_s=120))
    assert "jobgate_queue_oldest_age_seconds) > 120" in result.output


@pytest.mark.parametrize("option", ["--oldest-queued-s", "--queue-wait-p95-s", "--budget-share"])
@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999"])
def test_a_threshold_that_could_never_fire_is_refused(option: str, value: str) -> None:
    """A rule `> nan` or `> inf` never fires: such a threshold is a one-line error, no rule
    is printed."""
    result = CliRunner().invoke(cli, ["alerts", option, value])
    assert result.exit_code == 2, result.output
    assert "groups:" not in result.output
    assert "finite" in result.output
