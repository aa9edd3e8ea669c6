"""The NUL check of a request's ids (``tasks.ids``): it finds an id at any depth and skips
what cannot hold one (a message's parts), so a long message costs nothing more."""

from __future__ import annotations

import pytest
from a2a.types import SendMessageRequest
from a2a.utils.errors import InvalidParamsError

from a2a_gateway.tasks.ids import _plan, check_ids
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
