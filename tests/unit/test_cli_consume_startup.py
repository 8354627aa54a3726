"""#14.3: `postbox consume` after a crash is back only once Python has imported what it needs, so
it attaches its own command module alone — not the other commands' (rich tables, incident tools) —
a later named command adds its own, and a command line that names no command (``--help``) in the
same process still gets every command, each once."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from postbox.cli import _register, app
_register(["consume", "consumers.billing:app"])
print(sorted(m for m in sys.modules if m.startswith("postbox.cli.")))
print("rich.console" in sys.modules, "postbox.incident.window" in sys.modules)
_register(["topics"])
names = [c.name for c in app.registered_commands]
print("topics" in names, "lag" in names)
_register(["--help"])
names = [c.name for c in app.registered_commands]
print(len(names) == len(set(names)), "consume" in names, "topics" in names, "lag" in names)
"""


def test_consume_attaches_only_its_own_command_and_later_commands_get_all_once() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "['postbox.cli.client_options', 'postbox.cli.consume_cmds']"
    assert out[1] == "False False"  # neither rich's console nor the incident tools were imported
    assert out[2] == "True False"  # a later named command adds its own module only
    assert out[3] == "True True True True"  # a line naming no command gets every command, none twice
