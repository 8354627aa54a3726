"""#14.2: the engine packs its script calls itself (postbox.effects.wire.pack); Redis must read the
same bytes hiredis would send, whatever the arguments (property test against hiredis's packer)."""

from __future__ import annotations

import hiredis
from hypothesis import given
from hypothesis import strategies as st

from postbox.effects.wire import pack

#: Arguments around the packer's table of length heads (1024) as well as small ones and empties.
arguments = st.one_of(st.binary(max_size=40), st.binary(min_size=1000, max_size=1100))


@given(st.lists(arguments, min_size=1, max_size=60))
def test_bytes_commands_pack_as_hiredis_packs_them(command: list[bytes]) -> None:
    assert pack(tuple(command)) == hiredis.pack_command(tuple(command))  # type: ignore[arg-type]  # its stub types a one-item tuple


@given(st.lists(st.one_of(arguments, st.text(max_size=20), st.integers()), min_size=1, max_size=30))
def test_commands_with_text_or_numbers_pack_as_hiredis_packs_them(command: list[bytes | str | int]) -> None:
    assert pack(tuple(command)) == hiredis.pack_command(tuple(command))  # type: ignore[arg-type]  # its stub types a one-item tuple
