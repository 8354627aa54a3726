"""Test hooks of the consumer loop: inert unless their environment variable is set.

The fault suite must kill a consumer at one exact point of its loop — after a batch's apply was
acknowledged, before its offsets are committed — so that the records MUST come back to the next
owner and be absorbed by the dedupe marker. A random sleep before a SIGKILL only usually lands
there; this hook makes it land there every time.

``POSTBOX_TEST_HOLD_BEFORE_COMMIT=<path>``: when a file exists at ``<path>`` after a batch, the
loop claims it (renames it to ``<path>.held``, writes its pid into it) and then sleeps until the
process is killed. Without the variable, or without the file, it returns at once.
"""

from __future__ import annotations

import os
import time

_HOLD_BEFORE_COMMIT = os.environ.get("POSTBOX_TEST_HOLD_BEFORE_COMMIT", "")


def hold_before_commit() -> None:
    """Called between a batch's apply and its commit; see the module docs."""
    if not _HOLD_BEFORE_COMMIT:
        return
    held = _HOLD_BEFORE_COMMIT + ".held"
    try:
        os.rename(_HOLD_BEFORE_COMMIT, held)  # atomic: one process of a group claims it
    except FileNotFoundError:
        return
    with open(held, "w") as out:
        out.write(str(os.getpid()))
    while True:  # until SIGKILL (the fault suite never arms it for a process it will not kill)
        time.sleep(1)
