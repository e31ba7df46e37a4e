"""The kernel server's request parser, in-process: whatever arrives is a request or a refusal."""

from __future__ import annotations

import json
import sys

import pytest
from helpers import examples
from hypothesis import given
from hypothesis import strategies as st

from amp_book import kernel_server

# Any JSON document, nested up to a few levels: the shapes a confused or hostile client sends.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
# Objects with the request's own keys, holding values of any shape.
near_requests = st.fixed_dictionaries(
    {},
    optional={
        "args": st.lists(st.text(max_size=10), max_size=3) | json_values,
        "cwd": st.sampled_from(["/", "/tmp", "relative", ""]) | json_values,
        "env": st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3) | json_values,
    },
)
payloads = st.one_of(
    st.binary(max_size=400),
    json_values.map(lambda v: json.dumps(v).encode()),
    near_requests.map(lambda v: json.dumps(v).encode()),
    st.integers(1, 200_000).map(lambda n: b"[" * n),
    st.integers(1, 200_000).map(lambda n: b'{"a":' * n),
)


@examples(2000)
@given(payloads)
def test_every_request_is_parsed_or_refused_with_a_reason(data: bytes) -> None:
    try:
        request = kernel_server.parse_request(data)
    except kernel_server.BadRequest as error:
        refusal = str(error)
    else:
        refusal = None
    if refusal is not None:
        assert refusal.startswith("a request"), refusal
        return
    assert set(request) == {"args", "cwd", "env"}
    assert all(isinstance(a, str) for a in request["args"])
    assert request["cwd"].startswith("/")
    assert all(isinstance(v, str) for v in request["env"].values())


def test_nesting_past_the_recursion_limit_is_a_refusal() -> None:
    depth = sys.getrecursionlimit() * 4
    with pytest.raises(kernel_server.BadRequest, match="not nested deeper"):
        kernel_server.parse_request(b"[" * depth + b"]" * depth)
