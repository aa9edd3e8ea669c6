"""The gRPC binding through a running gateway: the same scenarios on the three bindings with
the real a2a-sdk client (gRPC on memory, SQLite and PostgreSQL), then what only gRPC has —
status codes with ErrorInfo, routing by ``tenant``, metadata credentials, deadlines, message
size, TLS, health, shutdown.
"""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Role,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
    a2a_pb2_grpc,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from a2a_gateway.auth.api_keys import make_key
from a2a_gateway.shutdown import drain
from a2a_gateway.transport.sse import OPEN_STREAMS
from tests.stores.store_urls import fresh_store_url
from tests.support.cli_process import cli_env, run_cli, serving
from tests.support.harness import RunningGateway, collect, reconstruct, running_gateway
from tests.support.held import add_held_echo
from tests.support.messages import send_request
from tests.support.waiting import eventually

COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
WORDS = " ".join(f"w{i}" for i in range(30))

CASES = [
    ("JSONRPC", "memory"), ("HTTP+JSON", "memory"),
    ("GRPC", "memory"), ("GRPC", "sqlite"), ("GRPC", "postgres"),
]
"""(binding, store) of the shared scenarios: every binding on memory, gRPC on the SQL stores too."""


class Case:
    def __init__(self, gw: RunningGateway, binding: str) -> None:
        self.gw, self.binding = gw, binding

    def client(self, endpoint_id: str, **options: Any) -> Any:
        return self.gw.client(endpoint_id, binding=self.binding, **options)


@pytest.fixture(params=CASES, ids=lambda c: f"{c[0]}-{c[1]}")
async def case(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Case]:
    binding, store = request.param
    async with fresh_store_url(store, tmp_path, monkeypatch) as url:
        async with running_gateway(url, grpc=True) as gw:
            yield Case(gw, binding)


@pytest.fixture
async def grpc_gw() -> AsyncIterator[RunningGateway]:
    async with running_gateway(grpc=True) as gw:
        yield gw


async def echo(gw: RunningGateway, delay: float = 0.0, **settings: Any) -> str:
    return await gw.add_endpoint(settings={"delay": delay, **settings})


# the same scenarios on every binding ---------------------------------------------------------

async def test_send_returns_the_completed_task_and_get_reads_it_back(case):
    ep = await echo(case.gw)
    async with case.client(ep, streaming=False) as client:
        (event,) = await collect(client.send_message(send_request("hello binding")))
        got = await client.get_task(GetTaskRequest(id=event.task.id))
    for task in (event.task, got):
        assert task.status.state == COMPLETED
        assert [p.text for p in task.artifacts[0].parts] == ["echo: hello binding"]
        assert [m.parts[0].text for m in task.history if m.role == Role.ROLE_USER] == [
            "hello binding"
        ]


async def test_stream_rebuilds_the_text_the_store_keeps(case):
    ep = await echo(case.gw, 0.01)
    async with case.client(ep) as client:
        events = await collect(client.send_message(send_request("one two three four")))
        stored = await client.get_task(GetTaskRequest(id=events[0].task.id))
    assert events[0].HasField("task")
    assert len([e for e in events if e.HasField("artifact_update")]) >= 5
    assert reconstruct(events) == {stored.artifacts[0].artifact_id: "echo: one two three four"}
    assert stored.artifacts[0].parts[0].text == "echo: one two three four"
    assert events[-1].status_update.status.state == COMPLETED


async def test_list_tasks_by_context_and_pages(case):
    ep = await echo(case.gw)
    context_id = str(uuid.uuid4())
    async with case.client(ep, streaming=False) as client:
        ids = [
            (await collect(client.send_message(send_request(f"m{i}", context_id=context_id))))[
                0
            ].task.id
            for i in range(3)
        ]
        await collect(client.send_message(send_request("elsewhere")))
        first = await client.list_tasks(ListTasksRequest(context_id=context_id, page_size=2))
        second = await client.list_tasks(ListTasksRequest(context_id=context_id, page_size=2,
                                                          page_token=first.next_page_token))
    assert [t.id for t in [*first.tasks, *second.tasks]] == list(reversed(ids))
    assert first.total_size == 3 and second.next_page_token == ""


async def test_cancel_a_running_task_then_it_is_not_cancelable(case):
    ep = await echo(case.gw, 0.2)
    async with case.client(ep, streaming=False) as client:
        (event,) = await collect(client.send_message(send_request(WORDS, immediately=True)))
        canceled = await client.cancel_task(CancelTaskRequest(id=event.task.id))
        again = await client.get_task(GetTaskRequest(id=event.task.id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=event.task.id))
    assert canceled.status.state == CANCELED and again.status.state == CANCELED


async def test_subscribe_mid_stream_rebuilds_the_exact_text(case):
    ep = await echo(case.gw, 0.05)
    async with case.client(ep) as first, case.client(ep) as second:
        stream = first.send_message(send_request(WORDS))
        head = [await anext(stream) for _ in range(6)]
        late = await collect(second.subscribe(SubscribeToTaskRequest(id=head[0].task.id)))
        rest = [e async for e in stream]
    assert late[0].task.id == head[0].task.id
    assert list(reconstruct(late).values()) == [f"echo: {WORDS}"]
    assert list(reconstruct(head + rest).values()) == [f"echo: {WORDS}"]
    assert late[-1].status_update.status.state == COMPLETED


async def test_push_config_create_get_list_delete(case):
    ep = await echo(case.gw)
    async with case.client(ep, streaming=False) as client:
        (event,) = await collect(client.send_message(send_request("push me")))
        task_id = event.task.id
        created = await client.create_task_push_notification_config(
            TaskPushNotificationConfig(
                task_id=task_id, id="cfg-1", url="http://127.0.0.1:9/hook", token="t1"
            )
        )
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="cfg-1"))
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id))
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="cfg-1"))
        after = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id))
    assert created.url == "http://127.0.0.1:9/hook" and got.token == "t1"
    assert [c.id for c in listed.configs] == ["cfg-1"] and list(after.configs) == []


async def test_input_required_then_the_answer_completes_the_same_task(case):
    ep = await echo(case.gw)
    async with case.client(ep, streaming=False) as client:
        (asked,) = await collect(client.send_message(send_request("please ?input")))
        task = asked.task
        (answered,) = await collect(client.send_message(
            send_request("the answer", task_id=task.id, context_id=task.context_id)))
    assert task.status.state == INPUT_REQUIRED
    assert answered.task.id == task.id and answered.task.status.state == COMPLETED
    assert answered.task.artifacts[-1].parts[0].text == "echo: the answer"


async def test_an_unknown_task_is_task_not_found(case):
    ep = await echo(case.gw)
    async with case.client(ep) as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=str(uuid.uuid4())))


async def test_a_key_owns_its_tasks_and_another_principal_sees_none(case):
    gw = case.gw
    gw.gateway.settings.allow_unauthenticated_endpoints = False
    ep = await echo(gw)
    alice, bob = await _key(gw, ep, "alice"), await _key(gw, ep, "bob")
    async with case.client(ep, streaming=False, api_key=alice) as as_alice, \
            case.client(ep, streaming=False, api_key=bob) as as_bob:
        (event,) = await collect(as_alice.send_message(send_request("mine")))
        mine = await as_alice.get_task(GetTaskRequest(id=event.task.id))
        with pytest.raises(TaskNotFoundError):
            await as_bob.get_task(GetTaskRequest(id=event.task.id))
        bobs = await as_bob.list_tasks(ListTasksRequest())
    assert mine.status.state == COMPLETED and list(bobs.tasks) == []


async def _key(gw: RunningGateway, endpoint_id: str, principal: str) -> str:
    secret = gw.gateway.settings.api_key_secret.get_secret_value().encode()
    row, key = make_key(secret, endpoint_id=endpoint_id, tenant="default", principal=principal)
    await gw.store.create_api_key(row)
    return key


# gRPC on the wire ----------------------------------------------------------------------------

def grpc_target(gw: RunningGateway) -> str:
    return f"127.0.0.1:{gw.gateway.grpc_port}"


def error_info(error: grpc.aio.AioRpcError) -> tuple[grpc.StatusCode, str, str]:
    """(code, ErrorInfo reason, ErrorInfo domain) of a failed call."""
    (details,) = [v for k, v in error.trailing_metadata() if k == "grpc-status-details-bin"]
    status = status_pb2.Status.FromString(details)
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info) and status.code == error.code().value[0]
    return error.code(), info.reason, info.domain


async def failed(call: Any) -> grpc.aio.AioRpcError:
    """The error a unary call or a stream (read to its end) fails with."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        if isinstance(call, grpc.aio.UnaryStreamCall):
            [event async for event in call]
        else:
            await call
    return raised.value


@pytest.fixture
async def stub(grpc_gw: RunningGateway) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(grpc_target(grpc_gw)) as channel:
        yield a2a_pb2_grpc.A2AServiceStub(channel)


V10 = (("a2a-version", "1.0"),)


async def test_the_card_lists_grpc_last_with_the_endpoint_as_tenant(grpc_gw):
    ep = await echo(grpc_gw)
    card = await grpc_gw.card(ep)
    assert [(i.protocol_binding, i.protocol_version) for i in card.supported_interfaces] == [
        ("JSONRPC", "1.0"), ("JSONRPC", "0.3"), ("HTTP+JSON", "1.0"), ("GRPC", "1.0")]
    assert card.supported_interfaces[3].url == grpc_target(grpc_gw)
    assert card.supported_interfaces[3].tenant == ep


async def test_without_a_grpc_port_the_card_lists_no_grpc(gw, echo_id):
    card = await gw.card(echo_id)
    assert "GRPC" not in [i.protocol_binding for i in card.supported_interfaces]


async def test_errors_are_status_codes_with_error_info(grpc_gw, stub):
    ep = await echo(grpc_gw)
    unknown_task = await failed(stub.GetTask(_get(ep), metadata=V10))
    assert error_info(unknown_task) == (
        grpc.StatusCode.NOT_FOUND,
        "TASK_NOT_FOUND",
        "a2a-protocol.org",
    )
    terminal = (await stub.SendMessage(_send(ep, "done"), metadata=V10)).task
    again = await failed(stub.SubscribeToTask(_subscribe(ep, terminal.id), metadata=V10))
    assert error_info(again) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "UNSUPPORTED_OPERATION",
        "a2a-protocol.org",
    )
    missing_id = await failed(stub.GetTask(_get(ep, ""), metadata=V10))
    assert error_info(missing_id)[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PARAMS")
    old_version = await failed(stub.GetTask(_get(ep), metadata=(("a2a-version", "0.3"),)))
    assert error_info(old_version)[:2] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "VERSION_NOT_SUPPORTED",
    )
    grpc_gw.gateway.settings.rest_error_statuses = "1.0.0"  # A2A v1.0.0's table
    old_table = await failed(stub.SubscribeToTask(_subscribe(ep, terminal.id), metadata=V10))
    assert error_info(old_table)[:2] == (grpc.StatusCode.UNIMPLEMENTED, "UNSUPPORTED_OPERATION")


async def test_the_extended_card_for_a_key_on_grpc_and_http_lists_grpc_too(grpc_gw, stub):
    card = {
        "capabilities": {"extendedAgentCard": True},
        "extended": {
            "skills": [{"id": "admin", "name": "Admin", "description": "more", "tags": ["x"]}]
        },
    }
    ep = await grpc_gw.add_endpoint(settings={"delay": 0}, card=card)
    anonymous = await failed(
        stub.GetExtendedAgentCard(GetExtendedAgentCardRequest(tenant=ep), metadata=V10)
    )
    key = await _key(grpc_gw, ep, "alice")
    over_grpc = await stub.GetExtendedAgentCard(GetExtendedAgentCardRequest(tenant=ep),
                                                metadata=V10 + (("x-api-key", key),))
    async with httpx.AsyncClient() as http:
        over_http = (await http.get(f"{grpc_gw.rest_url(ep)}/extendedAgentCard",
                                    headers={"X-API-Key": key})).json()
    assert error_info(anonymous)[:2] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    )
    assert "admin" in [s.id for s in over_grpc.skills]
    assert [(i.protocol_binding, i.url, i.tenant) for i in over_grpc.supported_interfaces][-1] == (
        "GRPC", grpc_target(grpc_gw), ep)
    assert over_http["supportedInterfaces"][-1] == {
        "url": grpc_target(grpc_gw),
        "protocolBinding": "GRPC",
        "tenant": ep,
        "protocolVersion": "1.0",
    }


async def test_a_required_extension_is_negotiated_in_metadata(grpc_gw, stub):
    uri = "urn:example:required"
    ep = await grpc_gw.add_endpoint(settings={"delay": 0}, card={"capabilities": {"extensions": [
        {"uri": uri, "required": True}]}})
    refused = await failed(stub.SendMessage(_send(ep, "hi"), metadata=V10))
    call = stub.SendMessage(_send(ep, "hi"), metadata=V10 + (("a2a-extensions", uri),))
    answer, sent_back = await call, dict(await call.initial_metadata())
    assert error_info(refused)[:2] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "EXTENSION_SUPPORT_REQUIRED",
    )
    assert answer.task.status.state == COMPLETED and sent_back["a2a-extensions"] == uri


async def test_calls_count_in_the_request_metrics(grpc_gw, stub):
    ep = await echo(grpc_gw)
    await stub.SendMessage(_send(ep, "counted"), metadata=V10)
    await failed(stub.GetTask(_get(ep), metadata=V10))
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(f"{grpc_gw.base_url}/metrics")).text
    assert (
        f'a2a_gateway_request_outcomes_total{{a2a_method="SendMessage",endpoint="{ep}",'
        'outcome="ok"} 1.0'
        in metrics
    )
    assert (f'a2a_gateway_request_outcomes_total{{a2a_method="GetTask",endpoint="{ep}",'
            f'outcome="TaskNotFoundError"}} 1.0') in metrics


async def test_unknown_disabled_or_unnamed_endpoints_are_not_found(grpc_gw, stub):
    disabled = await grpc_gw.add_endpoint(settings={"delay": 0}, enabled=False)
    for tenant in (str(uuid.uuid4()), disabled, "not-an-id", ""):
        error = await failed(stub.SendMessage(_send(tenant, "hi"), metadata=V10))
        assert error.code() == grpc.StatusCode.NOT_FOUND, tenant
        assert error_info(error)[1] == "METHOD_NOT_FOUND"
    assert "tenant" in error.details()  # the unnamed one says how to name it


async def test_a_request_without_tenant_goes_to_the_default_endpoint():
    default = str(uuid.uuid4())
    async with running_gateway(grpc=True, default_endpoint=default) as gw:
        await gw.add_endpoint(settings={"delay": 0}, endpoint_id=default)
        async with grpc.aio.insecure_channel(grpc_target(gw)) as channel:
            answer = await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(
                _send("", "to the default"), metadata=V10
            )
    assert answer.task.artifacts[0].parts[0].text == "echo: to the default"


async def test_credentials_come_from_metadata():
    async with running_gateway(
        grpc=True, allow_unauthenticated_endpoints=False, api_key_cache_seconds=0
    ) as gw:
        ep = await echo(gw)
        key = await _key(gw, ep, "alice")
        async with grpc.aio.insecure_channel(grpc_target(gw)) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            for metadata in (
                (),
                (("x-api-key", "nonsense"),),
                (("authorization", "Bearer nonsense"),),
            ):
                for call in (stub.SendMessage(_send(ep, "hi"), metadata=V10 + metadata),
                             stub.SendStreamingMessage(_send(ep, "hi"), metadata=V10 + metadata)):
                    refused = await failed(call)
                    assert refused.code() == grpc.StatusCode.UNAUTHENTICATED, metadata
                    assert "nonsense" not in refused.details()
            by_header = await stub.SendMessage(
                _send(ep, "hi"), metadata=V10 + (("x-api-key", key),)
            )
            by_bearer = await stub.GetTask(_get(ep, by_header.task.id),
                                           metadata=V10 + (("authorization", f"Bearer {key}"),))
            listed = await stub.ListTasks(
                ListTasksRequest(tenant=ep), metadata=V10 + (("x-api-key", key),)
            )
    assert by_bearer.status.state == COMPLETED
    assert [t.id for t in listed.tasks] == [by_header.task.id]  # the refused calls created nothing


async def test_a_client_deadline_ends_the_stream_never_the_task(grpc_gw, stub, monkeypatch):
    # the run waits after its first word until the deadline has ended the stream (with a 1.5 s
    # run and a 0.6 s deadline a loaded machine could miss the first event or the deadline)
    ep, release = await add_held_echo(grpc_gw, monkeypatch, settings={"delay": 0.05})
    stream = stub.SendStreamingMessage(_send(ep, WORDS), metadata=V10, timeout=2)
    seen = []
    try:
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            async for event in stream:
                seen.append(event)
    finally:
        release.set()
    assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    task_id = seen[0].task.id
    task = await eventually(lambda: stub.GetTask(_get(ep, task_id), metadata=V10),
                            until=lambda t: t.status.state == COMPLETED, what="the task completes")
    assert task.artifacts[0].parts[0].text == f"echo: {WORDS}"


async def test_a_cancelled_stream_leaves_the_task_running(grpc_gw, stub):
    ep = await echo(grpc_gw, 0.05)
    stream = stub.SendStreamingMessage(_send(ep, WORDS), metadata=V10)
    first = await stream.read()
    await stream.read()
    stream.cancel()
    task = await eventually(lambda: stub.GetTask(_get(ep, first.task.id), metadata=V10),
                            until=lambda t: t.status.state == COMPLETED, what="the task completes")
    assert task.artifacts[0].parts[0].text == f"echo: {WORDS}"
    assert not grpc_gw.app[OPEN_STREAMS]


async def test_a_message_over_the_limit_is_refused_and_the_server_goes_on():
    async with running_gateway(grpc=True, grpc_max_message_bytes=64 * 1024) as gw:
        ep = await echo(gw)
        async with grpc.aio.insecure_channel(grpc_target(gw)) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            too_big = await failed(stub.SendMessage(_send(ep, "x" * 100_000), metadata=V10))
            fine = await stub.SendMessage(_send(ep, "small"), metadata=V10)
    assert too_big.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert fine.task.status.state == COMPLETED


async def test_message_limits_of_the_http_bindings_apply(grpc_gw, stub):
    grpc_gw.gateway.settings.max_text_chars = 10
    error = await failed(
        stub.SendMessage(_send(await echo(grpc_gw), "longer than ten"), metadata=V10)
    )
    assert error_info(error)[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PARAMS")
    assert "max_text_chars" in error.details()


async def test_health_is_serving_then_not_serving_while_stopping(grpc_gw):
    async with grpc.aio.insecure_channel(grpc_target(grpc_gw)) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        before = await health.Check(health_pb2.HealthCheckRequest())
        grpc_gw.gateway.engine.stopping = True
        during = await health.Check(health_pb2.HealthCheckRequest())
        refused = await failed(
            a2a_pb2_grpc.A2AServiceStub(channel).GetTask(_get(str(uuid.uuid4())), metadata=V10)
        )
        grpc_gw.gateway.engine.stopping = False
    assert before.status == health_pb2.HealthCheckResponse.SERVING
    assert during.status == health_pb2.HealthCheckResponse.NOT_SERVING
    assert refused.code() == grpc.StatusCode.UNAVAILABLE and "shutting down" in refused.details()


async def test_a_stream_idle_for_longer_than_the_keepalive_interval_goes_on():
    async with running_gateway(
        grpc=True, grpc_keepalive_seconds=0.5, grpc_keepalive_timeout_seconds=1.0
    ) as gw:
        ep = await echo(gw, 1.5)  # 1.5 s without an event, three pings
        async with gw.client(ep, binding="GRPC") as client:
            events = await collect(client.send_message(send_request("slow idle words")))
    assert list(reconstruct(events).values()) == ["echo: slow idle words"]
    assert events[-1].status_update.status.state == COMPLETED


async def test_reflection_lists_the_a2a_service_when_switched_on():
    async with running_gateway(grpc=True, grpc_reflection=True) as gw:
        async with grpc.aio.insecure_channel(grpc_target(gw)) as channel:
            reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
            answers = reflection.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")])
            )
            (answer,) = [a async for a in answers]
    names = [s.name for s in answer.list_services_response.service]
    assert "lf.a2a.v1.A2AService" in names and "grpc.health.v1.Health" in names


async def test_shutdown_ends_a_grpc_stream_with_the_hand_over_event():
    async with running_gateway(
        grpc=True, shutdown_grace_seconds=0.5, shutdown_close_seconds=2.0
    ) as gw:
        ep = await echo(gw, 0.2)
        async with grpc.aio.insecure_channel(grpc_target(gw)) as channel:
            stream = a2a_pb2_grpc.A2AServiceStub(channel).SendStreamingMessage(
                _send(ep, WORDS), metadata=V10
            )
            seen = [await stream.read(), await stream.read()]
            async with asyncio.timeout(20):
                drained = asyncio.create_task(drain(gw.app))
                while (event := await stream.read()) is not grpc.aio.EOF:
                    seen.append(event)
                await drained
    last = seen[-1].status_update
    assert dict(last.metadata) == {"kind": "gateway_stopping"}
    assert last.status.state == TaskState.TASK_STATE_WORKING


async def test_tls_when_a_certificate_is_configured(tmp_path):
    cert, key = _self_signed(tmp_path)
    async with running_gateway(grpc=True, grpc_allow_plaintext=False,
                               grpc_tls_cert_file=str(cert), grpc_tls_key_file=str(key)) as gw:
        ep = await echo(gw)
        credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        async with grpc.aio.secure_channel(
            f"localhost:{gw.gateway.grpc_port}", credentials
        ) as channel:
            answer = await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(
                _send(ep, "over tls"), metadata=V10
            )
        async with grpc.aio.insecure_channel(grpc_target(gw)) as channel:
            plaintext = await failed(a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(
                _send(ep, "in the clear"), metadata=V10, timeout=5))
    assert answer.task.artifacts[0].parts[0].text == "echo: over tls"
    assert plaintext.code() == grpc.StatusCode.UNAVAILABLE


def test_a_grpc_port_without_tls_or_plaintext_allowed_stops_serve(tmp_path):
    done = run_cli("serve", "--store", "memory://", "--port", "0", "--grpc-port", "0", cwd=tmp_path)
    assert done.returncode != 0
    assert "grpc_allow_plaintext" in done.stderr and "Traceback" not in done.stderr


async def test_serve_grpc_port_serves_the_card_interface(tmp_path):
    added = run_cli("endpoints", "add", "--name", "echo", "--handler", "handlers.echo:EchoHandler",
                    "--set", "delay=0", "--public", cwd=tmp_path)
    ep = added.stdout.strip().splitlines()[-1]
    async with serving(
        "serve", "--grpc-port", "0", cwd=tmp_path, A2A_GATEWAY_GRPC_ALLOW_PLAINTEXT="true"
    ) as listening:
        async with httpx.AsyncClient() as http:
            card = (await http.get(f"{listening[1]}/{ep}/.well-known/agent-card.json")).json()
        (grpc_interface,) = [
            i for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC"
        ]
        assert f"gRPC on {grpc_interface['url']}" in listening.string
        async with grpc.aio.insecure_channel(grpc_interface["url"]) as channel:
            answer = await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(
                _send(grpc_interface["tenant"], "via serve"), metadata=V10)
    assert answer.task.artifacts[0].parts[0].text == "echo: via serve"


def test_a_gateway_without_grpc_does_not_load_the_binding(tmp_path):
    probe = ("import sys; from a2a_gateway.app import build_app; from a2a_gateway.settings import "
             "GatewaySettings; build_app(GatewaySettings(store='memory://')); "
             "print('a2a_gateway.transport.grpc_binding' in sys.modules)")
    done = run_cli_python(probe, tmp_path)
    assert done.stdout.strip() == "False", done.stderr


# helpers -------------------------------------------------------------------------------------

def _send(tenant: str, text: str) -> Any:
    request = send_request(text)
    request.tenant = tenant
    return request


def _get(tenant: str, task_id: str | None = None) -> GetTaskRequest:
    return GetTaskRequest(tenant=tenant, id=str(uuid.uuid4()) if task_id is None else task_id)


def _subscribe(tenant: str, task_id: str) -> SubscribeToTaskRequest:
    return SubscribeToTaskRequest(tenant=tenant, id=task_id)


def run_cli_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=cwd, env=cli_env())


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for ``localhost`` and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


# A2A 1.1 generations on gRPC (their fields travel as the 1.1 field numbers) ---------------

V11 = (("a2a-version", "1.1"),)


def _with_field(message: Any, number: int, value: int) -> Any:
    """``message`` with a 1.1 varint field the 1.0 types lack."""
    message.MergeFromString(bytes([number << 3]) + value.to_bytes(1, "big"))
    return message


async def test_generations_reach_a_1_1_caller_and_never_a_1_0_one(grpc_gw, stub):
    from google.protobuf.unknown_fields import UnknownFieldSet

    from a2a_gateway.generation import generation_of

    ep = await echo(grpc_gw)
    asked = await stub.SendMessage(_send(ep, "?input please"), metadata=V11)
    task = asked.task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    generation = generation_of(task)
    assert generation >= 2
    plain = await stub.GetTask(_get(ep, task.id), metadata=V10)
    assert not len(UnknownFieldSet(plain))  # nothing a 1.0 client does not know
    streamed = [e async for e in stub.SendStreamingMessage(_send(ep, "a b c"), metadata=V11)]
    numbers = [generation_of(getattr(e, e.WhichOneof("payload"))) for e in streamed]
    assert numbers[0] == 1 and all(b > a for a, b in zip(numbers, numbers[1:], strict=False))
    final = await stub.GetTask(_get(ep, streamed[0].task.id), metadata=V11)
    assert generation_of(final) == numbers[-1]  # chunks a slow reader gets merged: a gap

    # long-poll (current_generation, field 4): woken by the answer
    poll = asyncio.ensure_future(stub.GetTask(
        _with_field(_get(ep, task.id), 4, generation), metadata=V11))
    await asyncio.sleep(0.3)
    assert not poll.done()
    # if_generation_match (SendMessageConfiguration field 5): a stale one is ABORTED
    stale = _send(ep, "too late")
    stale.message.task_id = task.id
    _with_field(stale.configuration, 5, generation + 1)
    code, reason, _ = error_info(await failed(stub.SendMessage(stale, metadata=V11)))
    assert (code, reason) == (grpc.StatusCode.ABORTED, "TASK_GENERATION_MISMATCH")
    answer = _send(ep, "now")
    answer.message.task_id = task.id
    _with_field(answer.configuration, 5, generation)
    await stub.SendMessage(answer, metadata=V11)
    woken = await asyncio.wait_for(poll, 5)
    assert generation_of(woken) > generation


@pytest.mark.parametrize("missing", ["message_id", "parts", "message"])
async def test_a_send_missing_a_required_field_is_invalid_params_naming_it(grpc_gw, stub, missing):
    ep = await echo(grpc_gw)
    request = _send(ep, "hello")
    request.ClearField(missing) if missing == "message" else request.message.ClearField(missing)
    for call in (stub.SendMessage, stub.SendStreamingMessage):
        error = await failed(call(request, metadata=V10))
        assert error_info(error)[:2] == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PARAMS")
        assert missing in error.details()
    assert (await stub.SendMessage(_send(ep, "fine"), metadata=V10)).task.status.state == COMPLETED
