"""`postbox demo`: the reference shop's order saga on the whole pipeline, watched live, then checked.

- :mod:`.runner` — the run: stack, SQL, reset, consumer groups, orders, chaos, drain, verdict;
- :mod:`.processes` — the consumer subprocesses (``postbox consume consumers.shop.<group>:app``);
- :mod:`.monitor` — what the view shows: Prometheus endpoints, lag, ready log, latencies;
- :mod:`.invariants` — the business invariants, checked against Redis and PostgreSQL;
- :mod:`.view` — the rich live view, or plain lines when stdout is not a terminal.
"""

import sys as _sys

from postbox.stack.checkout import checkout_root as _checkout_root

# The shop lives in the project checkout (consumers/shop), as users' consumers do: make it importable
# the way `postbox consume` does (the project folder first on sys.path).
_root = str(_checkout_root())
if _root not in _sys.path:
    _sys.path.insert(0, _root)
