"""The exporter reads Kafka through a handle of its own per scrape, closed before the scrape ends.

Why: a long-running process whose admin client outlives requests that timed out across a broker's
restart can be aborted by librdkafka when the late answer comes (it aborted the fault suite's
process once); a handle per scrape leaves no request of an earlier scrape behind."""

from __future__ import annotations

from postbox.exporter import PipelineCollector


class _Kafka:
    def __init__(self, opened: list["_Kafka"]) -> None:
        self.closed = False
        opened.append(self)

    def group_ids(self) -> list[str]:
        return []

    def read_first(self, positions):
        return {}

    def close(self) -> None:
        self.closed = True


def test_every_scrape_opens_its_own_kafka_handle_and_closes_it(monkeypatch):
    import postbox.exporter as exporter

    monkeypatch.setattr(exporter, "slot_status", lambda url, slot: {"name": slot, "state": "unreachable"})
    monkeypatch.setattr(exporter, "connector_status", lambda url, name: {"name": name, "state": "unreachable", "tasks": []})
    opened: list[_Kafka] = []
    collector = PipelineCollector("postgresql://x@127.0.0.1:1/postbox", "http://127.0.0.1:1", open_kafka=lambda: _Kafka(opened))
    for _ in range(3):
        samples = {s.name: s.value for m in collector.collect() for s in m.samples}
        assert samples["postbox_exporter_kafka_up"] == 1
    assert len(opened) == 3 and all(k.closed for k in opened)
