"""`jobgate alerts`: print the Prometheus alerting rules jobgate ships (alerts.py)."""

from __future__ import annotations

import math
from typing import Any

import click

from jobgate import alerts

_DEFAULTS = alerts.Thresholds()


class FiniteRange(click.FloatRange):
    """A float in range that is a number: `nan` passes every comparison click makes, and a
    rule `> nan` (or `> inf`) can never fire."""

    name = "finite float range"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return float(super().convert(number, param, ctx))


@click.command("alerts")
@click.option("--oldest-queued-s", type=FiniteRange(min=1),
              default=_DEFAULTS.oldest_queued_s, show_default=True,
              help="Alert when a tenant's oldest claimable job has waited this long.")  # fmt: skip
@click.option("--queue-wait-p95-s", type=FiniteRange(min=0.001),
              default=_DEFAULTS.queue_wait_p95_s, show_default=True,
              help="Alert when a tenant's p95 queued-to-running wait passes this.")  # fmt: skip
@click.option("--budget-share", type=FiniteRange(0.01, 1.0),
              default=_DEFAULTS.budget_share, show_default=True,
              help="Alert when a tenant has used this share of a daily budget.")  # fmt: skip
def alerts_command(oldest_queued_s: float, queue_wait_p95_s: float, budget_share: float) -> None:
    """Print Prometheus alerting rules (YAML) over the metrics jobgate exports.

    \b
    jobgate alerts > /etc/prometheus/rules/jobgate.yml
    """
    thresholds = alerts.Thresholds(
        oldest_queued_s=oldest_queued_s,
        queue_wait_p95_s=queue_wait_p95_s,
        budget_share=budget_share,
    )
    click.echo(alerts.render(thresholds), nl=False)


COMMANDS = (alerts_command,)
