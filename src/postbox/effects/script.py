"""The apply script: ``src/postbox/lua/apply_effects.lua`` plus the user effect functions.

Why user functions are compiled into the apply script (a "registry script") rather than loaded as
Redis Functions: a script cannot call FCALL ("This Redis command is not allowed from script"), and
the effect function has to run inside the same atomic execution as the dedupe check, the other
effects, the undo and the marker. So each ``consumers/lua/<name>.lua`` file — trusted source from
the repository, written like an EVAL script body that reads ``KEYS`` and ``ARGV`` — is wrapped as
``EFFECT_FUNCTIONS["<name>"] = function(KEYS, ARGV, redis) ... end`` at the script's marker line. Event
data still reaches it only through ARGV. Its ``redis`` is the server's with each refusal of the
deployment (an ACL denial, a command scripts may not run) noted where it happens, so a failure is
classified by its source and never by the text the function raises, which may quote event data.
The script's SHA1 therefore depends on the set of
functions; every consumer of a deployment loads the same files, so they share one cached script.

Loading is EVALSHA first; NOSCRIPT (empty script cache after a restart, failover or SCRIPT FLUSH)
means nothing ran, so the engine SCRIPT LOADs and retries.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from postbox.errors import EffectEngineError
from postbox.resources import LUA_DIR

SCRIPT_PATH = LUA_DIR / "apply_effects.lua"
_MARKER = "-- @@EFFECT_FUNCTIONS@@"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
_LINE = re.compile(r"user_script:(\d+):")


@dataclass(frozen=True)
class ApplyScript:
    """The composed source, its SHA1 and where each user function's lines are."""

    source: str
    sha: str
    functions: frozenset[str]
    #: (first line, last line, file) of each user function in ``source``.
    spans: tuple[tuple[int, int, Path], ...] = ()
    #: The folder the user functions were read from (None: none configured or missing).
    folder: Path | None = None

    def explain(self, error: str) -> str:
        """Turn ``user_script:<line>:`` in a Redis error into the user file and its line."""
        match = _LINE.search(error)
        if match:
            line = int(match.group(1))
            for first, last, path in self.spans:
                if first <= line <= last:
                    return f"{path}:{line - first + 1}: {error}"
        return error


def build_script(functions_dir: Path | None) -> ApplyScript:
    """Compose the apply script with every ``*.lua`` in ``functions_dir`` (None or missing: none)."""
    base = SCRIPT_PATH.read_text(encoding="utf-8")
    if base.count(_MARKER) != 1:
        raise EffectEngineError(f"{SCRIPT_PATH}: the line {_MARKER!r} must appear exactly once")
    files = sorted(functions_dir.glob("*.lua")) if functions_dir and functions_dir.is_dir() else []
    head, tail = base.split(_MARKER)
    line = head.count("\n") + 1
    parts: list[str] = []
    spans: list[tuple[int, int, Path]] = []
    names: list[str] = []
    for path in files:
        name = path.stem
        if not _NAME.match(name):
            raise EffectEngineError(
                f"{path}: {name!r} is not a usable effect function name",
                fix="rename the file to letters, digits and '_' (not starting with a digit), at most 64",
            )
        body = path.read_text(encoding="utf-8")
        if not body.endswith("\n"):
            body += "\n"
        parts.append(f'EFFECT_FUNCTIONS["{name}"] = function(KEYS, ARGV, redis)\n{body}end\n')
        spans.append((line + 1, line + body.count("\n"), path))
        line += body.count("\n") + 2
        names.append(name)
    source = head + "".join(parts) + _MARKER + tail
    return ApplyScript(
        source=source,
        sha=hashlib.sha1(source.encode("utf-8")).hexdigest(),
        functions=frozenset(names),
        spans=tuple(spans),
        folder=functions_dir if functions_dir and functions_dir.is_dir() else None,
    )


def default_functions_dir() -> Path | None:
    """The configured user functions folder (``POSTBOX_LUA_DIR``, else none; see
    :func:`postbox.resources.lua_functions_dir`)."""
    from postbox.resources import lua_functions_dir

    return lua_functions_dir()
