"""The loaded models, the queue of requests and the threads that run them.

The server has ``parallel`` slots (``--parallel``) and as many threads: each thread takes the
queue's next request (in arrival order), runs it in the free slot whose KV cache holds the
longest start of its prompt, and takes the next (never on the event loop, which keeps
answering other clients meanwhile). The load runs first on the first thread, which starts the
others once the models are ready. With one slot that thread alone makes every llama.cpp call of
the server; with several, each slot decodes on a slot of the shared contexts (its own
sequences in the KV cache, its own drafters and planner), and the slots' rendezvous lets one
thread at a time touch llama.cpp and runs their steps as one batch
(:mod:`specchat.engine.llama.slots`).

Each request is a :class:`~specchat.serve.job.Job`, whose items a thread posts as it runs
it; its prompt is built by :mod:`specchat.serve.prompt`.
"""
from __future__ import annotations

import asyncio
import itertools
import queue
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.events import GenerationStats, TokenEvent
from specchat.engine.decode.fold import EventFold
from specchat.engine.decode.grammar import GrammarError
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.tool_calls import CLOSE
from specchat.engine.llama.rendezvous import PassLog
from specchat.engine.llama.vocab import piece
from specchat.engine.policy.in_force import InForce
from specchat.errors import Cancelled, SpecchatError
from specchat.runtime.decoders import prediction_counts
from specchat.serve.api_errors import SERVER_ERROR, UNAVAILABLE, ApiError, bad_request, loading
from specchat.serve.job import Failed, Finished, Job, Started
from specchat.serve.parse import GenerationRequest
from specchat.serve.prompt import (
    check_grammar,
    generic_grammar,
    generic_tools,
    prompt_tokens,
    tools_offered,
)
from specchat.textsafe import safe_text

DEFAULT_MAX_QUEUE = 64  # waiting requests; more are refused (503) rather than piled up


@dataclass
class Served:
    """What a load hands the server: the engine on the decoder requests share (its γ planner
    keeps learning across requests, as across a chat's turns) and how to close it. With several
    slots, ``engines`` holds one engine per slot (the first is ``engine``) and ``member`` is
    the context a slot's request runs in (the slots' rendezvous)."""

    engine: ChatEngine
    setup: InForce  # the drafters and γ mode in force, for the responses' extension object
    close: Callable[[], None]
    notices: Sequence[str] = ()  # how the models were loaded (printed once at start)
    engines: Sequence[ChatEngine] = ()
    member: Callable[[], AbstractContextManager[None]] | None = None
    passes: PassLog | None = None  # what the slots' shared passes did
    # Moves an idle slot's cache out of the shared one while others work (Slots.park).
    park: Callable[[int], None] | None = None

    def slot_engine(self, slot: int) -> ChatEngine:
        return self.engines[slot] if self.engines else self.engine


def stderr_log(line: str) -> None:
    sys.stderr.write(f"specchat serve: {safe_text(line)}\n")
    sys.stderr.flush()


class ModelHost:
    """The server's one load and its generation thread."""

    def __init__(self, load: Callable[[], Served], model_id: str, aliases: Sequence[str] = (),
                 defaults: SamplerSettings | None = None,
                 log: Callable[[str], None] = stderr_log,
                 max_queue: int = DEFAULT_MAX_QUEUE, parallel: int = 1) -> None:
        self.model_id = model_id
        self.parallel = parallel  # slots: requests generated at once
        self.names = {model_id, *aliases}  # what a request's "model" may say
        self.defaults = defaults or SamplerSettings()
        self.log = log
        self.max_queue = max_queue
        self.state = "loading"  # loading | ready | failed | closed
        self.error: str | None = None
        self.served: Served | None = None
        self.counts = {"served": 0, "cancelled": 0, "failed": 0}
        self.on_failed: Callable[[str], None] | None = None  # the CLI stops the server
        self._load = load
        self._tasks: queue.Queue[Job | Callable[[], None] | None] = queue.Queue()
        self._pending: set[Job] = set()
        self._lock = threading.Lock()
        # A daemon: Ctrl-C during a long first download must not wait for it to end.
        self._thread = threading.Thread(target=self._work, name="specchat-generate", daemon=True)
        self._slot_threads: list[threading.Thread] = []  # threads 1… (the first: _thread)
        self._free = list(range(parallel))  # the slots no request runs in
        self._used: dict[int, int] = {}  # slot → when a request last took it
        self._uses = itertools.count()

    # --------------------------------------------------------------- the request side

    def start(self) -> None:
        self._tasks.put(self._load_models)
        self._thread.start()

    def check_ready(self) -> Served:
        if self.state == "ready" and self.served is not None:
            return self.served
        if self.state == "loading":
            raise loading()
        if self.state == "failed":
            raise ApiError(503, f"the model could not be loaded: {self.error}", type=UNAVAILABLE,
                           code="model_load_failed")
        raise ApiError(503, "the server is shutting down", type=UNAVAILABLE, code="shutting_down")

    def check_model(self, name: str | None) -> None:
        """OpenAI's rule: a model the server does not have is a 404 (no name: the served one)."""
        if name is not None and name not in self.names:
            raise ApiError(404, f"the model {name[:100]!r} is not served here: this server "
                           f"serves {self.model_id!r} (GET /v1/models)", type="not_found_error",
                           param="model", code="model_not_found")

    def submit(self, request: GenerationRequest) -> Job:
        """Queue a generation (from the event loop); 503 while loading or when full."""
        self.check_ready()
        job = Job(request, asyncio.get_running_loop())
        with self._lock:
            if len(self._pending) >= self.max_queue:
                raise ApiError(503, f"the server is busy: {len(self._pending)} requests are "
                               "waiting; try again shortly", type=UNAVAILABLE,
                               code="server_busy", retry_after=2)
            self._pending.add(job)
        self._tasks.put(job)
        return job

    @property
    def queued(self) -> int:
        with self._lock:
            return len(self._pending)

    def cancel_all(self) -> None:
        with self._lock:
            jobs = list(self._pending)
        for job in jobs:
            if not job.cancel.is_set():
                job.why = "the server is stopping"
                job.cancel.set()

    def close(self, timeout: float = 30.0) -> None:
        """Cancel what runs, then free the models on their own thread (the controllers' state
        is saved there too). While still loading, nothing is waited for."""
        was = self.state
        self.state = "closed"
        self.cancel_all()
        if not self._thread.is_alive():
            return
        for _ in range(self.parallel):  # one end for each slot's thread
            self._tasks.put(None)
        if was != "loading":
            self._thread.join(timeout)

    # --------------------------------------------------------------- the slots' threads

    def _work(self) -> None:
        """The first thread: the load, then requests; once every thread has stopped, the
        models are freed here (the controllers' state is saved there too)."""
        self._serve()
        for thread in self._slot_threads:
            thread.join()
        self._close_models()

    def _serve(self) -> None:
        """A thread's loop: the tasks, one after another, until its end (None)."""
        while (task := self._tasks.get()) is not None:
            if isinstance(task, Job):
                served = self.served
                together = served.member if served is not None and served.member else nullcontext
                try:
                    with together():
                        last = self._run(task)
                finally:
                    with self._lock:  # before its last item: a client told it is done sees
                        self._pending.discard(task)  # the queue without it
                task.post(last)
            else:
                task()

    def _load_models(self) -> None:
        try:
            served = self._load()
        except SpecchatError as e:
            self._failed(str(e))
            return
        except Exception as e:  # a bug: its traceback in the log, a line for the client
            traceback.print_exc()
            self._failed(f"{type(e).__name__}: {e}")
            return
        self.served = served
        if self.state == "closed":  # stopped while loading
            self._close_models()
            return
        self.state = "ready"
        for notice in served.notices:
            self.log(notice)
        for slot in range(1, self.parallel):
            thread = threading.Thread(target=self._serve, daemon=True,
                                      name=f"specchat-generate-{slot}")
            self._slot_threads.append(thread)
            thread.start()
        slots = f"; {self.parallel} requests at once" if self.parallel > 1 else ""
        self.log(f"ready: {self.model_id} ({served.setup.line()}{slots})")

    def _failed(self, message: str) -> None:
        self.error = message
        self.state = "failed"
        self.log(f"error: {message}")
        if self.on_failed is not None:
            self.on_failed(message)

    def _close_models(self) -> None:
        if self.served is not None:
            served, self.served = self.served, None
            served.close()

    def _run(self, job: Job) -> Finished | Failed:
        """Generate in a free slot, posting the tokens; return the last item (posted once the
        job is off the queue)."""
        served = self.served
        if served is None or job.cancel.is_set():  # gone while it waited: nothing to do
            return self._finished(job, GenerationStats(stop_reason="cancelled"))
        engine = served.engine  # the prompt is the same in every slot's
        try:
            tokens = prompt_tokens(engine, job.request, job.cancel)
            settings = job.request.settings
            # The field a grammar the model cannot follow is blamed on (a forced call's: tools).
            param = job.request.grammar_param or ("tools" if settings.grammar else None)
            if generic_tools(engine, job.request):  # the reply: JSON, by its grammar
                settings = settings.with_(grammar=generic_grammar(job.request))
                param = "tools"
            elif tools_offered(job.request) and not job.request.parallel_tool_calls:
                # One call: the reply ends at the first call's closing tag.
                settings = settings.with_(stop=(*settings.stop, CLOSE))
            if job.request.prediction is not None:  # drafted from as the target's tokens
                model = engine.model
                settings = settings.with_(prediction=tuple(model.tokenize(
                    job.request.prediction, add_special=False, parse_special=False)))
            check_grammar(engine, settings.grammar, param)
            job.post(Started(len(tokens)))
            slot = self._take_slot(served, tokens)
            try:
                done = generate(served.slot_engine(slot), tokens, job, settings)
            except GrammarError as e:  # found only as the reply went on
                raise bad_request(str(e), param, "invalid_grammar") from None
            finally:
                with self._lock:
                    self._free.append(slot)
            self._finished(job, done.stats)
            return done
        except ApiError as e:
            return Failed(e)
        except Cancelled:
            return self._finished(job, GenerationStats(stop_reason="cancelled"))
        except SpecchatError as e:  # NaN logits, a model file problem: said, not a traceback
            return self._fail(job, ApiError(500, str(e), type=SERVER_ERROR,
                                            code="generation_failed"))
        except Exception as e:  # a bug: its traceback in the log, a line for the client
            traceback.print_exc()
            return self._fail(job, ApiError(500, f"internal error: {type(e).__name__}: {e}",
                                            type=SERVER_ERROR, code="internal_error"))

    def _take_slot(self, served: Served, tokens: Sequence[int]) -> int:
        """The free slot whose KV cache holds the longest start of ``tokens`` when that is at
        least half of them (a chat's next turn goes where its conversation is cached), else
        the free slot unused longest (so an unrelated request does not push a conversation
        out), as llama-server picks a slot. There is one: each thread runs one request, and
        there are as many threads as slots. The slots left idle are parked: their caches
        wait in host memory, out of the passes of the slot taken. (Called within the slots'
        rendezvous: no other request takes a slot or runs a pass meanwhile.)"""
        with self._lock:
            free = self._free
            if len(free) == 1:
                best = free[0]
            else:
                held = {s: served.slot_engine(s).decoder.target.common_prefix(tokens)
                        for s in free}
                best = max(free, key=held.__getitem__)
                if 2 * held[best] < len(tokens):
                    best = min(free, key=lambda s: self._used.get(s, -1))
            free.remove(best)
            self._used[best] = next(self._uses)
            idle = list(free)
        if served.park is not None:
            for s in idle:
                served.park(s)
        return best

    def _finished(self, job: Job, stats: GenerationStats) -> Finished:
        if stats.stop_reason == "cancelled":
            self.counts["cancelled"] += 1
            self.log(f"request {job.number} cancelled ({job.why}) after "
                     f"{stats.generated_tokens} tokens")
        else:
            self.counts["served"] += 1
        return Finished(stats)

    def _fail(self, job: Job, error: ApiError) -> Failed:
        self.counts["failed"] += 1
        self.log(f"request {job.number} failed: {error.message}")
        return Failed(error)


def generate(engine: ChatEngine, tokens: list[int], job: Job,
             settings: SamplerSettings | None = None) -> Finished:
    """Run the shared decoder on the prompt, posting each token as it is committed."""
    settings = settings or job.request.settings
    fold = _Posting(engine, job)
    stats = fold.run(engine.decoder.run(tokens, settings, job.cancel), engine.decoder.name)
    counts = (prediction_counts(settings.prediction, fold.token_ids)
              if job.request.prediction is not None else None)
    last_step = fold.steps[-1] if fold.steps else None
    return Finished(stats, last_step, tuple(fold.notices), counts)


class _Posting(EventFold):
    """A served reply's events: each token posted to its job as it is committed, with the
    texts its log-probabilities will be written with."""

    def __init__(self, engine: ChatEngine, job: Job) -> None:
        super().__init__()
        self.engine = engine
        self.job = job

    def on_token(self, ev: TokenEvent) -> None:
        pieces = self.job.pieces
        if ev.logprob is not None:
            for t in (ev.token_id, *(i for i, _ in ev.logprob.top)):
                if t not in pieces:
                    pieces[t] = piece(self.engine.model, t, special=True)
        self.job.post(ev)
