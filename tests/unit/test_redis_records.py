"""The records of a Redis inbox entry (``live.redis.pack_records``): what is packed comes back
in order, and a value that is not a packing of records gives none, never an exception."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from a2a_gateway.live.redis import pack_records, unpack_records

SLOTS = [b"t", b"k", b"n", b"i", b"e", b"end"]
records = st.lists(st.dictionaries(st.sampled_from(SLOTS), st.binary(min_size=1, max_size=40)),
                   max_size=20)


@given(records)
def test_records_come_back_in_order(packed):
    assert unpack_records(pack_records(packed)) == packed


@given(st.binary(max_size=200))
def test_any_bytes_unpack_to_records_or_to_none(data):
    unpacked = unpack_records(data)
    assert unpacked == [] or pack_records(unpacked) == data


def test_a_truncated_value_gives_no_records():
    data = pack_records([{b"t": b"task", b"k": b"e", b"e": b"event bytes"}])
    assert unpack_records(data[:-1]) == [] and unpack_records(data[:10]) == []
