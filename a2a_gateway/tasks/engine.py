"""The task engine: starts, continues, cancels and recovers task runs.

Runs are ``tasks.run.TaskRun`` objects keyed by task id in this replica; the engine
decides which run carries a request and the run writes the task. Running tasks carry
this replica's id and a lease (``tasks.ownership``); a replica that finds an expired
lease re-attaches the run (when the handler can) or fails the task with "gateway
instance lost". A task owned by another replica is followed through the store and
the hub, and canceled through the store; an answer to it is recorded in the store here
(``TaskRun.record_answer``), where the owner's run finds it, before the handler gets it. A
stopping replica claims nothing, hands its runs over (``aclose``) and tells the others,
which look for the released tasks at once.

In dispatch mode (a ``Dispatcher`` given) a run does not start where the message came in:
the task is recorded for a worker and the dispatcher invoked; the caller follows the task
like one run elsewhere. The worker claims it (``run_dispatched``) and runs it here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import structlog
from a2a.types import Message, Task, TaskArtifactUpdateEvent
from a2a.types.a2a_pb2 import ROLE_USER, TASK_STATE_SUBMITTED  # plain ints
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from a2a_gateway.endpoints.registry import EndpointRegistry, EndpointRuntime
from a2a_gateway.errors import GatewayError
from a2a_gateway.events import (
    GATEWAY_LOST,
    INTERRUPTED_STATES,
    copy_task,
    new_id,
    stamp,
    text_chunk,
)
from a2a_gateway.generation import (
    TaskGenerationMismatchError,
    generation_of,
    stamp_generation,
)
from a2a_gateway.live.hub import LiveHub, Subscription
from a2a_gateway.observability import tracing
from a2a_gateway.stores.base import TERMINAL_STATES, ConflictError, Scope, StoredTask
from a2a_gateway.tasks.conversation import Caller, Conversation
from a2a_gateway.tasks.dispatch import (
    DISPATCH_OWNER,
    DISPATCHED,
    NOT_CLAIMED,
    NOT_DISPATCHED,
    Dispatcher,
    DispatchError,
    TaskRef,
)
from a2a_gateway.tasks.kill_switch import cancel_in_store, running_tasks
from a2a_gateway.tasks.ownership import Ownership
from a2a_gateway.tasks.run import RunServices, SupersededError, TaskRun
from handlers.base import Handler, HandlerRequest, InputRejectedError

log = structlog.get_logger(__name__)

_ANSWER_ATTEMPTS = 3
"""Reads of a task an answer is recorded at, when the task changes under the first ones."""


class _AnswerRaced(Exception):
    """The task changed between the read and the write recording an answer: read it again."""


@dataclass(slots=True)
class SendOutcome:
    """What ``TaskEngine.send`` started: a local ``run``; or a ``task`` that is already
    the answer; or, with ``follow_version``, a task whose run lives on another replica
    (follow it through the store and the hub from that version on)."""

    run: TaskRun | None = None
    task: Task | None = None
    subscription: Subscription | None = None
    follow_version: int | None = None
    scope: Scope | None = None


@dataclass(frozen=True, slots=True)
class EngineLimits:
    cancel_wait_seconds: float = 10.0
    """How long a cancel waits for a handler that said its run ends with ``Canceled``."""
    max_task_history: int = 1000
    remote_poll_seconds: float = 1.0
    unseen_task_seconds: float = 1.0
    """How long a blocking task only its caller can know of may run unwritten
    (``TaskRun.unseen``)."""
    dispatch_claim_seconds: float = 300.0
    """How long a dispatched task waits for a worker's claim before recovery fails it."""
    long_poll_seconds: float = 25.0
    """How long a GetTask with ``currentGeneration`` waits for the task to change."""
    eager_blocking_runs: bool = True
    """A blocking send's run takes its first step before the send returns (Python 3.12+,
    ``TaskRun.start``'s ``eager``)."""


class TaskEngine:
    """Starts, continues, cancels and recovers task runs for every endpoint."""

    def __init__(
        self,
        services: RunServices,
        limits: EngineLimits = EngineLimits(),
        dispatcher: Dispatcher | None = None,
    ) -> None:
        self.services = services
        self.dispatcher = dispatcher
        """Where new runs go in dispatch mode; None: they start in this process."""
        self.store = services.store
        self.hub: LiveHub = services.hub
        self.ownership: Ownership = services.ownership
        self.conversation: Conversation = services.conversation
        self.limits = limits
        self.runs: dict[str, TaskRun] = {}
        self.stopping = False
        """Set when the gateway shuts down: it claims no other replica's tasks any more."""
        self.closing = asyncio.Event()
        """Set when the runs are handed over (``aclose``): waits on tasks run elsewhere end too."""
        self._released_elsewhere = asyncio.Event()
        self._task_locks: dict[str, asyncio.Lock] = {}
        self._endpoint_checks: set[asyncio.Task[None]] = set()

    @property
    def replica_id(self) -> str:
        return self.ownership.replica_id

    def _start(self, run: TaskRun, events: AsyncIterator[Any], *, eager: bool = False) -> TaskRun:
        self.runs[run.task.id] = run  # before the start: an eager run may be over after it
        run.start(events, eager=eager)
        return run

    def _run_done(self, run: TaskRun) -> None:
        if self.runs.get(run.task.id) is run:
            del self.runs[run.task.id]

    def _idle_run(
        self, runtime: EndpointRuntime, scope: Scope, request: HandlerRequest, stored: StoredTask
    ) -> TaskRun:
        return TaskRun.of_stored(
            self.services,
            runtime,
            runtime.require_handler(),
            scope,
            request,
            stored,
            on_done=self._run_done,
        )

    @contextlib.asynccontextmanager
    async def _task_lock(self, task_id: str) -> AsyncIterator[None]:
        """Serializes follow-up messages to one task within this replica."""
        lock = self._task_locks.setdefault(task_id, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and not getattr(lock, "_waiters", None):
                self._task_locks.pop(task_id, None)

    # sending -----------------------------------------------------------------------
    async def send(
        self, runtime: EndpointRuntime, scope: Scope, message: Message, *,
        streaming: bool, subscribe: bool, push_config: Any = None, caller: Caller | None = None,
        blocking: bool = False, if_generation_match: int | None = None,
    ) -> SendOutcome:
        """Start a task or continue one (see ``SendOutcome``). ``blocking``: the caller waits
        for the task's end (neither streaming nor ``return_immediately``).
        ``if_generation_match``: a task continued only at that generation
        (``TaskGenerationMismatchError`` otherwise, nothing written); a new task ignores it."""
        handler = runtime.require_handler()
        caller = caller or Caller(scope.principal)
        if message.task_id:
            return await self._continue(
                runtime, scope, message, caller, streaming=streaming, subscribe=subscribe,
                if_generation_match=if_generation_match,
            )
        new_context = not message.context_id
        task = Task(id=new_id(), context_id=message.context_id or new_id())
        message.task_id, message.context_id = task.id, task.context_id
        task.status.state = TASK_STATE_SUBMITTED
        stamp(task.status.timestamp)
        task.history.append(message)
        message = task.history[-1]  # the task's copy: the request's can go (an idle stream)
        request = await self.conversation.request(
            handler, scope, task, message, caller, streaming=streaming, new_context=new_context
        )
        # no one but this caller can learn the task's id before the reply: see TaskRun.unseen
        unseen = blocking and not subscribe and push_config is None and self.dispatcher is None
        run = TaskRun(
            self.services,
            runtime,
            handler,
            scope,
            request,
            task,
            push_config=push_config,
            on_done=self._run_done,
            unseen=unseen,
            unseen_seconds=self.limits.unseen_task_seconds,
            new_context=new_context,
        )
        if self.dispatcher is not None:
            return await self._dispatch(run, "run")
        # a blocking caller's run starts at once (an echo is over before this returns); a
        # stream's waits for its subscription, taken below
        self._start(run, handler.run(request), eager=unseen and self.limits.eager_blocking_runs)
        sub = self.hub.subscribe(task.id) if subscribe else None  # from the run's generation 1
        return SendOutcome(run=run, subscription=sub)

    async def _continue(
        self, runtime: EndpointRuntime, scope: Scope, message: Message, caller: Caller, *,
        streaming: bool, subscribe: bool, if_generation_match: int | None,
    ) -> SendOutcome:
        async with self._task_lock(message.task_id):
            for _ in range(_ANSWER_ATTEMPTS):
                with contextlib.suppress(_AnswerRaced):
                    return await self._answer(
                        runtime, scope, message, caller, streaming=streaming,
                        subscribe=subscribe, if_generation_match=if_generation_match,
                    )
        raise UnsupportedOperationError(
            f"Task {message.task_id} keeps changing; send the message again"
        )

    async def _answer(
        self, runtime: EndpointRuntime, scope: Scope, message: Message, caller: Caller, *,
        streaming: bool, subscribe: bool, if_generation_match: int | None,
    ) -> SendOutcome:
        """One attempt of ``_continue`` (``_AnswerRaced``: the task changed meanwhile)."""
        handler = runtime.require_handler()
        stored = await self.store.get_task(scope, message.task_id)
        if stored is None:
            raise TaskNotFoundError(f"Task {message.task_id} not found")
        live = self.runs.get(message.task_id)
        if live is not None and (live.version is None or stored.version <= live.version):
            task, current = live.task, live.generation
        else:  # no run here, or another replica recorded an answer since the run's last write
            task, current = stored.task, generation_of(stored.task)
        if if_generation_match is not None and current != if_generation_match:
            raise TaskGenerationMismatchError.of(task.id, if_generation_match, current)
        self._check_answerable(task, message)
        message.context_id = task.context_id
        request = await self.conversation.request(
            handler, scope, task, message, caller, streaming=streaming,
            run_ref=stored.run_ref, pending=stored.run_state.get("pending_input"),
        )
        sub = self.hub.subscribe(task.id) if subscribe else None
        outcome = SendOutcome()
        try:
            if live is not None:
                outcome = await self._answer_live(live, request, message, sub)
            else:
                run = self._idle_run(runtime, scope, request, stored)
                # recorded before the handler gets it when another replica may record (or
                # answer) too: the write at the version read is what makes one answer win
                record = self.ownership.owned_elsewhere(stored) or if_generation_match is not None
                outcome = await self._answer_idle(run, stored, request, message, sub, record)
            return outcome
        finally:
            if sub is not None and outcome.subscription is not sub:
                sub.close()  # answered at once, or followed elsewhere: not needed

    def _check_answerable(self, task: Task, message: Message) -> None:
        state = task.status.state
        if state in TERMINAL_STATES:
            raise UnsupportedOperationError(
                f"Task {task.id} is in a terminal state and accepts no more messages"
            )
        if message.context_id and message.context_id != task.context_id:
            raise InvalidParamsError("contextId does not match the task's contextId")
        if state not in INTERRUPTED_STATES:
            raise UnsupportedOperationError(
                f"Task {task.id} is still working; send a message when it asks for input"
            )
        if len(task.history) >= self.limits.max_task_history:
            raise InvalidParamsError(
                f"Task {task.id} holds {len(task.history)} messages, the max_task_history "
                "limit: go on in a new task of the same context"
            )

    async def _answer_live(
        self, run: TaskRun, request: HandlerRequest, message: Message, sub: Subscription | None,
    ) -> SendOutcome:
        """The handler's iterator is still open here: WORKING first, then the answer goes
        to the handler, and the events that follow arrive on the same run
        (``_AnswerRaced``: another replica recorded an answer first)."""
        run.begin_turn()
        try:
            asked = await run.take_answer(request, message)
        except SupersededError:
            return SendOutcome(task=await self._final_task(run))
        except ConflictError:  # another replica recorded an answer first
            raise _AnswerRaced from None
        try:
            continued = await run.handler.resume(request)
        except InputRejectedError as exc:
            return SendOutcome(task=await run.refuse_answer(exc, message, asked))
        if continued and not run.exhausted:
            run.answer_delivered()
            return SendOutcome(run=run, subscription=sub)
        await run.stop()  # the handler starts over with a fresh run
        fresh = self._start(run.following(request), run.handler.run(request))
        return SendOutcome(run=fresh, subscription=sub)

    async def _answer_idle(
        self, run: TaskRun, stored: StoredTask, request: HandlerRequest, message: Message,
        sub: Subscription | None, record: bool,
    ) -> SendOutcome:
        """No iterator runs here: the answer goes to the handler, then a fresh run (or a
        re-attached one) carries on, unless another replica owns the run. ``record``: the
        answer is recorded first (``TaskRun.record_answer``, ``_AnswerRaced`` when the task
        changed since ``stored`` was read), keeping the owner's lease if another replica
        owns the run."""
        elsewhere = self.ownership.owned_elsewhere(stored)
        asked = None
        if record:
            try:
                asked = await run.record_answer(
                    message, (stored.owner, stored.lease_until) if elsewhere else None
                )
            except ConflictError:
                raise _AnswerRaced from None
        try:
            continued = await run.handler.resume(request)
        except InputRejectedError as exc:
            return SendOutcome(task=await run.refuse_answer(exc, message, asked))
        except Exception:
            if asked is not None:
                with contextlib.suppress(Exception):
                    await run.withdraw_answer(message, asked)
            raise
        if continued and elsewhere:
            # the run goes on at its owner, which records what follows
            return SendOutcome(
                task=copy_task(run.task), follow_version=run.version, scope=run.scope
            )
        if asked is None:
            run.task.history.append(message)
        if self.dispatcher is not None:
            return await self._dispatch(run, "reattach" if continued else "run")
        try:
            await run.mark_working()
        except SupersededError:
            return SendOutcome(task=await self._final_task(run))
        events = run.handler.reattach(request) if continued else run.handler.run(request)
        return SendOutcome(run=self._start(run, events), subscription=sub)

    async def _dispatch(self, run: TaskRun, action: str) -> SendOutcome:
        """Record the task for a worker that starts ``action`` (``run`` or ``reattach``) and
        invoke it; the caller follows the task. A failed invoke fails the task (and the
        caller gets the retriable ``DispatchError``)."""
        request = run.request
        dispatched = {
            "action": action,
            "streaming": request.streaming,
            "pending": request.pending_input,
            "extensions": sorted(request.extensions),
            "headers": {
                **request.headers,
                **tracing.current_headers(),
            },  # the worker continues this trace
        }
        try:
            await run.record_for_worker(
                dispatched, time.time() + self.limits.dispatch_claim_seconds
            )
        except SupersededError:
            return SendOutcome(task=await self._final_task(run))
        try:
            await self.dispatcher.dispatch(TaskRef.of(run.scope, run.task.id))  # type: ignore[union-attr]
        except DispatchError:
            log.warning("task_dispatch_failed", task_id=run.task.id)
            with contextlib.suppress(SupersededError):
                await run.fail(NOT_DISPATCHED)
            raise
        return SendOutcome(task=copy_task(run.task), follow_version=run.version, scope=run.scope)

    async def run_dispatched(self, registry: EndpointRegistry, ref: TaskRef) -> str:
        """Worker: claim a dispatched task and run it here until its run ends (``ran``). A
        task that does not wait for a worker (claimed by another delivery, ended) is
        ``duplicate``, a missing one ``not_found``; neither is touched."""
        scope = ref.scope
        stored = await self.store.get_task(scope, ref.task_id)
        if stored is None:
            return "not_found"
        dispatched = stored.run_state.get(DISPATCHED)
        if (
            dispatched is None
            or stored.owner != DISPATCH_OWNER
            or stored.task.status.state in TERMINAL_STATES
        ):
            return "duplicate"
        runtime = await registry.get(scope.endpoint_id)
        handler = runtime.require_handler()
        caller = Caller(
            scope.principal,
            frozenset(dispatched.get("extensions") or ()),
            dispatched.get("headers") or {},
        )
        request = await self._request_of_stored(
            handler,
            scope,
            stored,
            caller,
            streaming=bool(dispatched.get("streaming")),
            pending=dispatched.get("pending"),
        )
        run = self._idle_run(runtime, scope, request, stored)
        try:
            await run.claim()
        except ConflictError:
            return "duplicate"
        events = (
            handler.reattach(request)
            if dispatched.get("action") == "reattach"
            else handler.run(request)
        )
        with tracing.continuing(request.headers):  # the caller's trace, not the delivering event's
            self._start(run, events)
        await run.wait_done()
        return "ran"

    async def _request_of_stored(
        self,
        handler: Handler,
        scope: Scope,
        stored: StoredTask,
        caller: Caller,
        *,
        streaming: bool,
        pending: dict[str, Any] | None,
    ) -> HandlerRequest:
        """The request of a stored task's last user message, to run or re-attach it here."""
        users = [m for m in stored.task.history if m.role == ROLE_USER]
        return await self.conversation.request(
            handler, scope, stored.task, users[-1] if users else Message(), caller,
            streaming=streaming, run_ref=stored.run_ref, pending=pending,
        )

    async def sweep(self, registry: EndpointRegistry) -> None:
        """Worker: what a replica's lease loop does for others, once — fail the dispatched
        tasks no worker claimed in time, take over the tasks of lost owners — and wait for
        the runs re-attached here to end."""
        runs = await self.recover_expired(registry)
        await asyncio.gather(*(run.wait_done() for run in runs))

    async def _final_task(self, run: TaskRun) -> Task:
        stored = await self.store.get_task(run.scope, run.task.id)
        return stored.task if stored is not None else copy_task(run.task)

    # cancel ---------------------------------------------------------------------------
    async def cancel(
        self, runtime: EndpointRuntime, scope: Scope, task_id: str, reason: str = "canceled"
    ) -> Task:
        """End the task CANCELED with ``reason`` as its status message, stopping its backend
        run (the handler's cancel) here or, through the live hub, on the replica running it."""
        stored = await self.store.get_task(scope, task_id)
        if stored is None:
            raise TaskNotFoundError(f"Task {task_id} not found")
        if stored.task.status.state in TERMINAL_STATES:
            raise TaskNotCancelableError(f"Task {task_id} is already in a terminal state")
        run = self.runs.get(task_id)
        if run is None and runtime.handler is None:
            # a disabled or deleted endpoint: no handler here to end it through, so it is
            # ended in the store; its owner stops the backend run with its own handler
            await cancel_in_store(self.store, scope, stored, reason, runtime.endpoint.metadata)
        else:
            if run is None:
                # idle, or running on another replica: that owner notices the terminal
                # state (hub message or its next lease check) and stops its run
                run = self._idle_run(runtime, scope, self._stored_request(scope, stored), stored)
            with contextlib.suppress(SupersededError):
                await run.cancel(self.limits.cancel_wait_seconds, reason)
        if stored.owner and stored.owner != self.replica_id:
            await self.hub.send_control(stored.owner, "cancel", task_id)
        final = await self.store.get_task(scope, task_id)
        return final.task if final else stored.task

    async def cancel_running(
        self, runtime: EndpointRuntime, reason: str, *, principal: Scope | None = None
    ) -> list[str]:
        """The kill switch: cancel every non-terminal task of the runtime's endpoint (only the
        tasks of ``principal``'s tenant and principal, if given) as ``cancel`` does, wherever
        it runs; return the ids of the tasks this call ended."""
        ended: list[str] = []
        async for scope, task in running_tasks(self.store, runtime.endpoint.id, principal):
            with contextlib.suppress(TaskNotFoundError, TaskNotCancelableError):
                await self.cancel(runtime, scope, task.id, reason)
                ended.append(task.id)
        return ended

    @staticmethod
    def _stored_request(
        scope: Scope, stored: StoredTask, message: Message | None = None
    ) -> HandlerRequest:
        """The request of a task read from the store, for the handler's cancel."""
        task = stored.task
        return HandlerRequest(
            task_id=task.id, context_id=task.context_id, message=message or Message(), text="",
            run_ref=stored.run_ref, endpoint_id=scope.endpoint_id, tenant=scope.tenant,
            principal=scope.principal,
        )

    # what the live hub asks ----------------------------------------------------------
    def text_so_far(self, task_id: str) -> TaskArtifactUpdateEvent | None:
        """The response text a local run streamed so far, as one chunk (for a late listener)."""
        run = self.runs.get(task_id)
        if run is None or run.finished or not run.artifact_id or not run.text_so_far:
            return None
        chunk = text_chunk(run.task, run.artifact_id, run.text_so_far, append=False)
        stamp_generation(chunk, run.generation)  # it stands for every chunk so far
        return chunk

    async def handle_control(self, command: str, task_id: str) -> None:
        """A command from another replica: about a task this replica may run, or
        ``released`` (a stopping replica handed its tasks over: look for them now)."""
        if command == "released":
            self._released_elsewhere.set()
            return
        run = self.runs.get(task_id)
        if run is None:
            return
        if command == "cancel":
            stored = await self.store.get_task(run.scope, task_id)
            if stored is not None and stored.task.status.state in TERMINAL_STATES:
                await run.superseded(stored.task)

    # ownership -----------------------------------------------------------------------
    async def next_ownership_check(self, interval: float) -> None:
        """Wait ``interval`` seconds, or less when another replica released its tasks."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval):  # not wait_for: it can lose the loop's cancel
                await self._released_elsewhere.wait()
        self._released_elsewhere.clear()

    async def keep_ownership(self, registry: EndpointRegistry) -> None:
        """One lease interval: renew this replica's leases, stop runs another replica
        ended, take over tasks whose owner went away."""
        await self.ownership.renew(
            [tid for tid, run in self.runs.items() if run.version is not None]
        )
        await self.check_superseded()
        await self.recover_expired(registry)

    async def check_superseded(self, endpoint_id: str | None = None) -> None:
        """Stop local runs whose task another replica ended (e.g. canceled there); only the
        runs of ``endpoint_id``, if given."""
        for task_id, run in list(self.runs.items()):
            if run.version is None or run.finished or endpoint_id not in (
                None, run.scope.endpoint_id
            ):
                continue
            stored = await self.store.get_task(run.scope, task_id)
            if stored is not None and stored.task.status.state in TERMINAL_STATES:
                await run.superseded(stored.task)

    def endpoint_changed(self, endpoint_id: str | None) -> None:
        """Another replica or the CLI changed the endpoint's row (the live hub's notice). The
        CLI's kill switch ends the endpoint's tasks in the store and then announces such a
        change: this replica's runs of it whose task has ended stop now, not at the next lease
        check."""
        if endpoint_id is None or self.stopping or not any(
            run.scope.endpoint_id == endpoint_id for run in self.runs.values()
        ):
            return
        check = asyncio.create_task(self._check_endpoint_runs(endpoint_id))
        self._endpoint_checks.add(check)
        check.add_done_callback(self._endpoint_checks.discard)

    async def _check_endpoint_runs(self, endpoint_id: str) -> None:
        try:
            await self.check_superseded(endpoint_id)
        except Exception as exc:  # the lease check looks again
            log.warning("endpoint_runs_check_failed", endpoint_id=endpoint_id,
                        error=str(exc) or type(exc).__name__)

    async def recover_expired(self, registry: EndpointRegistry) -> list[TaskRun]:
        """Take over tasks whose owner stopped renewing its lease: re-attach to the backend
        run where the handler can, otherwise fail them with "gateway instance lost" (or, for
        a dispatched task no worker claimed, with that reason). Returns the re-attached runs."""
        if self.stopping:
            return []
        runs = []
        for item in await self.ownership.claim_expired():
            try:
                run = await self._recover(item.scope, item.stored, registry)
            except Exception:
                log.exception("task_recovery_failed", task_id=item.stored.task.id)
                continue
            if run is not None:
                runs.append(run)
        return runs

    async def _recover(
        self, scope: Scope, stored: StoredTask, registry: EndpointRegistry
    ) -> TaskRun | None:
        task = stored.task
        try:
            runtime: EndpointRuntime | None = await registry.get(scope.endpoint_id)
        except GatewayError:
            runtime = None
        handler = runtime.handler if runtime is not None else None
        unclaimed = stored.run_state.pop(DISPATCHED, None) is not None
        if (
            runtime is not None
            and handler is not None
            and handler.supports_reattach
            and stored.run_ref
            and not unclaimed
        ):
            request = await self._request_of_stored(
                handler,
                scope,
                stored,
                Caller(scope.principal),
                streaming=False,
                pending=stored.run_state.get("pending_input"),
            )
            run = self._start(
                self._idle_run(runtime, scope, request, stored), handler.reattach(request)
            )
            log.info("task_reattached", task_id=task.id)
            return run
        # an endpoint that can no longer be served still gets its task ended, by a run
        # without a handler (and without push notifications)
        run = TaskRun.of_stored(
            self.services,
            runtime or EndpointRuntime.gone(scope.endpoint_id),
            handler,
            scope,
            self._stored_request(scope, stored),
            stored,
        )
        with contextlib.suppress(SupersededError):
            await run.fail(NOT_CLAIMED if unclaimed else GATEWAY_LOST)
        log.warning(
            "task_failed_not_claimed" if unclaimed else "task_failed_gateway_lost", task_id=task.id
        )
        return None

    async def aclose(self) -> None:
        """Hand every run over and end its lease now, so another replica (or this one,
        restarted) takes it over at once instead of after the lease time."""
        self.stopping = True
        self.closing.set()
        for check in list(self._endpoint_checks):
            check.cancel()
        runs = list(self.runs.values())
        for run in runs:
            await run.hand_over()
        owned = [run.task.id for run in runs if run.version is not None]  # unseen ones written now
        try:
            await self.ownership.release(owned)
        except Exception:
            log.warning("lease_release_failed", tasks=len(owned))
            return
        if owned:
            await self.hub.tell_all("released")

