"""One run (``TaskRun``): the only writer of its task while a run of it is on this replica.

A run maps one handler iterator's events to A2A task states and artifacts (through
``a2a_gateway.events``), and carries out what the engine asks of the task: take an
answer, refuse one, cancel, fail it as lost, stop because another replica ended it.
Every change is applied to the task in memory, then split in two paths:

* the live path — text and artifact chunks, progress notes and every state change
  are published on the ``LiveHub`` to the task's SSE clients; chunks stop there;
* the durable path — the task is written to the store (``_write``, the one write
  site) only when its state changes (created/WORKING, INPUT_REQUIRED or
  AUTH_REQUIRED, terminal), so a reply of a thousand tokens costs a handful of
  writes. An unseen task (``TaskRun.unseen``: only its blocked caller can learn its id,
  at the reply) is written first when it must be — a backend run to re-attach, a
  question, a hand-over — else once, created in its final state. The stream's last
  chunk appends nothing when the final artifact is the streamed text, else it replaces
  the chunks with the final artifact (``_last_chunk``), so what a streaming client
  rebuilds equals what the store holds.

A run gets its collaborators (``RunServices``) and an ``on_done`` callback, never the
engine. It belongs to no request: closing a client stream never cancels it.

The one other writer of a task is ``tasks.kill_switch.cancel_in_store``, for a task no run of
this process can drive (the CLI's kill switch, an endpoint with no handler left here).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from a2a.helpers.proto_helpers import get_message_text
from a2a.types import Artifact, Message, Part, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus
from a2a.types.a2a_pb2 import (  # plain ints: the enum wrappers resolve names per access
    ROLE_USER,
    TASK_STATE_AUTH_REQUIRED,
    TASK_STATE_CANCELED,
    TASK_STATE_COMPLETED,
    TASK_STATE_FAILED,
    TASK_STATE_INPUT_REQUIRED,
    TASK_STATE_REJECTED,
    TASK_STATE_SUBMITTED,
    TASK_STATE_WORKING,
)

from a2a_gateway.endpoints.backend_health import BackendHealth
from a2a_gateway.endpoints.registry import EndpointRuntime
from a2a_gateway.events import (
    GATEWAY_STOPPING,
    INTERRUPTED_STATES,
    RESPONSE_ARTIFACT,
    TextChunks,
    agent_message,
    artifact_event,
    copy_task,
    new_id,
    new_status,
    reply_message,
    status_event,
)
from a2a_gateway.generation import generation_of, set_generation, stamp_generation
from a2a_gateway.governance.usage import RUN_STATE_KEY, UsageStart, ending_now, token_counts
from a2a_gateway.live.hub import LiveHub
from a2a_gateway.observability.metrics import MESSAGES, TASKS_STARTED, task_ended
from a2a_gateway.stores.base import (
    TERMINAL_STATES,
    ConflictError,
    Scope,
    Store,
    StoredTask,
    StoreUnavailableError,
    UsageRecord,
)
from a2a_gateway.tasks.conversation import Conversation
from a2a_gateway.tasks.dispatch import DISPATCH_OWNER, DISPATCHED
from a2a_gateway.tasks.light_event import LightEvent
from a2a_gateway.tasks.ownership import Ownership
from handlers.base import (
    ArtifactDelta,
    AuthRequired,
    Canceled,
    Completed,
    Failed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    InputRejectedError,
    InputRequired,
    Progress,
    Rejected,
    Reply,
    RunStarted,
    SessionUpdate,
    TextDelta,
)

log = structlog.get_logger(__name__)


def _holds_unseen(stored: Task, task: Task) -> bool:
    """Whether ``stored`` holds a message ``task`` lacks (recorded by another replica)."""
    seen = {message.message_id for message in task.history}
    return any(message.message_id not in seen for message in stored.history)


class StartingRuns:
    """How many runs have started and not applied their first event yet. Meanwhile the
    runs already going leave loop turns to them (``_TURNS_FOR_STARTS``): a new stream's first
    delta does not wait behind the batches of the streams already going."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


@dataclass(frozen=True, slots=True)
class RunServices:
    """What every run works with (one set per gateway)."""

    store: Store
    hub: LiveHub
    push: Any
    """``tasks.push.PushNotifier``: ``save_inline_config`` and ``notify``."""
    ownership: Ownership
    conversation: Conversation
    health: BackendHealth
    """Told how each handler run ended (``_backend_outcome``)."""
    starting: StartingRuns = field(default_factory=StartingRuns)


_IDLE_WRITE_ATTEMPTS = 5

PARTIAL_TEXT = "partial_text"
"""``run_state`` key: the text a run streamed before its replica stopped (``hand_over``)."""


_NO_WRITE_BEFORE_THE_END = (
    TextDelta,
    ArtifactDelta,
    Progress,
    Completed,
    Failed,
    Rejected,
    Canceled,
)
"""Events an unseen task's run applies without creating the task first (``TaskRun.unseen``)."""


EAGER_TASKS = sys.version_info >= (3, 12)
"""This Python can run a new task's first step at once, in the task (``eager_start``): see
``TaskRun.start``."""

_EVENTS_PER_TURN = 32
"""A run gives the other runs and streams a turn of the event loop after this many events."""

_TURNS_FOR_STARTS = 3
"""While a run is starting (``StartingRuns``), a run that ends a batch of events lets this
many more loop turns go by before its next one. The starting run's steps (its request, its
creation in the store, its first event) take a turn each: they wait behind three cheap
steps of each running stream, not behind a batch of 32 events. The batches stay whole, so
an SSE write still carries 32 events: yielding after every event instead did as well for a
first delta but cost a fifth of the throughput of 100 chat streams (bench/README.md)."""


_BACKEND_ANSWERED = frozenset({TASK_STATE_COMPLETED, TASK_STATE_REJECTED, TASK_STATE_INPUT_REQUIRED,
                               TASK_STATE_AUTH_REQUIRED})


class OnConflict(enum.Enum):
    """What a newer version of the task in the store means to a write of this run."""

    MINE = enum.auto()
    """A write of this run landed unseen (e.g. interrupted by a cancel): this run's state
    wins, written over it once more."""
    RELOAD = enum.auto()
    """An idle run ending the task: the task is reloaded and the change applied again."""
    KEEP_NEWER = enum.auto()
    """The run ended waiting for an answer: the newer version (an answer) stays."""
    RAISE = enum.auto()
    """A worker's claim: another delivery claimed the task first (``ConflictError``)."""
    STILL_ASKED = enum.auto()
    """An answer recorded for a worker: go on while the task still waits for input."""
    FIRST_ANSWER = enum.auto()
    """An answer taken by the run: as ``MINE``, unless another replica recorded an answer
    first (``record_answer``; a message the run lacks): then ``ConflictError``."""

    @property
    def attempts(self) -> int:
        """Writes tried before giving up (the others end at the first conflict)."""
        return {OnConflict.MINE: 2, OnConflict.FIRST_ANSWER: 2, OnConflict.STILL_ASKED: 3}.get(
            self, 1
        )


class SupersededError(Exception):
    """The task changed under this run (e.g. canceled elsewhere): stop driving it."""


class _Reloaded(Exception):
    """An idle run's write met a newer version: the task was reloaded; apply the change again."""


class TaskNotWrittenError(StoreUnavailableError):
    """The store refused a task write with an error other than a conflict or an outage (e.g.
    a value the database cannot hold): the run ends as on a lost store, and its caller is
    answered with the retriable store error, never with a task the store does not hold."""


class TaskRun:
    """One task, driven by one handler iterator (or idle, between two of them)."""

    # every open stream and blocking send holds a run: slots keep it ~1.3 KB smaller than a dict
    __slots__ = (
        "_services", "_store", "_hub", "runtime", "handler", "scope", "request", "task",
        "version", "generation", "run_state", "run_ref", "initial_task", "reply", "created",
        "settled", "finished", "store_error", "unseen", "_unseen_seconds", "_unseen_until",
        "_new_context", "_push_config", "_on_done", "_events", "_driver", "_iterator_done",
        "_answer_taken", "_owns", "_owners_lease", "_write_lock", "_handing_over", "_starting",
        "_text", "_artifact_id", "_chunks", "_session_updates", "_tokens",
    )

    def __init__(
        self,
        services: RunServices,
        runtime: EndpointRuntime,
        handler: Handler | None,
        scope: Scope,
        request: HandlerRequest,
        task: Task,
        *,
        version: int | None = None,
        run_state: dict[str, Any] | None = None,
        push_config: Any = None,
        on_done: Callable[[TaskRun], None] | None = None,
        unseen: bool = False,
        unseen_seconds: float = 1.0,
        new_context: bool = False,
    ) -> None:
        self._services = services
        self._store = services.store
        self._hub = services.hub
        self.runtime = runtime
        self.handler = handler
        """The instance that started the run: cancel and resume go to it (None only for a
        task of an endpoint that can no longer be served, which can just be failed)."""
        self.scope = scope
        self.request = request
        self.task = task
        self.version = version
        self.generation = generation_of(task) or 1
        """The task's generation (``a2a_gateway.generation``) with every event so far. ``task``
        carries it too, except for the text chunks since its last state change: setting it
        costs a pass over the whole task, so ``_write`` and ``snapshot`` bring it up to date."""
        if version is None:
            set_generation(task, self.generation)
        self.run_state = run_state if run_state is not None else {}
        if version is None and RUN_STATE_KEY not in self.run_state:  # a new task: usage starts
            self.run_state[RUN_STATE_KEY] = UsageStart(
                time.time(), request.key_id, request.key_name
            ).as_json()
        self.run_ref = request.run_ref
        self.initial_task: Task | None = copy_task(task) if request.streaming else task
        """The task a stream of this run starts from: as it stood when the run took its
        request (``_take_initial_task``); None once that stream took it
        (``pop_initial_task``)."""
        self.reply: Message | None = None
        self.created = LightEvent()  # no waiter deque per run (tasks.light_event)
        self.settled = LightEvent()
        self.finished = False
        self.store_error: StoreUnavailableError | None = None
        """Set when the store could not be written: the caller answers with a retriable error."""
        self.unseen = unseen
        """No one but the caller waiting for the reply can learn the task's id before it is
        written (a blocking send: no stream, no push config, no dispatch): deltas, progress
        and the end need no write before the last, so a short run is written once. What
        one would need to see the task earlier forces its creation (``_ensure_created``), and
        so does an event after ``unseen_seconds`` of run. Trade-off: until then,
        GetTask/ListTasks and the event feed do not know the task, and a replica lost
        meanwhile leaves no record of it (its caller's connection drops with it; a backend
        run that could be re-attached was written at ``RunStarted``)."""
        self._unseen_seconds = unseen_seconds
        self._unseen_until = 0.0
        self._new_context = new_context
        self._push_config = push_config
        self._on_done = on_done
        self._events: AsyncIterator[HandlerEvent] | None = None
        self._driver: asyncio.Task[None] | None = None
        self._iterator_done = False
        self._answer_taken = False
        """An answer arrived while the iterator was open: its end is not the task's end."""
        self._owns = False
        """Whether this run drives (or is about to drive) an iterator, so owns the task."""
        self._owners_lease: tuple[str | None, float | None] | None = None
        """The owner and lease this idle run's writes keep (``record_answer`` for a task
        whose run is on another replica); None: the lease is this run's (``_lease``)."""
        self._write_lock = asyncio.Lock()
        self._handing_over = False
        self._starting = False
        self._text: list[str] = []
        self._artifact_id: str | None = None
        self._chunks: TextChunks | None = None
        self._session_updates: dict[str, Any] = {}
        self._tokens = (0, 0)
        """(input, output) tokens the backend reported with its answer."""
        if version is not None:
            self.created.set()

    @classmethod
    def of_stored(
        cls,
        services: RunServices,
        runtime: EndpointRuntime,
        handler: Handler | None,
        scope: Scope,
        request: HandlerRequest,
        stored: StoredTask,
        on_done: Callable[[TaskRun], None] | None = None,
    ) -> TaskRun:
        """An idle run of a task read from the store (to answer, cancel or recover it)."""
        return cls(services, runtime, handler, scope, request, stored.task, version=stored.version,
                   run_state=dict(stored.run_state), on_done=on_done)

    def following(self, request: HandlerRequest) -> TaskRun:
        """A fresh run of this task for ``request`` (the handler starts over)."""
        set_generation(self.task, self.generation)
        return TaskRun(self._services, self.runtime, self.handler, self.scope, request, self.task,
                       version=self.version, run_state=self.run_state, on_done=self._on_done)

    # lifecycle ---------------------------------------------------------------
    def start(self, events: AsyncIterator[HandlerEvent], *, eager: bool = False) -> None:
        """Drive ``events`` in a task of the run's own. ``eager`` (Python 3.12+, else
        ignored): that task's first step runs now, before ``start`` returns, as the task
        itself (``asyncio.current_task()`` is the driver, as in any step). A run whose
        handler never waits (an echo, a cached reply) is then over when ``start`` returns:
        its caller finds it settled, with no loop turn and no wake-up between. Everything
        else is as for a run started later: the driver task exists, and a cancel, a stop
        or a hand-over reaches the run through it."""
        self._events = events
        self._owns = True
        self._unseen_until = time.monotonic() + self._unseen_seconds
        self.runtime.run_started()
        if not self._starting:  # from now: the runs going leave turns to it
            self._services.starting.count += 1
            self._starting = True
        name = f"task-run-{self.task.id}"
        if eager and EAGER_TASKS:
            self._driver = asyncio.Task(  # type: ignore[call-arg]
                self._drive(), loop=asyncio.get_running_loop(), name=name, eager_start=True)
        else:
            self._driver = asyncio.create_task(self._drive(), name=name)

    def _started(self) -> None:
        """The run applied its first event (or ended): it no longer counts as starting."""
        if self._starting:
            self._starting = False
            self._services.starting.count -= 1

    def _take_initial_task(self) -> None:
        self.initial_task = copy_task(self.task) if self.request.streaming else self.task

    def pop_initial_task(self) -> Task:
        """The task the stream of this run's request starts from, given once: an open stream's
        run keeps no copy of it (about 1.2 KB of protobuf memory per stream)."""
        task, self.initial_task = self.initial_task, None
        return task  # type: ignore[return-value]

    def live_task(self) -> Task:
        """A copy of the task with the text streamed so far as its response artifact, at
        the run's generation (what a long-poll answers while the run goes on)."""
        task = copy_task(self.task)
        if self._artifact_id is not None and not self.finished:
            artifact = next((a for a in task.artifacts if a.artifact_id == self._artifact_id),
                            None) or task.artifacts.add(artifact_id=self._artifact_id)
            artifact.name = RESPONSE_ARTIFACT
            del artifact.parts[:]
            artifact.parts.add(text=self.text_so_far)
        set_generation(task, self.generation)
        return task

    def begin_turn(self) -> asyncio.Event:
        """A new wait for the next terminal or interrupted state."""
        self.settled = asyncio.Event()
        return self.settled

    @property
    def text_so_far(self) -> str:
        return "".join(self._text)

    @property
    def artifact_id(self) -> str | None:
        return self._artifact_id

    def add_done_callback(self, callback: Callable[[TaskRun], None]) -> None:
        """Call ``callback(self)`` once the run stops driving its handler (at once if it
        drives none)."""
        if self._driver is None or self._driver.done():
            callback(self)
        else:
            self._driver.add_done_callback(lambda _: callback(self))

    async def wait_done(self, timeout: float | None = None) -> bool:
        if self._driver is None:
            return True
        done, _ = await asyncio.wait({self._driver}, timeout=timeout)
        return bool(done)

    async def stop(self) -> None:
        """Stop driving the iterator (the task keeps its state)."""
        if self._driver is not None and not self._driver.done():
            self._driver.cancel()
            await asyncio.wait({self._driver})  # a cancel of the caller itself still propagates
        self._started()  # a driver canceled before its first step ran none of ``_drive``

    async def hand_over(self) -> None:
        """The gateway stops: stop driving; keep the text streamed so far with the task (the
        replica that takes over fails it with that text, or re-attaches and streams again);
        end the task's streams with a status event of its current state that says why; and
        answer blocking callers with the task as it stands. The task stays owned by this
        replica until the engine releases the lease."""
        self._handing_over = True  # its callers are answered at the end, after the writes
        await self.stop()
        if self.version is None and self.unseen and not self.finished:
            try:  # the replica that takes the task over fails it, or the caller asks again
                await self._ensure_created()
            except Exception:
                log.warning("unseen_task_not_saved", task_id=self.task.id)
        if self.version is not None and not self.finished:
            self._mutated()  # the status event below that says this replica stops
            if self.text_so_far:
                self.run_state[PARTIAL_TEXT] = {
                    "artifact_id": self._artifact_id,
                    "text": self.text_so_far,
                }
                try:
                    await self._write(keep_lease=True)
                except Exception:
                    log.warning("partial_text_not_saved", task_id=self.task.id)
            self._publish_status(GATEWAY_STOPPING)
        self._hub.end(self.task.id)
        self.created.set()
        self.settled.set()

    async def _drive(self) -> None:
        # this driver runs in its own copy of the request's context
        structlog.contextvars.bind_contextvars(
            task_id=self.task.id, endpoint_id=self.scope.endpoint_id
        )
        assert self._events is not None
        driver, count, starting = asyncio.current_task(), 0, self._services.starting
        try:
            async for event in self._events:
                if driver is not None and driver.cancelling():
                    # a stop the handler swallowed (Python 3.11's asyncio.wait_for loses a
                    # cancel that arrives together with its result): no event after a stop
                    raise asyncio.CancelledError
                await self._apply(event)
                if self._starting:
                    self._started()
                if self.finished:
                    break
                count += 1
                if count % _EVENTS_PER_TURN == 0:
                    await asyncio.sleep(0)  # a handler that never waits must not hold the loop
                    for _ in range(_TURNS_FOR_STARTS if starting.count else 0):
                        await asyncio.sleep(0)
            else:
                await self._exhausted()
            self._backend_outcome(None)
        except SupersededError:
            log.info("task_superseded")
        except StoreUnavailableError as exc:
            await self._store_lost(exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("handler_failed")
            self._backend_outcome(exc)
            await self._safe_fail("the agent failed unexpectedly")
        finally:
            self._started()
            await self._close_events()
            self.runtime.run_ended()
            if self._on_done is not None:
                self._on_done(self)
            if self.finished and self.reply is None:
                self._hub.end(self.task.id)
            if not self._handing_over:
                self.created.set()
                self.settled.set()

    def _backend_outcome(self, error: Exception | None) -> None:
        """Tell the endpoint's backend health how the handler's run ended, once per run: an
        answer, a question or a refusal is a success; a FAILED task or ``error`` a failure. A
        cancel, a stop or a lost store says nothing of the backend."""
        health, endpoint_id = self._services.health, self.scope.endpoint_id
        state, secrets = self.task.status.state, self.runtime.secrets
        if error is not None:
            health.failed(endpoint_id, error, secrets)
        elif state == TASK_STATE_FAILED:
            health.failed(
                endpoint_id,
                get_message_text(self.task.status.message) or "the task failed",
                secrets,
            )
        elif self.reply is not None or state in _BACKEND_ANSWERED:
            health.succeeded(endpoint_id)

    async def _store_lost(self, exc: StoreUnavailableError) -> None:
        """The store went away mid-run: stop driving. A created task keeps its lease, which
        runs out, and a replica re-attaches (or fails it) once the store is back; a task
        never created cannot be recovered, so its backend run is stopped."""
        self.store_error = exc
        log.warning("task_store_unavailable", created=self.version is not None)
        self._hub.end(self.task.id)  # streams end; clients may subscribe again later
        if self.version is None and self.run_ref and self.handler is not None:
            with contextlib.suppress(Exception):
                await self.handler.cancel(self._cancel_request())

    async def _close_events(self) -> None:
        aclose = getattr(self._events, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()

    @property
    def exhausted(self) -> bool:
        """The handler's iterator ended: events can only come from a fresh run."""
        return self._iterator_done

    async def _exhausted(self) -> None:
        self._iterator_done = True
        if self._answer_taken:
            return  # the engine goes on with a fresh run (the answer is in the task)
        if self.finished or self.task.status.state in INTERRUPTED_STATES:
            if self.task.status.state in INTERRUPTED_STATES and self.version is not None:
                await self._write(on_conflict=OnConflict.KEEP_NEWER)  # nothing runs this task now
            return
        await self._finish(TASK_STATE_FAILED, "the agent ended without a result")

    async def _safe_fail(self, reason: str) -> None:
        if self.finished:
            return
        try:
            await self._finish(TASK_STATE_FAILED, reason)
        except StoreUnavailableError as exc:
            await self._store_lost(exc)
        except Exception:
            log.exception("task_fail_write_failed")

    def _cancel_request(self) -> HandlerRequest:
        self.request.run_ref = self.run_ref
        return self.request

    # what the engine asks of the task ------------------------------------------
    async def take_answer(self, request: HandlerRequest, message: Message) -> TaskStatus:
        """The client answered the question the task waits on: WORKING, with ``message`` in
        the history. Returns the status asked with, for ``refuse_answer``."""
        asked = TaskStatus()
        asked.CopyFrom(self.task.status)
        self._answer_taken = True
        self.request, earlier = request, self.request
        self.run_state.pop("pending_input", None)
        self.task.history.append(message)
        self._set_status(TASK_STATE_WORKING)
        try:
            await self._write(on_conflict=OnConflict.FIRST_ANSWER)
        except ConflictError:
            # another replica recorded an answer first: the task goes on with that one
            self._answer_taken, self.request = False, earlier
            self._drop_message(message)
            raise
        self._take_initial_task()
        self._publish_status()
        return asked

    async def record_answer(
        self, message: Message, owners_lease: tuple[str | None, float | None] | None
    ) -> TaskStatus:
        """An idle run (no iterator here) records the client's answer before the handler
        gets it, as ``take_answer`` does on the owner: ``message`` in the history, WORKING,
        with one compare-and-set write at the version read (``ConflictError``: the task
        changed since, nothing written). ``owners_lease``: the owner and lease of a task whose
        run is on another replica, kept by this run's writes (that run goes on and adopts the
        answer, ``_adopt_recorded``); None: this replica's lease, as the run goes on here.
        Returns the status asked with, for ``refuse_answer`` and ``withdraw_answer``."""
        asked = TaskStatus()
        asked.CopyFrom(self.task.status)
        self._owners_lease = owners_lease
        self.run_state.pop("pending_input", None)
        self.task.history.append(message)
        self._set_status(TASK_STATE_WORKING)
        ownership = self._services.ownership
        lease = owners_lease or (ownership.replica_id, ownership.lease_deadline())
        await self._write(lease=lease, on_conflict=OnConflict.RAISE)
        self._hub.feed.status(self.scope, self.task, self.version)
        return asked

    async def withdraw_answer(self, message: Message, asked: TaskStatus) -> None:
        """The handler could not be given a recorded answer (e.g. its backend is down): the
        task waits for it again as it did before ``record_answer``."""
        self.task.status.CopyFrom(asked)
        self._mutated()
        self.run_state["pending_input"] = self.request.pending_input or {}
        self._drop_message(message)
        await self._write()

    def _drop_message(self, message: Message) -> None:
        """``message`` taken out of the task's history (an answer not taken after all)."""
        for index, kept in enumerate(self.task.history):
            if kept.message_id == message.message_id:
                del self.task.history[index]
                return

    def answer_delivered(self) -> None:
        """The handler took the answer on this run's open iterator: its events go on here."""
        self._answer_taken = False

    async def refuse_answer(
        self, exc: InputRejectedError, message: Message, asked: TaskStatus | None
    ) -> Task:
        """The handler refused the answer: the task keeps waiting, with a status message
        saying why (e.g. the valid choices). ``asked`` is the status before ``take_answer``
        (None: the answer was not taken yet)."""
        self._answer_taken = False
        if self.finished:
            return copy_task(self.task)
        if asked is None:
            self.task.history.append(message)
        else:
            self.task.status.CopyFrom(asked)
            self.run_state["pending_input"] = self.request.pending_input or {}
        prompt = agent_message(self.task, exc.prompt, exc.data)
        self._set_status(self.task.status.state, prompt)
        self.task.history.append(prompt)
        await self._write()
        self._publish_status()
        self.settled.set()
        return copy_task(self.task)

    async def cancel(self, wait_seconds: float, reason: str = "canceled") -> None:
        """Ask the handler to stop (waiting up to ``wait_seconds`` when it says its run
        will end with ``Canceled``), then end the task CANCELED with ``reason`` as its status
        message if it has not ended."""
        waits = False
        if self.handler is not None and (self._driver is not None or self.run_ref):
            try:
                waits = await self.handler.cancel(self._cancel_request())
            except Exception:
                log.exception("handler_cancel_failed", task_id=self.task.id)
        if waits:
            await self.wait_done(wait_seconds)
        await self.stop()
        if not self.finished:
            await self._finish(TASK_STATE_CANCELED, reason)

    async def fail(self, reason: str) -> None:
        """End the task FAILED with ``reason`` (e.g. its replica was lost)."""
        await self._finish(TASK_STATE_FAILED, reason)

    async def superseded(self, final: Task) -> None:
        """Another replica ended the task: tell the listeners and stop driving it."""
        self.finished = True
        if final.status.state == TASK_STATE_CANCELED and self.handler is not None:
            with contextlib.suppress(Exception):
                await self.handler.cancel(self._cancel_request())
        self._hub.publish(
            final.id, status_event(final)
        )  # before the driver stops, which ends the hub
        await self.stop()
        self._hub.end(final.id)
        log.info("task_superseded", task_id=final.id, state=TaskState.Name(final.status.state))

    async def mark_working(self) -> None:
        """An idle run goes on: its task is WORKING again (written and announced); a
        stream of the answer starts from the task as it stands now."""
        self.run_state.pop("pending_input", None)
        if self.task.status.state != TASK_STATE_WORKING:  # else ``record_answer`` made it so
            self._set_status(TASK_STATE_WORKING)
        self._owns = True
        self._owners_lease = None
        await self._write()
        self._take_initial_task()
        self._publish_status()

    async def record_for_worker(self, dispatched: dict[str, Any], claim_until: float) -> None:
        """Dispatch mode (``tasks.dispatch``): write the task for a worker to claim — a new
        one SUBMITTED, an answered one WORKING — owned by ``DISPATCH_OWNER`` until
        ``claim_until``, with ``dispatched`` in its run state. This run writes it no more
        (unless to fail it). ``SupersededError``: the task moved on meanwhile."""
        self.run_state.pop("pending_input", None)
        self.run_state[DISPATCHED] = dispatched
        created = self.version is None
        if not created:
            self._set_status(TASK_STATE_WORKING)
        await self._write(lease=(DISPATCH_OWNER, claim_until), on_conflict=OnConflict.STILL_ASKED)
        if created:
            await self._announce_created()
        else:
            self._publish_status()

    async def claim(self) -> None:
        """A worker takes a task recorded for it over, with one conditional write
        (``ConflictError``: another delivery of the same dispatch claimed it first)."""
        self.run_state.pop(DISPATCHED, None)
        self._set_status(TASK_STATE_WORKING)
        self._owns = True
        await self._write(on_conflict=OnConflict.RAISE)
        self._publish_status()

    # event mapping -------------------------------------------------------------
    async def _apply(self, event: HandlerEvent) -> None:
        if isinstance(event, Reply):
            await self._on_reply(event)
            return
        if isinstance(event, SessionUpdate):
            self._session_updates.update(event.values)
            return
        if isinstance(event, RunStarted) and self.version is None:
            self.run_ref = event.run_ref
            await self._ensure_created()
            return
        if self.unseen and time.monotonic() >= self._unseen_until:
            self.unseen = (
                False  # a long run: written now, so GetTask, ListTasks and the feed see it
            )
        if not (self.unseen and isinstance(event, _NO_WRITE_BEFORE_THE_END)):
            await self._ensure_created()
        elif self.task.status.state == TASK_STATE_SUBMITTED:
            self._set_status(TASK_STATE_WORKING)  # as it will be written
        if (
            isinstance(event, TextDelta | ArtifactDelta | Progress)
            and self.task.status.state in INTERRUPTED_STATES
        ):
            await self._back_to_working()
        if isinstance(event, TextDelta):
            self._on_text(event.text)
        elif isinstance(event, ArtifactDelta):
            self._on_artifact(event)
        elif isinstance(event, Progress):
            self._on_progress(event)
        elif isinstance(event, RunStarted):
            self.run_ref = event.run_ref
            await self._write()
        elif isinstance(event, InputRequired):
            await self._on_question(TASK_STATE_INPUT_REQUIRED, event.prompt, event.data,
                                    event.metadata, event.extensions)
        elif isinstance(event, AuthRequired):
            await self._on_question(TASK_STATE_AUTH_REQUIRED, event.prompt, event.data)
        elif isinstance(event, Completed):
            await self._on_completed(event)
        elif isinstance(event, Failed):
            await self._finish(TASK_STATE_FAILED, event.reason)
        elif isinstance(event, Rejected):
            await self._finish(TASK_STATE_REJECTED, event.reason)
        elif isinstance(event, Canceled):
            await self._finish(TASK_STATE_CANCELED, event.reason or "canceled")

    async def _ensure_created(self) -> None:
        if self.version is not None:
            return
        self._set_status(TASK_STATE_WORKING)
        await self._write(keep_lease=True)
        self.unseen = False
        await self._announce_created()

    async def _announce_created(self) -> None:
        """The task was just created in the store: counted, announced, told its push config."""
        TASKS_STARTED.inc()
        self.created.set()
        self._publish_status()
        await self._save_push_config()

    async def _save_push_config(self) -> None:
        """The push config sent with the task's first message, saved and told of the task."""
        if self._push_config is not None:
            # no other config can exist yet: the client does not know the task id
            push = self._services.push
            config = await push.save_inline_config(self.scope, self.task.id, self._push_config)
            await push.notify(self.runtime, self.scope, self.task, [config])

    async def _back_to_working(self) -> None:
        """The run went on without an answer taken here: the backend's approval expired, or
        another replica recorded the answer (``record_answer``, adopted by this write), which
        this replica's listeners are told of as if it was taken here."""
        self.run_state.pop("pending_input", None)
        self._set_status(TASK_STATE_WORKING)
        await self._write()
        answered = bool(self.task.history) and self.task.history[-1].role == ROLE_USER
        if answered and self._hub.has_listeners(self.task.id):
            self._hub.publish(self.task.id, status_event(self.task))

    def _on_text(self, text: str) -> None:
        if not text:
            return
        first = self._artifact_id is None
        if first:
            self._artifact_id = new_id()
        self._text.append(text)
        self.generation += 1  # a chunk changes the task's artifact, listened to or not
        if self._hub.has_listeners(self.task.id):  # otherwise kept for the final artifact only
            chunks = self._text_chunks()
            chunk = chunks.first(text) if first else chunks.next(text)
            stamp_generation(chunk, self.generation)
            self._hub.publish(self.task.id, chunk, self.generation)

    def _text_chunks(self) -> TextChunks:
        """The chunks of the response text, made when a listener first needs one."""
        if self._chunks is None:
            self._chunks = TextChunks(self.task, self._artifact_id)  # type: ignore[arg-type]
        return self._chunks

    def _on_artifact(self, event: ArtifactDelta) -> None:
        """A handler-named artifact: kept on the task (stored at the next state change)."""
        artifact = self._artifact(event.artifact_id)
        if event.name:
            artifact.name = event.name
        if not event.append:
            del artifact.parts[:]
        artifact.parts.extend(event.parts)
        if event.metadata:
            artifact.metadata.update(event.metadata)
        self._mutated()
        if self._hub.has_listeners(self.task.id):
            chunk = Artifact(artifact_id=event.artifact_id, name=artifact.name)
            chunk.parts.extend(event.parts)
            if event.metadata:
                chunk.metadata.update(event.metadata)
            update = artifact_event(
                self.task, chunk, append=event.append, last_chunk=event.last_chunk
            )
            stamp_generation(update, self.generation)
            self._hub.publish(self.task.id, update, self.generation)

    def _artifact(self, artifact_id: str) -> Artifact:
        for artifact in self.task.artifacts:
            if artifact.artifact_id == artifact_id:
                return artifact
        return self.task.artifacts.add(artifact_id=artifact_id)

    def _on_progress(self, event: Progress) -> None:
        self._set_status(TASK_STATE_WORKING)
        if event.text:
            self.task.status.message.CopyFrom(agent_message(self.task, event.text))
        self._publish_status({"kind": event.kind, **event.data})

    async def _on_question(
        self, state: int, prompt_text: str, data: dict[str, Any] | None,
        metadata: dict[str, Any] | None = None, extensions: tuple[str, ...] = (),
    ) -> None:
        """INPUT_REQUIRED or AUTH_REQUIRED: the task waits for its caller."""
        prompt = agent_message(self.task, prompt_text, data)
        if metadata:
            prompt.metadata.update(metadata)
        prompt.extensions.extend(extensions)
        self._set_status(state, prompt)
        self.task.history.append(prompt)
        self.run_state["pending_input"] = data or {}
        await self._remember_turn(prompt_text)
        await self._write()
        self._publish_status()
        await self._services.push.notify(self.runtime, self.scope, self.task)
        self.settled.set()

    async def _on_completed(self, event: Completed) -> None:
        self._tokens = token_counts(event.metadata.get("usage"))
        parts = list(event.parts) if event.parts else []
        final_text = event.text if event.text is not None else self.text_so_far
        if not parts and (final_text or self._artifact_id):
            parts = [Part(text=final_text)]
        if parts:
            artifact = self._artifact(self._artifact_id or new_id())
            artifact.name = event.artifact_name or RESPONSE_ARTIFACT
            del artifact.parts[:]
            artifact.parts.extend(parts)
            if event.metadata:
                artifact.metadata.update(event.metadata)
            self._mutated()
            final = artifact_event(self.task, artifact, last_chunk=True)
            stamp_generation(final, self.generation)
            if self._hub.has_listeners(self.task.id):
                last = self._last_chunk(artifact, final)
                if last is not final:
                    stamp_generation(last, self.generation)
                self._hub.publish(self.task.id, last, self.generation)
            self._hub.feed.artifact(self.scope, self.task, final, self.version)
        await self._remember_turn(final_text or "")
        await self._finish(TASK_STATE_COMPLETED, None)

    def _last_chunk(
        self, artifact: Artifact, final: TaskArtifactUpdateEvent
    ) -> TaskArtifactUpdateEvent:
        """What ends the streamed text for its listeners: when the final artifact is the
        text streamed so far, an empty appended chunk (every listener got that text, as
        chunks or as a late joiner's text-so-far chunk, so a client that ignores ``append``
        does not show the answer twice); otherwise ``final``, which replaces the chunks."""
        if (
            self._artifact_id is None
            or artifact.name != RESPONSE_ARTIFACT
            or len(artifact.parts) != 1
            or artifact.parts[0].WhichOneof("content") != "text"
            or artifact.parts[0].text != self.text_so_far
            or artifact.parts[0].HasField("metadata")
        ):
            return final
        metadata = artifact.metadata if artifact.HasField("metadata") else None
        return self._text_chunks().last(metadata)

    async def _on_reply(self, event: Reply) -> None:
        if self.version is not None:
            log.warning("reply_after_task_created")
            await self._on_completed(
                Completed(text=event.text, parts=event.parts, metadata=event.metadata)
            )
            return
        self.reply = reply_message(
            self.task.context_id, event.parts or [Part(text=event.text or "")], event.metadata
        )
        MESSAGES.inc()
        await self._remember_turn(event.text or get_message_text(self.reply))
        self.finished = True
        self.created.set()
        self.settled.set()

    async def _finish(self, state: int, reason: str | None) -> None:
        """The one terminal transition: written, announced, notified, the streams ended."""
        if not self.unseen:
            await self._ensure_created()
        created_now = self.version is None  # an unseen task: no push config can exist
        self.run_state.pop("pending_input", None)
        for attempt in range(1, _IDLE_WRITE_ATTEMPTS + 1):
            self._keep_partial_text(state)
            self._set_status(state, agent_message(self.task, reason) if reason else None)
            self.finished = True
            try:
                await self._write(
                    on_conflict=OnConflict.RELOAD if self._driver is None else OnConflict.MINE,
                    usage=self._usage(),
                )
                break
            except _Reloaded:
                if attempt == _IDLE_WRITE_ATTEMPTS:
                    raise ConflictError(f"task {self.task.id} keeps changing") from None
        if created_now:
            TASKS_STARTED.inc()
        task_ended(self.scope.endpoint_id, state, self._tokens)
        self._publish_status()
        await self._services.push.notify(
            self.runtime, self.scope, self.task, [] if created_now else None
        )
        self._hub.end(self.task.id)
        self.settled.set()

    # helpers -----------------------------------------------------------------
    def _usage(self) -> UsageRecord:
        """The usage record of the task ending now (written with its terminal write)."""
        return ending_now(self.task, self.run_state, self._tokens, self.runtime.endpoint.metadata)

    def _keep_partial_text(self, state: int) -> None:
        """A task failed by a run that streamed nothing itself (e.g. "gateway instance
        lost") keeps the text its stopped run handed over, as a partial response."""
        partial = self.run_state.pop(PARTIAL_TEXT, None)
        if partial and state == TASK_STATE_FAILED and self._artifact_id is None:
            artifact = self._artifact(partial["artifact_id"] or new_id())
            artifact.name = RESPONSE_ARTIFACT
            del artifact.parts[:]
            artifact.parts.append(Part(text=partial["text"]))
            artifact.metadata.update({"partial": True})

    def _set_status(self, state: int, message: Message | None = None) -> None:
        """The task's new status (a state change, or a new message in the same state)."""
        self.task.status.CopyFrom(new_status(state, message))
        self._mutated()

    def _mutated(self) -> None:
        """The task changed in a way that emits one event: its generation rises by one."""
        self.generation += 1
        set_generation(self.task, self.generation)

    def _publish_status(self, metadata: dict[str, Any] | None = None) -> None:
        if self.version is not None:  # the feed tells of stored tasks
            self._hub.feed.status(self.scope, self.task, self.version)
        if self._hub.has_listeners(self.task.id):
            self._hub.publish(self.task.id, status_event(self.task, metadata))

    async def _write(
        self, *, on_conflict: OnConflict = OnConflict.MINE, keep_lease: bool = False,
        lease: tuple[str, float] | None = None, usage: UsageRecord | None = None,
    ) -> None:
        """The one place a run writes its task (created, or updated at its version), under
        the run's write lock. The lease: ``lease`` (owner, until) when given (a dispatched
        task waits for a worker); else this replica's while the run drives an iterator, or
        with ``keep_lease`` while it has none (``hand_over``); none for an ended task.
        ``usage``: the terminal write's usage record, written with the task.
        ``on_conflict`` says what a newer version in the store means (``OnConflict``); a task
        ended elsewhere stops this run (``SupersededError``). A task not written yet is
        created (``ConflictError`` if its id exists). A store error other than a conflict or
        an outage is ``TaskNotWrittenError``."""
        try:
            async with self._write_lock:
                set_generation(self.task, self.generation)  # with the text chunks since
                owner, until = lease or self._owners_lease or self._lease(keep_lease)
                if self.version is None:
                    self.version = await self._store.create_task(
                        self.scope, self.task, run_ref=self.run_ref, run_state=self.run_state,
                        owner=owner, lease_until=until, usage=usage,
                    )
                    return
                await self._update(owner, until, on_conflict, usage)
        except (ConflictError, StoreUnavailableError, SupersededError, _Reloaded):
            raise
        except Exception as exc:
            log.exception("task_write_failed")
            raise TaskNotWrittenError(
                f"the task could not be written ({type(exc).__name__})"
            ) from exc

    def _lease(self, keep_lease: bool) -> tuple[str | None, float | None]:
        running = self.task.status.state not in TERMINAL_STATES and (keep_lease or self._driving())
        if not running:
            return None, None
        ownership = self._services.ownership
        return ownership.replica_id, ownership.lease_deadline()

    async def _update(
        self, owner: str | None, until: float | None, on_conflict: OnConflict,
        usage: UsageRecord | None = None,
    ) -> None:
        for attempt in range(1, on_conflict.attempts + 1):
            try:
                self.version = await self._store.update_task(
                    self.scope, self.task, expected_version=self.version or 0, run_ref=self.run_ref,
                    run_state=self.run_state, owner=owner, lease_until=until, usage=usage,
                )
                return
            except ConflictError:
                if on_conflict is OnConflict.RAISE:
                    raise
                stored = await self._store.get_task(self.scope, self.task.id)
                if on_conflict is OnConflict.STILL_ASKED:
                    if (
                        stored is None
                        or stored.task.status.state not in INTERRUPTED_STATES
                        or attempt == 3
                    ):
                        raise SupersededError from None
                    # still waiting for this answer: the run that asked released the task since
                    self.version, self.run_ref = stored.version, stored.run_ref
                    continue
                if stored is None or stored.task.status.state in TERMINAL_STATES:
                    self.finished = True
                    raise SupersededError from None
                if on_conflict is OnConflict.RELOAD:
                    self.task.CopyFrom(stored.task)
                    self.generation = max(self.generation, generation_of(stored.task))
                    self.version, self.run_ref = stored.version, stored.run_ref
                    self.run_state = dict(stored.run_state)
                    raise _Reloaded from None
                if on_conflict is OnConflict.KEEP_NEWER:
                    return
                if on_conflict is OnConflict.FIRST_ANSWER and _holds_unseen(stored.task, self.task):
                    raise
                if attempt == 2:
                    raise
                # a write of ours was interrupted after it landed (e.g. by cancel), or
                # another replica recorded an answer: this run still owns the task, so its
                # state in memory wins, with the messages recorded elsewhere
                self._adopt_recorded(stored.task)
                self.version = stored.version

    def _adopt_recorded(self, stored: Task) -> None:
        """Take in the messages the stored task holds and this run's lacks (an answer another
        replica recorded, ``record_answer``), in the stored order, before the ones this run
        added since its last write. A question of this run they answer is no longer asked."""
        if not _holds_unseen(stored, self.task):
            return
        stored_ids = {message.message_id for message in stored.history}
        added = [message for message in self.task.history if message.message_id not in stored_ids]
        del self.task.history[:]
        self.task.history.extend(stored.history)
        self.task.history.extend(added)
        if (
            self.task.status.state in INTERRUPTED_STATES
            and self.task.status.message.message_id in stored_ids
        ):
            self.task.status.CopyFrom(stored.status)
            self.run_state.pop("pending_input", None)
        self.generation = max(self.generation, generation_of(stored) + 1)
        set_generation(self.task, self.generation)

    def _driving(self) -> bool:
        """An iterator is (about to be) driven, so this replica owns the task while it runs."""
        return (
            self._owns
            and not self._iterator_done
            and not (self._driver is not None and self._driver.done())
        )

    async def _remember_turn(self, agent_text: str) -> None:
        updates, self._session_updates = self._session_updates, {}
        if self.handler is not None:
            unseen = self._new_context and self.unseen and self.version is None
            await self._services.conversation.remember(
                self.handler, self.scope, self.request, agent_text, updates, unseen=unseen
            )
