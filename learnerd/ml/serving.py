"""The served-model manager: base models loaded once and kept warm, each document's current adapter
swapped in when the promotion gate promotes a version, generation in one worker thread behind a bounded queue.

Threads. Every model operation (loading a base, loading or deleting an adapter, ``set_adapter``,
``generate``) runs in one worker thread, one job at a time, so peft's active-adapter state is never
shared by two generations. The event loop only admits jobs (:meth:`ServedModels.submit`, never
blocking: a full queue raises :class:`QueueFull`) and reads their token deltas from an asyncio queue.

Admission. A request takes its place in the queue (:meth:`ServedModels.admit`, :class:`QueueFull` beyond
``capacity``) before anything costly is done for it, and :meth:`ServedModels.check_prompt` refuses a prompt
that cannot fit the model's context from its length in characters alone (no tokenizer call, see
:func:`min_tokens`), so the endpoint embeds a request's text for retrieval only once both passed.

Hot swap. A job is bound at admission to the adapter version that is current for its document at
that moment (:meth:`ServedModels.adapter_promoted` moves the pointer, and preloads the new version
in the worker). A job keeps its version until it ends, so requests in flight finish on the version
they started with; a version that is neither current nor held by a job is deleted from the model
after the job that last held it. No request waits for a swap and none fails because of one.

Each document's adapters are named ``<doc_key>@vNNNN`` inside one ``PeftModel`` per base; the base
alone (a request for a base model's name, or a document's request the router gave the base: submitted with
``version`` None) runs inside ``disable_adapter()``.

Loads. Bases and adapters are loaded through the process's one loader (:mod:`learnerd.ml.loader`: one
lock shared with the evaluation and everything else that loads a model, and a known-answer check after
each load). A load that fails its check — of a base, or of an adapter onto it — is never served: the base
is discarded with every adapter loaded on it, and the model is loaded once more. When that fails too, the
request gets :class:`ModelUnavailable` (the endpoint's 503 with ``Retry-After``), and so does every request
for that model until it is loaded again in the background ``reload_after_s`` later (with its current
adapter, again and again until a load passes: a daemon that is not ready gets no traffic to reload it).
Until a load of that model passes, :meth:`ServedModels.unready_reason` says why (the daemon's ``/readyz``
is not ready); while a base model is loading, :meth:`ServedModels.loading` names it (requests wait for it).

Backends. Everything above is the backend's frame; the model-specific part is four worker-side methods —
``_base`` (load a base), ``_activate`` (make a version's adapter the one generating), ``_release`` (free
adapters nobody holds) and ``_generate`` (one job's tokens) — which
:class:`~learnerd.ml.llamacpp_serving.LlamaCppServedModels` overrides to generate through llama.cpp
(``[serve] backend = "llamacpp"``); this class is the transformers backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import math
import os
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from learnerd.ml.base_model import BaseModelRef, LoadedBase, load_base_model, resolve_base_model
from learnerd.ml.choice import choose_command
from learnerd.ml.generate import context_guidance, generation_eos_ids, guided_rows
from learnerd.ml.loader import ModelCheckError, load_adapter
from learnerd.ml.rows import ChatMessage, padding_id, render_chat
from learnerd.ml.threads import CoreMeter, choose_threads, intra_op_threads
from learnerd.store.adapters import AdapterStore, AdapterStoreError, AdapterVersion
from learnerd.store.suggestions import answer_end

log = structlog.get_logger(__name__)
LOAD_ATTEMPTS = 2
"""Loads of a model per request when a load fails its known-answer check: the first and one reload."""


class _Current(enum.Enum):
    """The type of :data:`CURRENT`."""

    VERSION = enum.auto()


CURRENT = _Current.VERSION
""":meth:`ServedModels.submit`'s default version: the document's current one when the job is submitted."""


class ModelUnavailable(Exception):
    """The model failed its known-answer check on every load attempt: it is not served until a background
    reload passes, in about ``retry_after_s`` seconds."""

    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class QueueFull(Exception):
    """Too many chat completions are queued or generating; ``retry_after_s`` is a hint in seconds."""

    def __init__(self, capacity: int, retry_after_s: int) -> None:
        super().__init__(f"{capacity} requests are queued or generating; retry in {retry_after_s} s")
        self.retry_after_s = retry_after_s


class PromptTooLong(ValueError):
    """The rendered prompt leaves no room for a single new token in the model's context (tokens)."""


def longest_token_chars(tokenizer: Any) -> int:
    """The most characters one token of ``tokenizer`` stands for: the longest token string of its vocabulary,
    added and special tokens included (a byte-level BPE token string has one character per byte of text, a
    SentencePiece one a character per character, so no token covers more characters of text than this)."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return max((len(t) for t in tokens if t), default=1)


def min_tokens(text: str, longest_token: int) -> int:
    """A lower bound of the tokens ``text`` becomes, from its length alone: its characters other than
    whitespace (which normalizers may drop) over twice ``longest_token`` (twice: Unicode normalization may
    compose two characters into one). O(len(text)), no tokenizer call: it refuses a megabyte-long message
    before it costs a tokenizer or an embedder anything; the exact count is taken when the job renders its
    prompt."""
    visible = len(text) - sum(1 for c in text if c.isspace())
    return visible // (2 * max(1, longest_token))


@dataclass(frozen=True)
class ServedModel:
    """One model id of ``GET /v1/models``: a base (``doc_key`` None) or a document's base + adapter.

    ``base_model`` is the ``base_model`` string as written (resolved against ``relative_to``);
    ``system_prompt`` is the document's, put first when a request has no system message; ``path`` the document's
    file (what its versions learned: :func:`learnerd.ml.router.version_routing`).
    """

    id: str
    base_model: str
    relative_to: Path | None = None
    doc_key: str | None = None
    system_prompt: str | None = None
    path: Path | None = None


@dataclass(frozen=True)
class SamplingParams:
    """``max_tokens`` new tokens at most; ``temperature`` 0 is greedy, else multinomial sampling with
    ``top_p`` nucleus; ``seed`` seeds torch's generator for the job; ``stop`` strings end the text
    (the stop string itself is not returned); ``context_alpha`` above 0 decodes a job that has its messages without
    retrieved examples (:attr:`Job.unquoted`) with context-aware decoding at that α
    (:func:`learnerd.ml.generate.context_guidance`); llama.cpp's backend ignores it
    (``ServeConfig.served_context_alpha`` is 0 there); ``end_at_block``: the answer ends with the closing fence of its
    first fenced code block, or where it stands when it has opened none within its first
    :data:`~learnerd.store.suggestions.BLOCK_OPENS_WITHIN` tokens (:func:`learnerd.store.suggestions.answer_end`;
    ``finish_reason`` ``stop``); ``choice_margin`` (nats per token; None: off): a greedy job with quoted commands
    (:attr:`Job.quoted`) and no stop strings answers with the quoted command the model finds within that margin of its
    own (:func:`learnerd.ml.choice.choose_command`) when it fits in ``max_tokens``, its text held back until then and
    sent as one delta; llama.cpp's backend ignores it (``ServeConfig.served_choice_margin`` is None there)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    context_alpha: float = 0.0
    end_at_block: bool = False
    choice_margin: float | None = None


@dataclass
class Delta:
    """Text generated since the previous delta."""

    text: str


@dataclass
class Finished:
    """The end of a job: ``finish_reason`` is ``stop`` (EOS, a stop string, or a chosen quoted command), ``length``
    (max_tokens) or ``cancelled``; token counts are in tokens; ``adapter`` is the version that generated it (None: the
    base); ``generate_s`` the seconds spent in ``generate``; ``text`` the whole text its deltas carried; ``chosen``: the
    index in :attr:`Job.quoted` of the quoted command the answer carries (None: the model's own,
    :attr:`SamplingParams.choice_margin`)."""

    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    adapter: str | None
    generate_s: float
    error: BaseException | None = None
    text: str = ""
    chosen: int | None = None


@dataclass
class Job:
    """One admitted chat completion; iterate :meth:`events` on the event loop. ``unquoted``: ``messages`` without
    the retrieved examples quoted in them (None: none are), context-aware decoding's negative prompt; ``quoted``: the
    commands of the retrieved examples quoted in them, nearest first."""

    model: ServedModel
    messages: tuple[ChatMessage, ...]
    params: SamplingParams
    version: AdapterVersion | None
    loop: asyncio.AbstractEventLoop
    unquoted: tuple[ChatMessage, ...] | None = None
    quoted: tuple[str, ...] = ()
    queue: asyncio.Queue[Delta | Finished] = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        """Stop generating at the next token (the client went away); a queued job never starts."""
        self.cancelled.set()

    def emit(self, item: Delta | Finished) -> None:
        """Called from the worker thread: hand ``item`` to the event loop."""
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    async def events(self) -> AsyncIterator[Delta | Finished]:
        """Yield :class:`Delta` items, then one :class:`Finished` (raises its ``error`` if it has one)."""
        while True:
            item = await self.queue.get()
            if isinstance(item, Finished):
                if item.error is not None:
                    raise item.error
                yield item
                return
            yield item


class Admission:
    """A place in the queue taken by :meth:`ServedModels.admit`: hand it to :meth:`ServedModels.submit`, or
    :meth:`release` it when the request ends before it is submitted (idempotent)."""

    def __init__(self, served: ServedModels) -> None:
        self._served: ServedModels | None = served

    def take(self) -> None:
        """The job that now holds the place will give it back when it ends."""
        self._served = None

    def release(self) -> None:
        if self._served is not None:
            self._served._job_done()
            self._served = None


def adapter_name(version: AdapterVersion) -> str:
    """The adapter's name inside its base's ``PeftModel``: ``<doc_key>@vNNNN``."""
    return f"{version.doc_key}@{version.name}"


@dataclass
class _Base:
    loaded: LoadedBase
    peft: Any = None  # the PeftModel once the first adapter is loaded
    adapters: set[str] = field(default_factory=set)

    @functools.cached_property
    def context_bound(self) -> tuple[int, int]:
        """``(context, longest token)`` in tokens and characters: the model's ``max_position_embeddings``
        (0: unknown) and :func:`longest_token_chars` of its tokenizer (computed once per base)."""
        context = getattr(self.loaded.model.config, "max_position_embeddings", None) or 0
        return context, longest_token_chars(self.loaded.tokenizer)


class ServedModels:
    """Base models and adapters served to chat completions (see the module docstring).

    Args:
        adapters: the adapter store (``<state_dir>/adapters``).
        models_dir: the built-in base models' cache.
        capacity: jobs queued or generating at once; :meth:`submit` raises :class:`QueueFull` beyond.
        steering: ``(doc_key, tokenizer) -> logits processor or None``, called in the worker thread
            before each generation (e.g. ``learnerd evolve``'s best deltas of the document).
        num_threads: torch intra-op threads while generating (set in the generating thread for each
            generation, :func:`~learnerd.ml.threads.intra_op_threads`); 0: the cores free before each generation
            minus one, at least 1 (:func:`~learnerd.ml.threads.choose_threads`) — with every core in OpenMP, the
            event loop (HTTP, SSE, search) and the client compete with the workers, and on 2 cores 2 threads
            stream no faster than 1 (``benchmarks/bench_serve.py``).
        reload_after_s: after a model failed its known-answer check on every attempt, its requests are
            refused (:class:`ModelUnavailable`) and it is loaded again in the background this many
            seconds later, until a load passes.
    """

    def __init__(
        self,
        adapters: AdapterStore,
        models_dir: str | os.PathLike[str],
        *,
        capacity: int = 16,
        steering: Callable[[str, Any], Any] | None = None,
        num_threads: int = 0,
        reload_after_s: float = 30.0,
    ) -> None:
        self.adapters = adapters
        self.num_threads = num_threads
        self._cores = CoreMeter()
        self.models_dir = Path(models_dir)
        self.capacity = capacity
        self._steering = steering
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="learnerd-generate")
        self._bases: dict[str, Any] = {}  # base identity -> _Base (a subclass's own kind); worker thread only
        self._lock = threading.Lock()
        self._current: dict[str, AdapterVersion | None] = {}
        self._held: Counter[str] = Counter()  # adapter name -> jobs holding it
        self._unready: dict[str, str] = {}  # model id -> why its last load failed its check
        self._bounds: dict[str, tuple[int, int]] = {}  # model id -> _Base.context_bound() once it was loaded
        self._loading: str | None = None  # the base model being loaded in the worker
        self._loaded_bases: set[str] = set()  # base_model names loaded once (worker thread only)
        self.reload_after_s = reload_after_s
        self._reloads: dict[str, tuple[threading.Timer, float]] = {}  # model id -> (reload, when: monotonic)
        self._closed = False
        self._pending = 0
        self._recent_job_s = 1.0

    # ------------------------------------------------------------------ event-loop side

    @property
    def pending(self) -> int:
        """Jobs queued or generating now."""
        return self._pending

    def unready_reason(self) -> str | None:
        """Why serving is not ready: the models whose last load failed its known-answer check (each is
        loaded again in the background until a load passes), or None when every model loaded so far passed.
        Thread-safe."""
        with self._lock:
            return "; ".join(self._unready.values()) or None

    def loading(self) -> str | None:
        """The base model the worker is resolving (a GGUF conversion) or loading for the first time now
        (requests for it wait), or None. Thread-safe."""
        with self._lock:
            return self._loading

    def check_prompt(self, model: ServedModel, messages: Sequence[ChatMessage]) -> None:
        """Refuse ``messages`` when their text alone is surely longer than ``model``'s context (:func:`min_tokens`);
        a model not loaded yet is not checked here (its job checks the rendered prompt). O(characters).

        Raises:
            PromptTooLong: at least as many tokens as the context holds.
        """
        with self._lock:
            bound = self._bounds.get(model.id)
        if bound is None or not bound[0]:
            return
        context, longest = bound
        tokens = sum(min_tokens(m.content, longest) for m in messages)
        if tokens >= context:
            raise PromptTooLong(f"the prompt is at least {tokens} tokens; the model's context is {context} tokens")

    def current_version(self, model: ServedModel) -> AdapterVersion | None:
        """The version new requests for ``model`` get: None for a base model (no document), else its document's
        latest from the hook, else the store's ``current``."""
        doc_key = model.doc_key
        if not doc_key:
            return None
        with self._lock:
            if doc_key in self._current:
                return self._current[doc_key]
        try:
            version = self.adapters.current(doc_key)
        except AdapterStoreError as exc:
            log.warning("adapter store unreadable; serving the base", doc_key=doc_key, error=str(exc))
            version = None
        with self._lock:
            return self._current.setdefault(doc_key, version)

    def adapter_promoted(self, version: AdapterVersion, model: ServedModel | None = None) -> None:
        """The promotion gate made ``version`` current: new requests use it; with ``model`` (its
        document's), it is loaded ahead of them. Never blocks."""
        with self._lock:
            old = self._current.get(version.doc_key)
            self._current[version.doc_key] = version
        log.info("serving a new adapter version", doc_key=version.doc_key, version=version.name)
        if model is not None:
            self._executor.submit(self._preload, model, version, old)

    def refresh(self, doc_key: str | None = None) -> None:
        """Forget the version new requests of ``doc_key`` (every document when None) get, so the next one
        reads the store again: a fleet replica calls this when another replica promoted a version."""
        with self._lock:
            if doc_key is None:
                self._current.clear()
            else:
                self._current.pop(doc_key, None)

    def admit(self) -> Admission:
        """Take a place in the queue for a chat completion about to be prepared (before its retrieval).

        Must be called on the event loop. Raises :class:`QueueFull` when ``capacity`` jobs are pending.
        """
        if self._pending >= self.capacity:
            retry = max(1, round(self._recent_job_s * self._pending))
            raise QueueFull(self.capacity, min(retry, 60))
        self._pending += 1
        return Admission(self)

    def submit(
        self,
        model: ServedModel,
        messages: Sequence[ChatMessage],
        params: SamplingParams,
        admission: Admission | None = None,
        version: AdapterVersion | _Current | None = CURRENT,
        unquoted: Sequence[ChatMessage] | None = None,
        quoted: Sequence[str] = (),
    ) -> Job:
        """Queue a chat completion bound to ``version`` of ``model``'s adapter (:data:`CURRENT`: the version
        :meth:`current_version` gives now; None: the base), in ``admission``'s place (None: :meth:`admit` one
        now). A request prepared for one version (its retrieval block) passes that version, so a promotion
        between preparing and submitting cannot pair the block with the next version. ``unquoted``: ``messages``
        without their retrieved examples (:attr:`Job.unquoted`); ``quoted``: their commands (:attr:`Job.quoted`).

        Must be called on the event loop. Raises :class:`QueueFull` when ``capacity`` jobs are pending.
        """
        if admission is None:
            admission = self.admit()
        admission.take()
        if version is CURRENT:
            version = self.current_version(model)
        loop = asyncio.get_running_loop()
        job = Job(
            model,
            tuple(messages),
            params,
            version,
            loop,
            unquoted=tuple(unquoted) if unquoted else None,
            quoted=tuple(quoted),
        )
        if version is not None:
            with self._lock:
                self._held[adapter_name(version)] += 1
        future = self._executor.submit(self._run, job)

        def cancelled(f: Future[None]) -> None:
            if f.cancelled():
                self._end(job, Finished("cancelled", 0, 0, None, 0.0))

        future.add_done_callback(cancelled)
        return job

    def _job_done(self) -> None:
        self._pending -= 1

    async def warm(self, model: ServedModel) -> None:
        """Load ``model``'s base (and current adapter) now rather than on its first request."""
        version = self.current_version(model)
        await asyncio.wrap_future(self._executor.submit(self._preload, model, version, None))

    def close(self) -> None:
        """Cancel nothing but pending background reloads, wait for the job in progress, free the worker thread."""
        with self._lock:
            self._closed = True
            reloads, self._reloads = list(self._reloads.values()), {}
        for timer, _ in reloads:
            timer.cancel()
        self._executor.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------ worker thread

    def _ready(self, model: ServedModel, version: AdapterVersion | None) -> tuple[Any, Any]:
        """``model``'s base, loaded if needed, and :meth:`_activate`'s context for ``version``. A load that
        fails its known-answer check is discarded with everything loaded on that base, and loaded again
        (:data:`LOAD_ATTEMPTS` in all); its reason is in :meth:`unready_reason` until a load of ``model``
        passes. When every attempt failed, a background reload is due in ``reload_after_s`` and the
        model's requests are refused until then.

        Raises:
            ModelUnavailable: every attempt failed the check, now or before the reload that is due.
            ModelCheckError: converting the base's GGUF file gave a model that failed the check.
            BaseModelError, AdapterStoreError, OSError, ValueError: the model cannot be loaded at all.
        """
        with self._first_load(model.base_model):  # resolving may convert a GGUF file: minutes
            ref = resolve_base_model(model.base_model, cache_dir=self.models_dir, relative_to=model.relative_to)
            return self._load(model, version, ref)

    @contextlib.contextmanager
    def _first_load(self, base_model: str) -> Iterator[None]:
        """While a base model that never loaded here is resolved and loaded, :meth:`loading` names it."""
        first = base_model not in self._loaded_bases
        if first:
            with self._lock:
                self._loading = base_model
        try:
            yield
            self._loaded_bases.add(base_model)
        finally:
            if first:
                with self._lock:
                    self._loading = None

    def _load(self, model: ServedModel, version: AdapterVersion | None, ref: BaseModelRef) -> tuple[Any, Any]:
        """:meth:`_ready` once ``model``'s base is resolved to ``ref``."""
        with self._lock:
            due = self._reloads.get(model.id)
            if due is not None:
                wait_s = max(1, math.ceil(due[1] - time.monotonic()))
                raise ModelUnavailable(self._unready.get(model.id, "not loaded yet"), wait_s)
        reason = ""
        for attempt in range(1, LOAD_ATTEMPTS + 1):
            try:
                base = self._base(model, ref)
                view = self._activate(base, version)
            except ModelCheckError as exc:
                self._bases.pop(ref.identity, None)  # with the adapters on it: a failed adapter load changed it
                reason = f"model {model.id!r} failed its known-answer check: {exc}"
                with self._lock:
                    self._unready[model.id] = reason
                log.error("served model failed its known-answer check", model=model.id, attempt=attempt, error=str(exc))
                continue
            bound = base.context_bound
            with self._lock:
                self._unready.pop(model.id, None)
                self._bounds[model.id] = bound
            return base, view
        self._schedule_reload(model)
        raise ModelUnavailable(reason, max(1, math.ceil(self.reload_after_s)))

    def _schedule_reload(self, model: ServedModel) -> None:
        """Load ``model`` (its base and current adapter) again in the worker thread ``reload_after_s`` from now."""

        def reload() -> None:
            version = self.current_version(model)
            with self._lock:  # close() sets _closed under the lock before it shuts the executor down
                self._reloads.pop(model.id, None)
                if not self._closed:
                    self._executor.submit(self._preload, model, version, None)

        with self._lock:
            if self._closed or model.id in self._reloads:
                return
            timer = threading.Timer(self.reload_after_s, reload)
            timer.daemon = True
            self._reloads[model.id] = (timer, time.monotonic() + self.reload_after_s)
        timer.start()
        log.warning("served model not served until it is loaded again", model=model.id, in_s=self.reload_after_s)

    def _base(self, model: ServedModel, ref: BaseModelRef) -> Any:
        """``ref``'s loaded base (``model`` is the served model that needs it), loaded on first use."""
        base = self._bases.get(ref.identity)
        if base is None:
            started = time.perf_counter()
            base = self._bases[ref.identity] = _Base(load_base_model(ref))
            log.info("base model loaded", base_model=ref.name, seconds=round(time.perf_counter() - started, 3))
        return base

    def _activate(self, base: _Base, version: AdapterVersion | None) -> Any:
        """The model to generate with, ``version``'s adapter active; ``version`` None: the base's context
        (``disable_adapter()`` once a ``PeftModel`` wraps it), to generate inside."""
        if version is None:
            return contextlib.nullcontext(base.loaded.model) if base.peft is None else _base_view(base.peft)
        name = adapter_name(version)
        if name not in base.adapters:
            identity = version.metadata().base_model_identity
            if identity != base.loaded.ref.identity:
                raise AdapterStoreError(f"{name} was trained on {identity}, not on {base.loaded.ref.identity}")
            base.peft = load_adapter(base.loaded.model if base.peft is None else base.peft, version, name=name)
            base.adapters.add(name)
            log.info("adapter loaded for serving", adapter=name)
        base.peft.set_adapter(name)
        return contextlib.nullcontext(base.peft)

    def _release(self, base: _Base, version: AdapterVersion | None) -> None:
        """Forget a job's hold on ``version``; delete adapters nobody holds that are not current."""
        with self._lock:
            if version is not None:
                self._held[adapter_name(version)] -= 1
            current = {adapter_name(v) for v in self._current.values() if v is not None}
            idle = {name for name in base.adapters if name not in current and self._held[name] <= 0}
        for name in idle:
            if len(base.adapters) > 1:  # peft keeps at least one adapter in a PeftModel
                if base.peft.active_adapter == name:
                    base.peft.set_adapter(next(iter(base.adapters - {name})))
                base.peft.delete_adapter(name)
                base.adapters.discard(name)
                log.info("adapter unloaded", adapter=name)

    def _preload(self, model: ServedModel, version: AdapterVersion | None, old: AdapterVersion | None) -> None:
        try:
            base, _ = self._ready(model, version)
            if old is not None:
                with self._lock:
                    self._held[adapter_name(old)] += 1
                self._release(base, old)
        except Exception as exc:  # a preload is an optimisation: the request that needs it reports the error
            log.warning("preloading a model failed", model=model.id, error=str(exc))

    def _steering_for(self, model: ServedModel, tokenizer: Any) -> Any:
        """The document's steering processor (``steering``'s), None for a base model or without one."""
        if self._steering is None or model.doc_key is None:
            return None
        return self._steering(model.doc_key, tokenizer)

    def _logits_processor(self, model: ServedModel, tokenizer: Any) -> Any:
        processor = self._steering_for(model, tokenizer)
        if processor is None:
            return None
        from transformers import LogitsProcessorList

        return LogitsProcessorList([processor])

    def _run(self, job: Job) -> None:
        base: Any = None
        finished = Finished("cancelled", 0, 0, None, 0.0)
        try:
            if not job.cancelled.is_set():
                base, view = self._ready(job.model, job.version)
                started = time.perf_counter()
                finished = self._generate(job, base, view)
                finished.generate_s = time.perf_counter() - started
                self._recent_job_s = 0.8 * self._recent_job_s + 0.2 * finished.generate_s
        except Exception as exc:
            finished = Finished("error", 0, 0, None, 0.0, error=exc)
        finally:
            if base is not None:
                self._release(base, job.version)
            elif job.version is not None:
                with self._lock:
                    self._held[adapter_name(job.version)] -= 1
            self._end(job, finished)

    def threads(self) -> int:
        """The torch threads of the next generation: ``num_threads``, or the free cores minus one (at least 1)."""
        return choose_threads(self.num_threads, self._cores, reserve=1)

    def _generate(self, job: Job, base: Any, view: Any) -> Finished:
        """Generate ``job`` on ``base`` with :meth:`_activate`'s ``view`` of it, emitting its deltas."""
        processor = self._logits_processor(job.model, base.loaded.tokenizer)
        with view as model, intra_op_threads(self.threads()):
            return _generate(job, model, base, processor)

    def _end(self, job: Job, finished: Finished) -> None:
        """The job leaves the queue (counted first, so its client can submit again at once), then ends."""
        with contextlib.suppress(RuntimeError):  # the event loop is gone (shutdown)
            job.loop.call_soon_threadsafe(self._job_done)
            job.emit(finished)


@contextlib.contextmanager
def _base_view(peft_model: Any) -> Iterator[Any]:
    with peft_model.disable_adapter():
        yield peft_model


def _generate(job: Job, model: Any, base: _Base, logits_processor: Any) -> Finished:
    """Run ``generate`` for ``job``, emitting text deltas as tokens come; the adapter state is set."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList
    from transformers.generation.streamers import BaseStreamer

    tokenizer = base.loaded.tokenizer
    ids = render_chat(tokenizer, job.messages, add_generation_prompt=True)
    context = getattr(base.loaded.model.config, "max_position_embeddings", None) or 0
    if context and len(ids) >= context:
        raise PromptTooLong(f"the prompt is {len(ids)} tokens; the model's context is {context} tokens")
    max_new = min(job.params.max_tokens, context - len(ids)) if context else job.params.max_tokens
    eos_ids = generation_eos_ids(base.loaded.model)
    text = _TextTracker(tokenizer, job.params.stop, job.params.end_at_block)
    state = {"prompt_seen": False, "eos": False}
    emitted: list[str] = []
    params = job.params
    choosing = params.choice_margin is not None and bool(job.quoted) and params.temperature == 0 and not params.stop

    def emit(delta: str) -> None:
        emitted.append(delta)
        if not choosing:  # a chosen answer is sent whole once decided
            job.emit(Delta(delta))

    class Streamer(BaseStreamer):
        def put(self, value: Any) -> None:
            if not state["prompt_seen"]:  # generate() first hands over the prompt
                state["prompt_seen"] = True
                return
            for token in value.reshape(rows, -1)[0].tolist():  # guided rows: the second follows the first
                if state["eos"] or text.stopped:
                    return
                if token in eos_ids:
                    state["eos"] = True
                    return
                delta = text.add(token)
                if delta:
                    emit(delta)

        def end(self) -> None:
            delta = text.flush()
            if delta:
                emit(delta)

    class Stop(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            done = job.cancelled.is_set() or text.stopped or state["eos"]
            return torch.full((input_ids.shape[0],), done, dtype=torch.bool)

    kwargs: dict[str, Any] = {"do_sample": params.temperature > 0}
    if params.temperature > 0:
        kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=0)
        torch.manual_seed(params.seed if params.seed is not None else int.from_bytes(os.urandom(4), "little"))
    input_ids = torch.tensor([ids], device=model.device)
    kwargs.update(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), logits_processor=logits_processor)
    pad_id = padding_id(tokenizer, eos_ids)
    unquoted: list[int] | None = None
    rows = 1
    if params.context_alpha > 0 and job.unquoted is not None:
        unquoted = render_chat(tokenizer, job.unquoted, add_generation_prompt=True)
        if params.temperature == 0:  # one forward pass per token for the prompt and its negative
            kwargs.update(guided_rows(params.context_alpha, [ids], [unquoted], pad_id, model.device, logits_processor))
            rows = 2
        else:
            kwargs.update(context_guidance(params.context_alpha, [unquoted], pad_id, model.device))
    with torch.no_grad():
        generated = model.generate(
            max_new_tokens=max_new,
            pad_token_id=pad_id,
            streamer=Streamer(),
            stopping_criteria=StoppingCriteriaList([Stop()]),
            return_dict_in_generate=True,  # its key/value cache is the choice's prompt (choose_command's prefilled)
            **kwargs,
        )
    if job.cancelled.is_set():
        reason = "cancelled"
    elif state["eos"] or text.stopped:
        reason = "stop"
    else:
        reason = "length"
    version = job.version.name if job.version is not None else None
    answer, tokens, chosen = "".join(emitted), len(text.tokens), None
    if choosing and reason != "cancelled":
        cache = generated.cache
        if rows > 1:
            cache.batch_select_indices(torch.tensor([0], device=model.device))  # the prompt's row
        choice = choose_command(
            model,
            tokenizer,
            ids,
            answer,
            job.quoted,
            params.choice_margin or 0.0,
            ended=state["eos"],
            eos_id=min(eos_ids, default=None),
            negative_ids=unquoted,
            alpha=params.context_alpha if unquoted is not None else 0.0,
            prefilled=(cache, generated.sequences[0].tolist()),
        )
        if choice.example is not None:
            chosen_tokens = len(tokenizer(choice.text, add_special_tokens=False)["input_ids"])
            if chosen_tokens <= max_new:  # within the request's max_tokens
                answer, chosen, tokens, reason = choice.text, choice.example, chosen_tokens, "stop"
    if choosing and answer:
        job.emit(Delta(answer))
    return Finished(reason, len(ids), tokens, version, 0.0, text=answer, chosen=chosen)


class _TextTracker:
    """Incremental detokenisation with stop strings: :meth:`add` returns the new text that is safe to
    send (held back: an incomplete UTF-8 sequence, and a suffix that may begin a stop string). ``end_at_block``:
    the text also ends with its first fenced code block's closing fence, or where it stands when no block opened
    within its first :data:`~learnerd.store.suggestions.BLOCK_OPENS_WITHIN` tokens
    (:func:`learnerd.store.suggestions.answer_end`)."""

    def __init__(self, tokenizer: Any, stop: Sequence[str], end_at_block: bool = False) -> None:
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.end_at_block = end_at_block
        self.tokens: list[int] = []
        self.sent = 0
        self.stopped = False
        self._text = ""

    def add(self, token: int) -> str:
        self.tokens.append(token)
        self._text = self.tokenizer.decode(self.tokens, skip_special_tokens=True)
        cut = min((i for i in (self._text.find(s) for s in self.stop) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._text = self._text[:cut]
        block_end = answer_end(self._text, len(self.tokens)) if self.end_at_block else None
        if block_end is not None:
            self.stopped = True
            self._text = self._text[:block_end]
        if self.stopped:
            return self._take(len(self._text))
        if self._text.endswith("\ufffd"):
            return ""
        hold = max((n for s in self.stop for n in range(1, len(s)) if self._text.endswith(s[:n])), default=0)
        return self._take(len(self._text) - hold)

    def flush(self) -> str:
        return self._take(len(self._text.rstrip("\ufffd")))

    def _take(self, end: int) -> str:
        if end <= self.sent:
            return ""
        out, self.sent = self._text[self.sent : end], end
        return out


class ModelCatalog:
    """The model ids served: the base models — ``base_models``, then each document's ``base_model`` under its
    own name, so a client can ask the base a document learned on — then one per ``.dlm`` document under the
    docs roots (id = the file's stem; its ``dlm_id`` is accepted too). No other base is offered: the built-in
    random tiny model only when named. Documents are re-read only when their size or mtime changed; one that does
    not parse is left out (and logged once per change).
    """

    def __init__(self, docs_roots: Sequence[Path], base_models: Sequence[str]) -> None:
        self.docs_roots = list(docs_roots)
        self.base_models = list(dict.fromkeys(base_models))
        self._cache: dict[Path, tuple[tuple[int, int], ServedModel | None]] = {}

    def models(self) -> list[ServedModel]:
        """Every served model, bases first (blocking file reads: call it in a worker thread)."""
        from learnerd.store.dlm import DocumentError, read_document

        documents: list[ServedModel] = []
        seen: dict[Path, tuple[tuple[int, int], ServedModel | None]] = {}
        for root in self.docs_roots:
            for path in sorted(root.rglob("*.dlm")) if root.is_dir() else []:
                try:
                    st = path.stat()
                except OSError:
                    continue
                stamp = (st.st_mtime_ns, st.st_size)
                cached = self._cache.get(path)
                if cached is None or cached[0] != stamp:
                    try:
                        fm = read_document(path).frontmatter
                        served = ServedModel(path.stem, fm.base_model, path.parent, fm.dlm_id, fm.system_prompt, path)
                    except (DocumentError, OSError) as exc:
                        log.warning("document not served: it does not parse", path=str(path), error=str(exc))
                        served = None
                    cached = (stamp, served)
                seen[path] = cached
                if cached[1] is not None:
                    documents.append(cached[1])
        self._cache = seen
        bases = [
            ServedModel(name, name) for name in dict.fromkeys([*self.base_models, *(d.base_model for d in documents)])
        ]
        return [*bases, *documents]

    def find(self, model_id: str) -> ServedModel | None:
        """The model named ``model_id`` (an id, or a document's ``dlm_id``), or None."""
        models = self.models()
        return next((m for m in models if m.id == model_id), None) or next(
            (m for m in models if m.doc_key == model_id), None
        )
