"""Serving while the evaluation reconciler evaluates, in one process — as ``learnerd run`` does at start-up when
the newest adapter has no report. The OpenAI-compatible app on a real aiohttp server, the official ``openai``
client, two documents on a tiny Llama with tied embeddings (as SmolLM2's are): one trained, one never trained.

Fifty requests to each document, from a cold start, while the evaluation evaluates the trained one again
and again: all answered, each as the model answers alone.

Each round starts cold (a fresh served-model manager, the report removed), so the first request of each
document loads the base while the evaluation loads it too: every request answers what the model answers
when loaded alone, ``/readyz`` stays ready, and every evaluation is a report. Without the model loader's
lock, the loads interleave transformers' process-wide swap of ``PreTrainedModel.tie_weights``.

And a served model that fails its known-answer check is never served: it is loaded again at once; while it
cannot be loaded whole, requests get 503 with ``Retry-After`` and ``/readyz`` says why, and it is loaded
again in the background (no request needed: a daemon that is not ready gets no traffic) until it passes. A
document whose adapter fails the check takes only itself down.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anyio
import openai
import pytest
from prometheus_client import CollectorRegistry

from learnerd.api.openai_app import openai_app
from learnerd.api.settings import ServeConfig
from learnerd.daemon.config import Config
from learnerd.eval.history import adapter_key, report_path
from learnerd.eval.report import load_report
from learnerd.ml import serving
from learnerd.ml.base_model import resolve_base_model
from learnerd.ml.serving import LOAD_ATTEMPTS, ModelCatalog, ServedModels
from learnerd.reconcilers.evaluation import evaluation_failure, evaluation_reconciler
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from tests.qa_pairs import QA_PAIRS
from tests.support.evaluation import qa_document, state_with_models
from tests.support.serving import local_app
from tests.support.tied_model import build_tied_tiny_model, commit_noise_adapter
from tests.support.training import train_document

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

ROUNDS = 5
REQUESTS = 50
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
UNTRAINED_ID = "01KPPJZWBDDDYRESSA0HESRDHT"
BROKEN_ID = "01KPPJZWBDDDYRESSA0HESRDHV"
TOKEN = "serving-during-evaluation-token"  # documents' adapters are served only to its bearers


class Running:
    """What the endpoint asks of a running daemon (:class:`~learnerd.api.surface.ControlSurface`): its state,
    its readiness (the served models'), no retrieval (``rag_k`` is 0) and no memory of answers."""

    state = "running"

    def __init__(self, served: ServedModels) -> None:
        self.served = served

    def unready_reason(self) -> str | None:
        return self.served.unready_reason()

    async def search(self, text: str, k: int, vector=None) -> list:
        raise AssertionError("rag_k is 0: nothing is retrieved")

    def record_served(self, answer: object) -> None:
        """Remembers nothing: this test is about serving during an evaluation."""


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory, models_dir: Path, tiny_model_dir: Path):
    """``(cfg, trained document, untrained document)`` on the tied tiny Llama; the first trained one cycle."""
    root = tmp_path_factory.mktemp("serve-during-eval")
    tied = build_tied_tiny_model(tiny_model_dir, root / "tied-tiny-llama")
    state = state_with_models(root, models_dir)
    docs = root / "docs"
    docs.mkdir()
    text = qa_document(QA_PAIRS[:4], epochs=1, per_section=2).replace("learnerd/tiny-llama", str(tied))
    trained = docs / "trained.dlm"
    trained.write_text(text)
    untrained = docs / "untrained.dlm"
    untrained.write_text(text.replace(read_document(trained).frontmatter.dlm_id, UNTRAINED_ID))
    outcome = anyio.run(train_document, AdapterStore(state / "adapters"), trained, models_dir)
    assert outcome.version is not None and outcome.version.name == "v0001"
    cfg = Config(state_dir=state, docs_dirs=[docs])
    cfg.evaluation.null_runs = 0
    cfg.evaluation.max_prompts = 1
    cfg.evaluation.num_threads = 1
    return cfg, trained, untrained


@contextlib.asynccontextmanager
async def endpoint(cfg: Config, reload_after_s: float = 30.0) -> AsyncIterator[tuple[str, ServedModels]]:
    """A cold served-model manager behind the OpenAI-compatible app on 127.0.0.1: ``(base URL, served)``."""
    store = AdapterStore(cfg.layout.adapters_dir)
    served = ServedModels(store, cfg.layout.models_dir, num_threads=1, reload_after_s=reload_after_s)
    catalog = ModelCatalog(cfg.layout.docs_roots, [])
    settings = ServeConfig(max_tokens=8, routing="always-adapter", rag_k=0)  # serving beside an evaluation
    app = openai_app(catalog, served, Running(served), settings, CollectorRegistry(), TOKEN, without_token="none")
    try:
        async with local_app(app) as url:
            yield url, served
    finally:
        served.close()


async def ask(url: str, model: str) -> tuple[str | None, str]:
    """``(system_fingerprint, answer)`` of a greedy completion from the official client (no retries)."""
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0, timeout=120.0) as api:
        reply = await api.chat.completions.create(model=model, messages=QUESTION, max_tokens=8, temperature=0)
    return reply.system_fingerprint, reply.choices[0].message.content or ""


async def ask_into(url: str, model: str, answers: dict, failures: list[BaseException]) -> None:
    """:func:`ask`, its answer put in ``answers[model]``, or its exception in ``failures``."""
    try:
        answers[model] = await ask(url, model)
    except Exception as exc:
        failures.append(exc)


async def readyz(url: str) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/readyz") as response:
        return response.status, await response.json()


async def test_both_documents_answer_while_the_evaluation_loads_the_same_base(documents):
    cfg, trained, _ = documents
    version = AdapterStore(cfg.layout.adapters_dir).current(adapter_key(read_document(trained)))
    async with endpoint(cfg) as (url, _):  # the answers of models loaded with nothing beside them
        known = {name: await ask(url, name) for name in ("trained", "untrained")}
    assert known["trained"][0].endswith("@v0001") and known["untrained"][0] == f"{UNTRAINED_ID}@base"

    reconciler = evaluation_reconciler(cfg)
    for round_ in range(ROUNDS):
        report_path(version).unlink(missing_ok=True)
        answers: dict[str, tuple[str | None, str]] = {}
        failures: list[BaseException] = []
        async with endpoint(cfg) as (url, _):
            async with anyio.create_task_group() as tg:
                tg.start_soon(reconciler.reconcile, str(trained))
                tg.start_soon(ask_into, url, "untrained", answers, failures)
                tg.start_soon(ask_into, url, "trained", answers, failures)
            assert failures == [], f"round {round_}"
            assert answers == known, f"round {round_}"
            assert await readyz(url) == (200, {"status": "ready"}), f"round {round_}"
        assert evaluation_failure(load_report(report_path(version))) is None, f"round {round_}"


async def test_fifty_requests_to_each_document_while_evaluations_run_all_answer(documents):
    cfg, trained, _ = documents
    version = AdapterStore(cfg.layout.adapters_dir).current(adapter_key(read_document(trained)))
    async with endpoint(cfg) as (url, _):
        known = {name: await ask(url, name) for name in ("trained", "untrained")}
    reconciler = evaluation_reconciler(cfg)
    answers: dict[str, list[tuple[str | None, str]]] = {"trained": [], "untrained": []}
    failures: list[BaseException] = []
    reports: list[str | None] = []
    requests_done = anyio.Event()

    async def evaluate_while_serving() -> None:
        while not requests_done.is_set():
            report_path(version).unlink(missing_ok=True)
            await reconciler.reconcile(str(trained))
            reports.append(evaluation_failure(load_report(report_path(version))))

    async def requests(url: str, model: str) -> None:
        for _ in range(REQUESTS):
            try:
                answers[model].append(await ask(url, model))
            except Exception as exc:
                failures.append(exc)

    async with endpoint(cfg) as (url, _):  # cold: the first requests load the base beside the evaluation
        async with anyio.create_task_group() as tg:
            tg.start_soon(evaluate_while_serving)
            async with anyio.create_task_group() as clients:
                clients.start_soon(requests, url, "trained")
                clients.start_soon(requests, url, "untrained")
            requests_done.set()
        assert failures == []
        assert answers == {name: [answer] * REQUESTS for name, answer in known.items()}
        assert await readyz(url) == (200, {"status": "ready"})
    assert reports and all(failure is None for failure in reports)


async def test_a_model_that_fails_its_check_is_loaded_again_and_never_served(documents, monkeypatch):
    """The first load of the base skips transformers' weight tying (what a load beside another did before the
    loader's lock): the check refuses it, the base is loaded again, and the request is answered. While every
    load fails, requests get 503 with ``Retry-After`` and ``/readyz`` gives the reason."""
    from transformers import PreTrainedModel

    cfg, _, _ = documents
    loads = {"broken": 1}
    load_base_model = serving.load_base_model

    def sometimes_untied(ref):
        if loads["broken"] <= 0:
            return load_base_model(ref)
        loads["broken"] -= 1
        with monkeypatch.context() as patch:
            patch.setattr(PreTrainedModel, "tie_weights", lambda self, *args, **kwargs: None)
            return load_base_model(ref)

    monkeypatch.setattr(serving, "load_base_model", sometimes_untied)
    async with endpoint(cfg) as (url, served):
        known = await ask(url, "untrained")
        assert loads["broken"] == 0 and served.unready_reason() is None  # reloaded, then served
        assert await readyz(url) == (200, {"status": "ready"})

    loads["broken"] = 100  # every load is broken
    async with endpoint(cfg, reload_after_s=2.0) as (url, served):
        for _ in range(2):  # refused after two loads; then refused at once until the background reload
            with pytest.raises(openai.APIStatusError) as refused:
                await ask(url, "untrained")
            assert refused.value.status_code == 503 and refused.value.response.headers["Retry-After"] in ("1", "2")
            status, body = await readyz(url)
            assert status == 503 and body["status"] == "unready" and "lm_head.weight" in body["reason"]
        assert loads["broken"] == 100 - LOAD_ATTEMPTS
        loads["broken"] = 0  # what broke the loads is gone: the background reload passes, with no request
        deadline = anyio.current_time() + 60
        while (await readyz(url))[0] != 200:
            assert anyio.current_time() < deadline, "never reloaded"
            await anyio.sleep(0.2)
        assert await ask(url, "untrained") == known


async def test_an_adapter_that_fails_its_check_takes_only_its_document_down(documents):
    """A document whose adapter's logits are NaN (a training that diverged) gets 503 and makes ``/readyz`` say
    so; the other document on the same base still answers."""
    cfg, trained, _ = documents
    broken = trained.parent / "broken.dlm"
    broken.write_text(trained.read_text().replace(read_document(trained).frontmatter.dlm_id, BROKEN_ID))
    base = resolve_base_model(read_document(broken).frontmatter.base_model, cache_dir=cfg.layout.models_dir)
    commit_noise_adapter(AdapterStore(cfg.layout.adapters_dir), BROKEN_ID, base, scale=float("nan"))
    try:
        async with endpoint(cfg) as (url, _):
            known = await ask(url, "untrained")
            with pytest.raises(openai.APIStatusError) as refused:
                await ask(url, "broken")
            assert refused.value.status_code == 503 and "Retry-After" in refused.value.response.headers
            status, body = await readyz(url)
            assert status == 503 and body["reason"].startswith("model 'broken' failed its known-answer check")
            assert await ask(url, "untrained") == known
    finally:
        broken.unlink()
