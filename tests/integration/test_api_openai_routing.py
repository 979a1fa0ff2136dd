"""Routing per request on the OpenAI-compatible endpoint (``[serve] routing``, :mod:`learnerd.ml.router`): a real
aiohttp server over a real served-model manager on the built-in tiny Llama, a document's version trained one cycle
with its threshold calibrated by the real MiniLM, asked with the official ``openai`` client's default call. A
learned question is answered by the adapter, "What is the capital of France?" by the base (exactly the base
model's answer), a task logged after the version by the base under its quoted example with context-aware decoding,
and ``always-adapter`` gives the adapter everything."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import anyio
import numpy as np
import openai
import pytest
from prometheus_client import CollectorRegistry

from learnerd.api.openai_app import openai_app
from learnerd.api.settings import ServeConfig
from learnerd.ml import serving
from learnerd.ml.base_model import load_model_directory
from learnerd.ml.generate import greedy_replies
from learnerd.ml.retrieved_examples import with_examples
from learnerd.ml.rows import ChatMessage
from learnerd.ml.serving import ModelCatalog, ServedModels
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from learnerd.store.manifest import read_manifest
from learnerd.store.suggestions import ServedAnswer, command_of
from tests.support.documents import qa_document
from tests.support.serving import local_app
from tests.support.training import train_document

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("one_torch_thread")]
LEARNED = "Restart the api deployment in dev"
TOKEN = "routing-test-token-0123456789"
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
COMMANDS = [
    (LEARNED, "kubectl rollout restart deployment/api -n dev"),
    ("List the pods in the dev namespace", "kubectl get pods -n dev"),
]
FRESH = ("Show the disk usage of the logs directory", "du -sh logs")
"""An example logged after the version was trained: in the index, not in what v0001 learned."""


class Control:
    """What the endpoint asks of the daemon (:class:`~learnerd.api.surface.ControlSurface`): running, the served
    models' readiness, the session's MiniLM as the daemon's embedder, retrieval over the document's pairs and
    :data:`FRESH` (exact cosine, as the daemon's index); the answers it is asked to remember, kept in
    ``answers``."""

    state = "running"

    def __init__(self, served: ServedModels, embedder) -> None:
        self.served, self.embedder = served, embedder
        self.embedder_name = embedder.name
        self.answers: list[ServedAnswer] = []

    def unready_reason(self) -> str | None:
        return self.served.unready_reason()

    def record_served(self, answer: ServedAnswer) -> None:
        self.answers.append(answer)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return await anyio.to_thread.run_sync(self.embedder.embed, list(texts))

    async def search(self, text: str, k: int, vector=None) -> list:
        examples = [*COMMANDS, FRESH]
        vectors = await self.embed([q for q, _ in examples])
        query = vector if vector is not None else (await self.embed([text]))[0]
        scores = vectors @ query
        best = np.argsort(-scores)[:k]
        return [
            {
                "id": f"ex{i}",
                "query": examples[i][0],
                "answer": examples[i][1],
                "language": "bash",
                "score": round(float(scores[i]), 4),
            }
            for i in best
        ]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, models_dir: Path, tiny_model_dir: Path, minilm) -> Path:
    """The root of a document ``commands`` whose v0001 was trained one cycle (its threshold calibrated) and
    promoted."""
    root = tmp_path_factory.mktemp("routing")
    doc = qa_document(root / "docs" / "commands.dlm", COMMANDS, training={"learning_rate": 0.01, "num_epochs": 1})
    outcome = anyio.run(lambda: train_document(AdapterStore(root / "adapters"), doc, models_dir, embedder=minilm))
    assert outcome.version is not None and read_manifest(outcome.version.path).routing is not None
    return root


@pytest.fixture(scope="module")
def trained_under_block(tmp_path_factory: pytest.TempPathFactory, models_dir: Path, minilm) -> Path:
    """As :func:`trained`, v0001 trained with retrieval-augmented rows (``retrieval_k`` 1)."""
    root = tmp_path_factory.mktemp("routing-block")
    training = {"learning_rate": 0.01, "num_epochs": 1, "retrieval_k": 1}
    doc = qa_document(root / "docs" / "commands.dlm", COMMANDS, training=training)
    outcome = anyio.run(lambda: train_document(AdapterStore(root / "adapters"), doc, models_dir, embedder=minilm))
    assert outcome.version is not None and outcome.version.metadata().hyperparameters["retrieval_k"] == 1
    return root


@contextlib.asynccontextmanager
async def endpoint(
    root: Path, models_dir: Path, minilm, routing: str, **serve
) -> AsyncIterator[tuple[openai.AsyncOpenAI, Control]]:
    served = ServedModels(AdapterStore(root / "adapters"), models_dir, num_threads=1)
    control = Control(served, minilm)
    catalog = ModelCatalog([root / "docs"], [])
    settings = ServeConfig(**{"max_tokens": 24, "routing": routing, **serve})
    app = openai_app(catalog, served, control, settings, CollectorRegistry(), TOKEN, without_token="none")
    try:
        async with (
            local_app(app) as url,
            openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0) as client,
        ):
            yield client, control
    finally:
        served.close()


async def test_a_learned_question_goes_to_the_adapter_and_the_capital_of_france_to_the_base(
    trained: Path, models_dir: Path, minilm
):
    dlm_id = read_document(trained / "docs" / "commands.dlm").frontmatter.dlm_id
    async with endpoint(trained, models_dir, minilm, "similarity") as (client, control):
        learned = await client.chat.completions.create(
            model="commands", messages=[{"role": "user", "content": LEARNED}]
        )
        france = await client.chat.completions.create(model="commands", messages=FRANCE, temperature=0)
        base = await client.chat.completions.create(model="learnerd/tiny-llama", messages=FRANCE, temperature=0)
        stream = await client.chat.completions.create(model="commands", messages=FRANCE, stream=True)
        first = await anext(aiter(stream))
        async for _ in stream:
            pass

    info = learned.model_extra["learnerd"]
    assert (info["routed"], info["adapter"]) == ("adapter", "v0001") and info["similarity"] == pytest.approx(1.0)
    assert learned.system_fingerprint == f"{dlm_id}@v0001"
    assert info["context_alpha"] == 0.0, "the adapter answers without context-aware decoding"
    info = france.model_extra["learnerd"]
    threshold = read_manifest(AdapterStore(trained / "adapters").current(dlm_id).path).routing["threshold"]
    assert (info["routed"], info["adapter"]) == ("base", None) and info["similarity"] < threshold
    assert info["retrieved"] == [], "no example is quoted into a request about nothing the document holds"
    assert info["context_alpha"] == 0.0, "nothing quoted: decoded as the base decodes it"
    assert france.system_fingerprint == f"{dlm_id}@base"
    assert france.choices[0].message.content == base.choices[0].message.content  # the base's own answer
    assert base.model_extra["learnerd"]["routed"] == "base" and base.model_extra["learnerd"]["similarity"] is None
    assert first.model_extra["learnerd"]["routed"] == "base", "the first chunk of a stream says it too"
    assert [(a.version, a.answer) for a in control.answers[:2]] == [
        ("v0001", learned.choices[0].message.content),
        ("base", france.choices[0].message.content),
    ]


async def test_a_task_logged_after_the_version_goes_to_the_base_with_its_example_quoted(
    trained: Path, models_dir: Path, minilm, tiny_model_dir: Path
):
    asked = [{"role": "user", "content": "How big is the logs directory on disk?"}]
    dlm_id = read_document(trained / "docs" / "commands.dlm").frontmatter.dlm_id
    async with endpoint(trained, models_dir, minilm, "similarity", choose_quoted=False) as (client, _):
        fresh = await client.chat.completions.create(model="commands", messages=asked, max_tokens=24)
    info = fresh.model_extra["learnerd"]
    threshold = read_manifest(AdapterStore(trained / "adapters").current(dlm_id).path).routing["threshold"]
    assert [h["answer"] for h in info["retrieved"]] == [FRESH[1]], "the fresh example alone is quoted to the base"
    assert all(h["score"] >= threshold for h in info["retrieved"]), "only examples over the threshold are quoted"
    assert (info["routed"], info["adapter"]) == ("base", None), "no version learned it: the base copies its example"
    assert info["similarity"] < threshold <= info["retrieved"][0]["score"]
    # decoded with context-aware decoding (the default α) against the request without its examples: the tokens the
    # formula gives (tests/integration/test_ml_generate.py), as the endpoint's text tracker renders them
    assert info["context_alpha"] == ServeConfig().context_alpha > 0
    model, tokenizer = load_model_directory(tiny_model_dir)  # the base answers it
    messages = [ChatMessage("user", asked[0]["content"])]
    quoted = [with_examples(messages, info["retrieved"])]

    def rendered(alpha: float) -> str:
        reply = greedy_replies(model, tokenizer, quoted, max_new_tokens=24, negatives=[messages], context_alpha=alpha)
        text = serving._TextTracker(tokenizer, (), end_at_block=True)  # as the endpoint ends a quoted answer
        return "".join(text.add(t) for t in reply[0].token_ids) + text.flush()

    assert fresh.choices[0].message.content == rendered(info["context_alpha"]) != rendered(0.0)


async def test_the_quoted_command_the_model_chooses_replaces_its_own_answer(trained: Path, models_dir: Path, minilm):
    """The base answering a fresh task under its quoted example, at the widest margin: the tiny model's own answer
    (it ends within :data:`~learnerd.store.suggestions.BLOCK_OPENS_WITHIN` tokens, by itself) gives way to the quoted
    command, in one delta on a stream, and the response names the example; with ``choose_quoted`` off it stays."""
    asked = [{"role": "user", "content": "How big is the logs directory on disk?"}]
    async with endpoint(trained, models_dir, minilm, "similarity", max_tokens=80, choice_margin=10.0) as (client, _):
        chosen = await client.chat.completions.create(model="commands", messages=asked)
        stream = await client.chat.completions.create(model="commands", messages=asked, stream=True)
        chunks = [chunk async for chunk in stream]
    async with endpoint(trained, models_dir, minilm, "similarity", max_tokens=80, choose_quoted=False) as (client, _):
        own = await client.chat.completions.create(model="commands", messages=asked)
    info = chosen.model_extra["learnerd"]
    assert (info["routed"], [h["id"] for h in info["retrieved"]]) == ("base", ["ex2"])
    assert command_of(chosen.choices[0].message.content).text == FRESH[1]
    assert command_of(own.choices[0].message.content).text != FRESH[1], "the comparison is not vacuous"
    assert (info["chosen"], own.model_extra["learnerd"]["chosen"]) == ("ex2", None)
    assert chosen.choices[0].finish_reason == "stop"
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert deltas == [chosen.choices[0].message.content]
    assert chunks[-1].model_extra["learnerd"] == {"chosen": "ex2"}


async def test_an_adapter_trained_under_quoted_examples_is_quoted_the_rag_k_nearest_however_far(
    trained_under_block: Path, models_dir: Path, minilm
):
    """Its training rows quoted the nearest examples whatever their similarity, so the endpoint does too; the
    request about nothing the document holds still reaches the base unquoted."""
    dlm_id = read_document(trained_under_block / "docs" / "commands.dlm").frontmatter.dlm_id
    threshold = read_manifest(AdapterStore(trained_under_block / "adapters").current(dlm_id).path).routing["threshold"]
    async with endpoint(trained_under_block, models_dir, minilm, "similarity") as (client, _):
        asked = [{"role": "user", "content": LEARNED}]
        learned = await client.chat.completions.create(model="commands", messages=asked, max_tokens=4)
        france = await client.chat.completions.create(model="commands", messages=FRANCE, max_tokens=4)
    info = learned.model_extra["learnerd"]
    assert info["routed"] == "adapter" and info["withheld"] == []
    answers = [h["answer"] for h in info["retrieved"]]
    assert answers[0] == COMMANDS[0][1] and sorted(answers) == sorted([*(a for _, a in COMMANDS), FRESH[1]])
    assert len(answers) == ServeConfig().rag_k and info["retrieved"][-1]["score"] < threshold, "however far"
    assert (france.model_extra["learnerd"]["routed"], france.model_extra["learnerd"]["retrieved"]) == ("base", [])


async def test_always_adapter_gives_the_adapter_every_request(trained: Path, models_dir: Path, minilm):
    async with endpoint(trained, models_dir, minilm, "always-adapter") as (client, _):
        france = await client.chat.completions.create(model="commands", messages=FRANCE)
    info = france.model_extra["learnerd"]
    assert (info["routed"], info["adapter"], info["similarity"]) == ("adapter", "v0001", None)
