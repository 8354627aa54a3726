"""The consumer's Avro read against fastavro's own reader, on generated payloads (review of #14.2's
read through fastavro's compiled ``_read_data`` with named-type tables built once, 931d4c0 and
71ed4ba): a schema with a named record used twice, an optional union of it, an enum that gains a
symbol, a map of arrays, bytes, decimal and timestamp-micros logical types, a three-branch union;
v1 bytes read as v1 and resolved into v2 (a field dropped, one added with a default, int widened
to long, a nested field added). Each read, first and cached, equals ``fastavro.schemaless_reader``
of the same bytes."""

from __future__ import annotations

import io
from datetime import datetime, timezone
from pathlib import Path

import pytest
from fastavro import schemaless_reader
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.codec import AvroCodec
from postbox.codec.avro import HEADER_LEN
from postbox.schemas.repository import SchemaRepository

V1 = r'''{"type":"record","name":"Opened","namespace":"t","fields":[
 {"name":"id","type":"string"},
 {"name":"owner","type":{"type":"record","name":"Person","fields":[{"name":"name","type":"string"},{"name":"age","type":["null","int"],"default":null}]}},
 {"name":"backup","type":["null","Person"],"default":null},
 {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B"],"default":"A"}},
 {"name":"tags","type":{"type":"map","values":{"type":"array","items":"string"}}},
 {"name":"blob","type":"bytes"},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
 {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"gone","type":"long"},
 {"name":"score","type":["null","double","string"],"default":null}
]}'''
V2 = r'''{"type":"record","name":"Opened","namespace":"t","fields":[
 {"name":"id","type":"string"},
 {"name":"owner","type":{"type":"record","name":"Person","fields":[{"name":"name","type":"string"},{"name":"age","type":["null","long"],"default":null},{"name":"nick","type":"string","default":"-"}]}},
 {"name":"backup","type":["null","Person"],"default":null},
 {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B","C"],"default":"A"}},
 {"name":"tags","type":{"type":"map","values":{"type":"array","items":"string"}}},
 {"name":"blob","type":"bytes"},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
 {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"score","type":["null","double","string"],"default":null},
 {"name":"added","type":["null","string"],"default":null}
]}'''

PERSON = st.fixed_dictionaries({"name": st.text(max_size=5), "age": st.none() | st.integers(-(2**31), 2**31 - 1)})
PAYLOADS = st.fixed_dictionaries({
    "id": st.text(max_size=8), "owner": PERSON, "backup": st.none() | PERSON, "kind": st.sampled_from(["A", "B"]),
    "tags": st.dictionaries(st.text(max_size=3), st.lists(st.text(max_size=3), max_size=3), max_size=3),
    "blob": st.binary(max_size=10),
    "amount": st.decimals(min_value=-(10**7), max_value=10**7, places=2, allow_nan=False),
    "at": st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(timezone.utc)),
    "gone": st.integers(-(2**63), 2**63 - 1),
    "score": st.none() | st.floats(allow_nan=False) | st.text(max_size=4),
})


@pytest.fixture(scope="module")
def codec(tmp_path_factory: pytest.TempPathFactory) -> AvroCodec:
    folder: Path = tmp_path_factory.mktemp("schemas")
    (folder / "acct").mkdir()
    (folder / "acct" / "Opened.v1.avsc").write_text(V1)
    (folder / "acct" / "Opened.v2.avsc").write_text(V2)
    return AvroCodec(SchemaRepository.load(folder))


@settings(max_examples=300, deadline=None)
@given(payload=PAYLOADS, reader_version=st.sampled_from([None, 1, 2]))
def test_a_read_equals_fastavros_reader(codec: AvroCodec, payload: dict, reader_version: int | None) -> None:
    v1 = codec.repository.get("acct", "Opened", 1)
    reader = codec.repository.get("acct", "Opened", reader_version)
    body = codec.encode_with(v1, payload)
    want = schemaless_reader(io.BytesIO(body[HEADER_LEN:]), v1.parsed, reader.parsed)
    for _ in range(2):  # the first read builds the reading, the second uses it
        got, _reading = codec.read(body, reader_version=reader_version)
        assert got == want
