"""The NUL check of a request's ids (``tasks.ids``): it finds an id at any depth and skips
what cannot hold one (a message's parts), so a long message costs nothing more."""

from __future__ import annotations

import pytest
from a2a.types import SendMessageRequest
from a2a.utils.errors import InvalidParamsError
from hypothesis import given, settings
from hypothesis import strategies as st

from a2a_gateway.tasks.ids import _plan, check_ids
from tests.support.examples import examples
from tests.support.messages import send_request


def test_an_id_at_any_depth_holding_a_nul_is_named():
    request = send_request("hi")
    request.message.reference_task_ids.extend(["fine", "bad\0id"])
    with pytest.raises(
        InvalidParamsError, match=r"message\.referenceTaskIds must not contain a NUL"
    ):
        check_ids(request)
    request = send_request("hi")
    request.configuration.task_push_notification_config.id = "cfg\0"
    with pytest.raises(InvalidParamsError, match=r"configuration\.taskPushNotificationConfig\.id"):
        check_ids(request)


def test_text_may_hold_a_nul_and_parts_are_not_walked():
    request = send_request("text with a \0 in it")
    request.message.parts.add().text = "another \0"
    check_ids(request)  # text is no id
    ids, nested = _plan(request.message.DESCRIPTOR)
    assert {f.name for f in ids} >= {"message_id", "context_id", "task_id", "reference_task_ids"}
    assert nested == ()  # parts (and metadata) cannot hold ids
    assert {f.name for f in _plan(SendMessageRequest.DESCRIPTOR)[1]} == {"message", "configuration"}


def test_the_field_walk_runs_only_when_the_encoding_holds_a_zero_byte(monkeypatch):
    import a2a_gateway.tasks.ids as ids_module

    walks: list[str] = []
    walk = ids_module._check
    monkeypatch.setattr(ids_module, "_check", lambda msg, prefix: walks.append(prefix) or walk(
        msg, prefix))
    check_ids(send_request("an ordinary message"))
    assert walks == []
    request = send_request("hi")
    request.message.parts.add().raw = b"\0\0"  # a zero byte, in no id
    check_ids(request)
    assert walks[:1] == [""]  # the walk from the top (and on into the message)


ID_TEXT = st.text(alphabet=st.sampled_from(["a", "é", "\0", "\x01", "☃"]), max_size=4)


@settings(max_examples=examples(300), derandomize=True, database=None, deadline=None)
@given(message_id=ID_TEXT, task_id=ID_TEXT, references=st.lists(ID_TEXT, max_size=2),
       config_id=ID_TEXT, raw=st.binary(max_size=3))
def test_a_request_is_refused_exactly_when_one_of_its_ids_holds_a_nul(
    message_id, task_id, references, config_id, raw
):
    request = send_request("hi")
    request.message.message_id, request.message.task_id = message_id, task_id
    request.message.reference_task_ids.extend(references)
    request.message.parts.add().raw = raw
    if config_id:
        request.configuration.task_push_notification_config.id = config_id
    has_nul = any("\0" in i for i in [message_id, task_id, *references, config_id])
    if has_nul:
        with pytest.raises(InvalidParamsError, match="must not contain a NUL"):
            check_ids(request)
    else:
        check_ids(request)
