"""Composition of the apply script with user effect functions (no Redis)."""

from __future__ import annotations

import hashlib

import pytest

from postbox.effects.script import SCRIPT_PATH, build_script
from postbox.errors import EffectEngineError


def test_script_without_functions(tmp_path) -> None:
    script = build_script(None)
    assert script.source.startswith("#!lua flags=\n")
    assert script.functions == frozenset()
    assert script.sha == hashlib.sha1(script.source.encode()).hexdigest()
    assert build_script(tmp_path / "missing").sha == script.sha


def test_functions_are_wrapped_and_errors_mapped_to_files(tmp_path) -> None:
    (tmp_path / "alpha.lua").write_text("local a = 1\nreturn a\n")
    (tmp_path / "beta.lua").write_text("-- one\n-- two\nreturn KEYS[1]")
    script = build_script(tmp_path)
    assert script.functions == {"alpha", "beta"}
    lines = script.source.splitlines()
    first_beta = next(first for first, _last, path in script.spans if path.name == "beta.lua")
    assert lines[first_beta - 2] == 'EFFECT_FUNCTIONS["beta"] = function(KEYS, ARGV, redis)'  # redis: the noting wrapper
    assert lines[first_beta + 1] == "return KEYS[1]"
    explained = script.explain(f"ERR user_script:{first_beta + 2}: boom")
    assert explained.startswith(f"{tmp_path / 'beta.lua'}:3:")
    assert script.explain("ERR user_script:3: x") == "ERR user_script:3: x"  # engine lines stay as they are
    assert script.sha != build_script(None).sha


def test_bad_function_file_name(tmp_path) -> None:
    (tmp_path / "bad-name.lua").write_text("return 1\n")
    with pytest.raises(EffectEngineError, match="bad-name"):
        build_script(tmp_path)


def test_script_file_holds_no_placeholders_for_data() -> None:
    text = SCRIPT_PATH.read_text()
    assert text.count("-- @@EFFECT_FUNCTIONS@@") == 1
    assert "loadstring" not in text and "..ARGV" not in text.replace(" ", "")
