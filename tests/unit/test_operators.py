"""Operator credentials: gateway operator keys (keys or digests, never shown) and who among
an endpoint's callers its ``auth.operators`` declaration names."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import SecretStr

from a2a_gateway.auth.callers import Caller
from a2a_gateway.auth.config import endpoint_auth
from a2a_gateway.auth.operators import OperatorKeyError, OperatorKeys, is_operator
from a2a_gateway.errors import EndpointMisconfiguredError

KEY = "k" * 20 + "-operator"


def test_keys_match_as_given_or_as_digests_and_nothing_else():
    digest = "sha256:" + hashlib.sha256(KEY.encode()).hexdigest().upper()
    for entry in (KEY, digest):
        keys = OperatorKeys([SecretStr(entry)])
        assert keys.match(KEY)
        assert not keys.match(KEY + "x") and not keys.match("") and not keys.match(digest)
    assert not OperatorKeys([])
    assert KEY not in repr(OperatorKeys([SecretStr(KEY)]))


@pytest.mark.parametrize("entry", ["short", "sha256:abcd", "sha256:" + "zz" * 32])
def test_unusable_entries_are_refused_without_their_value(entry):
    with pytest.raises(OperatorKeyError, match="operator_keys entry 1") as refused:
        OperatorKeys([SecretStr(KEY), SecretStr(entry)])
    assert entry.removeprefix("sha256:") not in str(refused.value)


def auth_of(operators: dict) -> object:
    return endpoint_auth(
        {"auth": {"api_key": {}, "operators": operators}},
        default_header="X-API-Key",
        allow_anonymous=False,
    ).operators


def test_operators_by_principal_and_by_a_jwt_claim():
    operators = auth_of({"principals": ["ops-1"], "jwt_claim": "groups", "jwt_values": ["ops"]})
    assert is_operator(Caller("ops-1"), operators)
    assert not is_operator(Caller("someone"), operators)
    assert is_operator(Caller("dana", claims={"groups": ["staff", "ops"]}), operators)
    assert is_operator(Caller("dana", claims={"groups": "ops"}), operators)
    assert not is_operator(Caller("erin", claims={"groups": ["staff"]}), operators)
    assert not is_operator(Caller("erin", claims={"groups": {"ops": True}}), operators)
    assert not is_operator(Caller("ops-1"), auth_of({"principals": ["ops-2"]}))
    none = endpoint_auth({}, default_header="X-API-Key", allow_anonymous=False).operators
    assert not is_operator(Caller("ops-1"), none)


@pytest.mark.parametrize("declared, problem", [
    ({}, "name operators"),
    ({"jwt_claim": "groups"}, "together"),
    ({"principals": ["a"], "jwt_values": ["ops"]}, "together"),
    ({"principals": ["a"], "role": "x"}, "role"),
])
def test_bad_operator_declarations_name_the_problem(declared, problem):
    with pytest.raises(EndpointMisconfiguredError, match=problem):
        auth_of(declared)
