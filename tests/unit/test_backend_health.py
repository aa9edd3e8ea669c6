"""Backend health records (``a2a_gateway.backend_health``): status from the last success and
the last error, counts, and messages that are short and carry no credential."""

from __future__ import annotations

from a2a_gateway.backend_health import MAX_MESSAGE_CHARS, BackendHealth, error_message, health_json, safe_message


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_an_endpoint_is_unknown_then_failing_after_an_error_then_ok_after_a_success():
    clock = Clock()
    health = BackendHealth(clock)
    assert health_json(health.of("e1")) == {"status": "unknown", "last_success": None, "last_error": None,
                                            "successes": 0, "errors": 0}
    health.failed("e1", "cannot reach the chat backend at http://127.0.0.1:9/v1/chat/completions")
    shown = health_json(health.of("e1"))
    assert shown["status"] == "failing" and shown["last_success"] is None
    assert shown["last_error"] == {"at": "2027-01-15T08:00:00+00:00",
                                   "message": "cannot reach the chat backend at http://127.0.0.1:9/v1/chat/completions"}
    clock.now += 5
    health.succeeded("e1")
    shown = health_json(health.of("e1"))
    assert shown["status"] == "ok" and shown["last_success"] == "2027-01-15T08:00:05+00:00"
    assert shown["last_error"]["at"] == "2027-01-15T08:00:00+00:00"  # kept: when it last failed
    assert (shown["successes"], shown["errors"]) == (1, 1)
    clock.now += 5
    health.failed("e1", RuntimeError("boom"))
    assert health.of("e1").status == "failing" and health.of("e1").last_error_message == "RuntimeError: boom"
    assert health.of("e2").status == "unknown"  # endpoints apart


def test_messages_lose_url_credentials_queries_tokens_and_keys_and_stay_one_short_line():
    text = ("cannot reach http://bob:hunter2@backend:8000/v1/chat?api_key=sk-123#frag\n"
            "Authorization: Basic Zm9vOmJhcg== with Bearer eyJabc and token=tok-456, password: pw-789, "
            "key a2agw_0123456789abcdef_s3cr3t")
    shown = safe_message(text)
    for secret in ("hunter2", "bob:", "sk-123", "frag", "Zm9vOmJhcg", "eyJabc", "tok-456", "pw-789", "s3cr3t", "\n"):
        assert secret not in shown, secret
    assert shown.startswith("cannot reach http://backend:8000/v1/chat ")
    assert len(safe_message("x" * 5000)) == MAX_MESSAGE_CHARS
    assert safe_message("the model hit its token limit") == "the model hit its token limit"  # words stay


def test_an_exception_is_named_by_its_class_with_its_message_made_safe():
    assert error_message(ConnectionRefusedError(111, "Connection refused")) == \
        "ConnectionRefusedError: [Errno 111] Connection refused"
    assert error_message(ValueError()) == "ValueError"
    assert "pw" not in error_message(OSError("https://u:pw@h/x failed"))
