"""#16.6 the Grafana dashboard (infra/grafana/dashboards/postbox.json): every metric its PromQL
queries is one the code exports — the consumer's registry (postbox.consumer.metrics), the
exporter's (postbox.exporter) and the process/python collectors — so renaming a metric without the
dashboard fails here; and the compose file loads it into Grafana with Prometheus scraping the
exporter."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from postbox.consumer.metrics import Metrics, register_defaults
from postbox.exporter import METRICS as EXPORTER_METRICS

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "infra" / "grafana" / "dashboards" / "postbox.json"
COMPOSE = yaml.safe_load((ROOT / "infra" / "docker-compose.yml").read_text())["services"]

#: PromQL words that look like identifiers but are no metric: keywords and aggregation modifiers.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan"}
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count"), "gauge": ("",),
             "info": ("_info",), "unknown": ("",)}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions, keywords,
    label names (inside ``{}`` or ``by (...)``), ranges (``[5m]``) or strings."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)                 # strings (label values)
    text = re.sub(r"\{[^}]*\}", "", text)                            # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)                           # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"(?<![A-Za-z0-9_.:])[A-Za-z_:][A-Za-z0-9_:]*", text):  # not the "m" of "5m"
        word, rest = match.group(0), text[match.end():].lstrip()
        if rest.startswith("(") or word.lower() in KEYWORDS or word.startswith("$"):
            continue
        names.add(word)
    return names


def exported_names() -> set[str]:
    """Every sample name the code can export, from the registries themselves."""
    registry = CollectorRegistry()
    register_defaults(registry)
    Metrics("dashboard-test", registry=registry)
    names = {family.name + suffix for family in registry.collect() for suffix in _SUFFIXES[family.type]}
    return names | set(EXPORTER_METRICS)


def _queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        inner = re.search(r"label_values\((\w+)", variable["definition"])
        exprs.append(inner.group(1) if inner else variable["definition"])
    return exprs


def test_the_parser_finds_the_metrics_of_a_query_and_nothing_else() -> None:
    expr = ('histogram_quantile(0.95, sum by (group, le) (rate(postbox_consumer_apply_seconds_bucket{group=~"$group"}[5m])))'
            ' / on (group) group_left max(postbox_slot_lag_bytes offset 5m) > bool 0')  # fmt: skip
    assert metric_names(expr) == {"postbox_consumer_apply_seconds_bucket", "postbox_slot_lag_bytes"}


def test_every_metric_the_dashboard_queries_is_exported() -> None:
    exported = exported_names()
    queried = set().union(*(metric_names(e) for e in _queries()))
    assert queried, "no query found in the dashboard"
    assert queried - exported == set(), f"the dashboard queries metrics no code exports: {sorted(queried - exported)}"
    # the panels: events/s per group, lag in events and seconds, duplicates, dead letters, apply latency, slot lag
    for needed in ("postbox_consumer_events_applied_total", "postbox_group_lag", "postbox_group_oldest_unconsumed_age_seconds",
                   "postbox_consumer_duplicates_skipped_total", "postbox_consumer_dead_lettered_total",
                   "postbox_consumer_apply_seconds_bucket", "postbox_slot_lag_bytes"):  # fmt: skip
        assert needed in queried, needed


def test_a_renamed_metric_would_be_caught() -> None:
    assert "postbox_consumer_events_applied" not in exported_names()  # a counter is exported with _total
    assert metric_names("rate(postbox_consumer_events_applied[1m])") - exported_names() == {"postbox_consumer_events_applied"}


def test_compose_provisions_the_dashboard_and_prometheus_scrapes_the_exporter() -> None:
    grafana = COMPOSE["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    assert mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"
    assert (ROOT / "infra" / mounts["/var/lib/grafana/dashboards"] / "postbox.json") == DASHBOARD
    provider = yaml.safe_load((ROOT / "infra" / "grafana" / "provisioning" / "dashboards" / "postbox.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    source = yaml.safe_load((ROOT / "infra" / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    uids = {t["datasource"]["uid"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]}
    assert uids == {source["datasources"][0]["uid"]}
    assert source["datasources"][0]["url"] == "http://prometheus:9090"
    prometheus = COMPOSE["prometheus"]
    config_file = next(v.split(":")[0] for v in prometheus["volumes"] if v.endswith("prometheus.yml:ro"))
    scrape = yaml.safe_load((ROOT / "infra" / config_file).read_text())["scrape_configs"]
    targets = {t for job in scrape for c in job["static_configs"] for t in c["targets"]}
    listen = re.search(r"--listen \S+:(\d+)", " ".join(COMPOSE["exporter"]["command"])).group(1)
    assert f"exporter:{listen}" in targets
    assert any(t.startswith("host.docker.internal:") for t in targets)  # the consumers on the host
