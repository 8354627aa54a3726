"""`postbox demo`: the reference shop's order saga on the whole pipeline, live, then checked."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from postbox.cli.client_options import command_settings, current_kafka_options, kafka_client_options


@kafka_client_options
def demo(
    orders: int = typer.Option(3000, "--orders", min=1, help="How many orders the order service places."),
    fail_rate: float = typer.Option(0.10, "--fail-rate", min=0.0, max=1.0, help="Share of orders paid with the declined test card (compensated)."),
    cancel_rate: float = typer.Option(0.05, "--cancel-rate", min=0.0, max=1.0, help="Share of orders their customer cancels (compensated)."),
    v1_rate: float = typer.Option(0.10, "--v1-rate", min=0.0, max=1.0, help="Share of orders emitted with the old OrderPlaced v1 schema."),
    rate: float = typer.Option(0.0, "--rate", min=0.0, help="Orders per second (0: as fast as the database takes them)."),
    chaos: bool = typer.Option(False, "--chaos", help="SIGKILL and restart the payment and inventory consumers and the Kafka Connect worker mid-run."),
    timeout: float = typer.Option(300.0, "--timeout", help="Longest wait (s) for the pipeline to drain after the last order."),
    plain: bool = typer.Option(False, "--plain", help="Plain progress lines even on a terminal (automatic when stdout is not one)."),
    json_output: bool = typer.Option(False, "--json", help="Print the result as one JSON object on stdout (progress goes to stderr)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed for a reproducible order mix."),
    admin_url: Optional[str] = typer.Option(None, "--admin-url", help="Admin connection for the shop's tables (default: the local stack's; POSTBOX_ADMIN_DATABASE_URL)."),
) -> int:
    """Run the order saga end to end: place orders, watch every stage live, check the invariants.

    Exits 0 when every invariant holds, 1 when one is broken.
    """
    from postbox.cli.output import print_json
    from postbox.demo.runner import DemoConfig, run_demo

    stream = sys.stderr if json_output else sys.stdout
    kafka_config, kafka_set = current_kafka_options()
    command_settings()  # a bad properties file or -X fails now, not after the stack is up
    config = DemoConfig(
        kafka_config=kafka_config, kafka_set=kafka_set,
        orders=orders, fail_rate=fail_rate, cancel_rate=cancel_rate, v1_rate=v1_rate, rate=rate, chaos=chaos,
        drain_timeout=timeout, live=False if plain else None, seed=seed, admin_url=admin_url,
    )
    result = run_demo(config, stream)
    if json_output:
        print_json(result.as_dict())
    return 0 if result.passed else 1


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
