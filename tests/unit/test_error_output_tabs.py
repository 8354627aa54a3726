"""An error message's tabs reach the terminal as indentation, not as ``\\x09``.

Found as a new user: a start-up hook whose database is down stopped `postbox consume` with
"error: start-up hook db failed: OperationalError: connection failed: ... Connection refused" and
then a line "\\x09Is the server running on that host ...": psycopg indents its hint with a tab, and
the terminal-safety escaping (right for record bytes) escaped it. Shown to fail before the fix."""

from __future__ import annotations

import pytest

from postbox.cli.output import print_error
from postbox.errors import PostboxError


def test_a_tab_indented_line_of_an_error_prints_indented(capsys: pytest.CaptureFixture[str]) -> None:
    print_error(PostboxError("connection failed: Connection refused\n\tIs the server running on that host?\x1b[2J", fix="start it"))
    err = capsys.readouterr().err
    assert "\\x09" not in err and "    Is the server running on that host?" in err, err
    assert "\x1b[2J" not in err and "\\x1b[2J" in err, err  # every other control character stays escaped
