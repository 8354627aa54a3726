"""README, The local stack: everything of the stack lives in one state folder (`.postbox/`), and
"`POSTBOX_STATE_DIR` moves it" — the demo's consumer logs included (docs/demo.md)."""

from __future__ import annotations

import io

from postbox.demo.runner import Demo, DemoConfig


def test_demo_logs_go_to_the_state_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("POSTBOX_STATE_DIR", str(tmp_path / "state"))
    demo = Demo(DemoConfig(orders=1), io.StringIO())
    assert demo.log_dir == (tmp_path / "state").resolve() / "demo" / demo.run_id
