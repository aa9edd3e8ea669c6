"""Our planned REQUIRED-field check reports exactly what the a2a-sdk's check reports."""

from __future__ import annotations

import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import InvalidParamsError
from a2a.utils.proto_utils import validate_proto_required_fields

from a2a_gateway.transport.required_fields import validate_required_fields

CASES = [
    SendMessageRequest(),
    SendMessageRequest(message=Message()),
    SendMessageRequest(message=Message(message_id="m", role=Role.ROLE_USER)),
    SendMessageRequest(
        message=Message(message_id="m", role=Role.ROLE_USER, parts=[Part(text="hi")])
    ),
    SendMessageRequest(
        message=Message(message_id="m", role=Role.ROLE_USER, parts=[Part(text="hi")]),
        configuration=SendMessageConfiguration(
            task_push_notification_config=TaskPushNotificationConfig()
        ),
    ),
    GetTaskRequest(),
    GetTaskRequest(id="t"),
    CancelTaskRequest(),
    ListTasksRequest(),
    TaskPushNotificationConfig(task_id="t"),
]


def errors_of(check, msg) -> list[dict] | None:
    try:
        check(msg)
    except InvalidParamsError as exc:
        return sorted(exc.data["errors"], key=lambda e: e["field"])
    return None


@pytest.mark.parametrize("msg", CASES, ids=lambda m: f"{type(m).__name__}")
def test_same_verdict_as_the_sdk(msg):
    assert errors_of(validate_required_fields, msg) == errors_of(
        validate_proto_required_fields, msg
    )
