"""`postbox exporter`: serve the pipeline's metrics (replication slot, connector, group lag) for
Prometheus, as a sidecar or a scrape job's target; ``--once`` prints one scrape and exits."""

from __future__ import annotations

import signal
import threading
from typing import Any, Optional

import typer

from postbox.cli.client_options import kafka_client_options
from postbox.cli.incident_common import ConnectOpt, DbOpt, KafkaOpt, PipelineOpt, pipeline_for, settings_for
from postbox.errors import ConfigError


def register(app: typer.Typer) -> None:
    app.command("exporter", help="Serve the replication slot's lag, the connector's state and the groups' lag as Prometheus metrics.")(exporter)


@kafka_client_options
def exporter(
    listen: str = typer.Option("127.0.0.1:9465", "--listen", help="host:port to serve /metrics on (POSTBOX_EXPORTER_LISTEN)", envvar="POSTBOX_EXPORTER_LISTEN"),
    group: Optional[list[str]] = typer.Option(None, "--group", metavar="GROUP", help="Only this consumer group (repeatable; default: every group on outbox topics)."),
    no_groups: bool = typer.Option(False, "--no-groups", help="Leave out the groups' lag (no Kafka connection)."),
    connector: Optional[str] = typer.Option(None, "--connector", help="Connector name (default: the pipeline's)."),
    pipeline: Optional[str] = PipelineOpt,
    once: bool = typer.Option(False, "--once", help="Print one scrape in the Prometheus text format and exit."),
    kafka_bootstrap: Optional[str] = KafkaOpt,
    connect_url: Optional[str] = ConnectOpt,
    database_url: Optional[str] = DbOpt,
) -> int:
    from prometheus_client import generate_latest, start_http_server

    from postbox.exporter import PipelineCollector, registry_for

    settings = settings_for(kafka_bootstrap=kafka_bootstrap, connect_url=connect_url, database_url=database_url)
    host, port = _address(listen)

    def open_kafka() -> Any:
        from postbox.kafka_cluster import Kafka

        return Kafka(settings.kafka_bootstrap, properties=settings.kafka_properties)

    collector = PipelineCollector(settings.database_url, settings.connect_url, connector=connector, pipeline=pipeline_for(pipeline),
                                  open_kafka=None if no_groups else open_kafka, groups=group or None)  # fmt: skip
    registry = registry_for(collector)
    try:
        if once:
            typer.echo(generate_latest(registry).decode(), nl=False)
            return 0
        server, _thread = start_http_server(port, addr=host, registry=registry)
        typer.echo(f"postbox exporter: http://{host}:{server.server_port}/metrics", err=True)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda _s, _f: stop.set())
        stop.wait()
        server.shutdown()
        return 0
    finally:
        collector.close()


def _address(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--listen {listen!r}: expected host:port, e.g. 127.0.0.1:9465 or 0.0.0.0:9465")
    return host.strip("[]") or "0.0.0.0", int(port)
