"""Test app whose module fails at import (tests/unit/test_consume_fatal_json.py): a bug in the
app, not a configuration mistake postbox can name."""

raise RuntimeError("payments client misconfigured at import")
