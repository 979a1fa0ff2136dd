"""The promotion gate's probes score the served system (:attr:`learnerd.eval.probes.base.ProbeContext.route`): an
item the router gives the base is scored as the base's answer, one it gives the adapter as the adapter's, and the
adapter alone's numbers stand beside them. The built-in tiny model with a noise adapter that changes every
answer, a document of four questions, and the real router under MiniLM."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from benchmarks.bench_eval import make_adapter
from learnerd.eval.inputs import document_inputs
from learnerd.eval.probes import calibration_drift, coherence, retention
from learnerd.eval.probes.base import EvalOptions, ProbeContext
from learnerd.ml.router import Router, TextRouter, calibrate, embed_memo, text_router
from learnerd.store.adapters import AdapterMetadata, AdapterStore
from learnerd.store.dlm import parse_text
from learnerd.training.ingredients.replay import replay_prompts
from tests.support.sway_peer import learnerd_backend

pytestmark = pytest.mark.usefixtures("one_torch_thread")
QUESTIONS = [f"Which colour is flag {i}?" for i in range(4)]
DOC = "---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: learnerd/tiny-llama\n---\n::instruction::\n" + "".join(
    f"### Q !probe\n{q}\n\n### A\nColour {i}\n\n" for i, q in enumerate(QUESTIONS)
)


@pytest.fixture(scope="module")
def contexts(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory, minilm):
    """``(served, alone)``: probe contexts over one noise adapter, routed by the document's calibrated threshold,
    and with the adapter alone answering everything."""
    backend = learnerd_backend(tiny_model_dir, make_adapter(tiny_model_dir, tmp_path_factory.mktemp("noisy"), 0.5))
    inputs = document_inputs(parse_text(DOC), backend.tokenizer)
    options = EvalOptions(drift_items_limit=24)
    calibration = calibrate(QUESTIONS, minilm, replay_prompts())
    router = TextRouter(minilm, Router(embed_memo(minilm, QUESTIONS), calibration.threshold), recorded=True)
    return ProbeContext(backend, inputs, options, route=router), ProbeContext(backend, inputs, options)


def own_answer_items(ctx: ProbeContext, prompts: list[str]) -> list[retention.PoolItem]:
    """Items whose gold is a word of the base's own greedy answer, so the random tiny base answers them right."""
    encoder = ctx.inputs.encoder
    with ctx.backend.as_base() as base:
        answers = base.generate_many([encoder.prompt(p) for p in prompts], [32] * len(prompts))
    items = []
    for prompt, ids in zip(prompts, answers, strict=True):
        words = re.findall(r"\w{2,}", encoder.decode(ids))
        if words:
            items.append(retention.PoolItem("test", prompt, words[0]))
    return items


def test_answer_retention_scores_the_items_routed_to_the_base_as_the_bases(contexts):
    served_ctx, alone_ctx = contexts
    general = [item.prompt for item in retention.general_pool()[:16]]
    pool = own_answer_items(served_ctx, general + QUESTIONS)
    served, alone = retention.judge(served_ctx, pool), retention.judge(alone_ctx, pool)
    routed = served.evidence["routed"]
    asked = {item.prompt for item in pool}
    assert routed == {"adapter": len(asked & set(QUESTIONS)), "base": len(asked - set(QUESTIONS))}
    assert routed["adapter"] and routed["base"]
    lost = served.evidence["lost_wording"] + served.evidence["lost_knowledge"]
    assert served.evidence["kept"] == routed["base"] + routed["adapter"] - lost, "every base-routed item is kept"
    assert all(entry["prompt"] in QUESTIONS for entry in served.evidence["lost"])
    assert any(entry["prompt"] not in QUESTIONS for entry in alone.evidence["lost"]), "the adapter loses some alone"
    right = served.evidence["base_right"]
    assert served.evidence["adapter_alone"] == {
        "kept": alone.evidence["kept"],
        "kept_fraction": alone.raw,
        "answered": right,
    }
    assert served.raw > alone.raw and alone.evidence["routed"] == {"adapter": len(pool), "base": 0}
    # the adapter alone answers at most retention_alone_sample of the items routed to the base: an estimate
    sampled_ctx = dataclasses.replace(
        served_ctx, options=served_ctx.options.model_copy(update={"retention_alone_sample": 2})
    )
    sampled = retention.judge(sampled_ctx, pool)
    assert sampled.evidence["kept"] == served.evidence["kept"] and sampled.evidence["routed"] == routed
    assert sampled.evidence["adapter_alone"]["answered"] == routed["adapter"] + 2 < right
    assert sampled.evidence["js_prompts"] == routed["adapter"] + 2, "the adapter runs only the prompts it answers"
    assert "estimated from" in sampled.message and 0 <= sampled.evidence["adapter_alone"]["kept"] <= right


def test_the_alone_sample_is_seeded_and_whole_when_small():
    assert retention.alone_sample([3, 5, 8], 3) == [3, 5, 8]
    drawn = retention.alone_sample(list(range(100)), 10)
    assert len(drawn) == 10 == len(set(drawn)) and drawn == sorted(drawn) == retention.alone_sample(
        list(range(100)), 10
    )


def test_calibration_drift_as_served_gives_the_base_the_general_items(contexts):
    served_ctx, alone_ctx = contexts
    served, alone = calibration_drift.run(served_ctx), calibration_drift.run(alone_ctx)
    assert alone.raw > 0, "the noise adapter regresses general items when it answers them"
    assert served.evidence["routed"] == {"adapter": 0, "base": 24} and served.raw == 0.0
    assert served.evidence["adapter_alone"]["fraction_regressed"] == alone.raw


def test_a_dialogue_turn_the_router_gives_the_base_is_answered_by_the_base(contexts, minilm):
    served_ctx, alone_ctx = contexts
    served = coherence.per_turn(served_ctx)
    assert served.by_base == 0, "the document's own questions go to its adapter"
    never = TextRouter(minilm, Router(embed_memo(minilm, QUESTIONS), threshold=1.5), recorded=False)
    to_base = ProbeContext(served_ctx.backend, served_ctx.inputs, served_ctx.options, route=never)
    result = coherence.run(to_base)
    assert result.evidence["routed_to_base"] == 4 * served_ctx.options.max_turns
    assert result.evidence["adapter_alone"]["answered_per_turn"] == coherence.per_turn(alone_ctx).answered


def test_the_dialogues_ask_pairs_spread_over_the_whole_document(contexts):
    """``k`` dialogues ask ``k`` pairs spread evenly over the document (a Latin square of them), not its first ``k``:
    a document's first section is often one kind of task (at full size, four ``find`` commands)."""
    served_ctx, _ = contexts
    asked: list[list[str]] = []

    def recorded(texts):
        asked.append(list(texts))
        return served_ctx.route(texts)

    options = served_ctx.options.model_copy(update={"dialogue_prompts": 2})
    coherence.per_turn(dataclasses.replace(served_ctx, options=options, route=recorded))
    first, middle = QUESTIONS[0], QUESTIONS[2]
    assert asked == [[first, middle], [middle, first]] * (options.max_turns // 2)
    assert coherence.spread(100, 4) == [0, 25, 50, 75] and coherence.spread(5, 5) == [0, 1, 2, 3, 4]


def test_the_dialogue_is_answered_under_the_nearest_learned_examples_the_endpoint_quotes(contexts, monkeypatch):
    """With ``[serve] rag_k``, the served dialogue's turns carry the learned examples nearest to the turn's question
    in a block of quoted data, as the endpoint sends them: all ``rag_k`` to the adapter, the nearest at or above the
    threshold to the base; the adapter alone answers without them."""
    served_ctx, alone_ctx = contexts
    examples = tuple((q, f"Colour {i}") for i, q in enumerate(QUESTIONS))
    quoting = dataclasses.replace(served_ctx.route, examples=examples, rag_k=2)
    near, general = quoting.quoted([QUESTIONS[1], "What is 17 times 3?"], [True, False])
    assert near[0]["query"] == QUESTIONS[1] and near[0]["answer"] == "Colour 1" and len(near) == 2
    assert near[0]["score"] >= quoting.router.threshold and general == []
    (alone,) = quoting.quoted([QUESTIONS[1]], [False])
    assert [h["query"] for h in alone] == [QUESTIONS[1]], "the base: the nearest close example alone"
    assert dataclasses.replace(quoting, rag_k=0).quoted([QUESTIONS[1]], [True]) == [[]]

    blocks, with_examples = [], coherence.with_examples

    def recorded(messages, hits):
        blocks.append((messages[-1].content, [h["query"] for h in hits]))
        return with_examples(messages, hits)

    monkeypatch.setattr(coherence, "with_examples", recorded)
    result = coherence.run(dataclasses.replace(served_ctx, quote=quoting.quoted))
    turns = 4 * served_ctx.options.max_turns
    assert result.verdict.value != "error", result.message
    assert result.evidence["quoted_turns"] == turns == len(blocks) and result.evidence["routed_to_base"] == 0
    assert all(hits[0] == asked for asked, hits in blocks), "each turn quotes its own question's example first"
    monkeypatch.undo()
    assert result.evidence["adapter_alone"]["answered_per_turn"] == coherence.per_turn(alone_ctx).answered


def test_a_quoted_turn_carries_the_command_the_answering_model_chooses(contexts):
    """As the endpoint answers it (``[serve] choice_margin``): each turn quoted its own question's example alone, at
    the widest margin every answer is the quoted one, where the noise adapter's own answers are not."""
    served_ctx, _ = contexts
    examples = tuple((q, f"Colour {i}") for i, q in enumerate(QUESTIONS))
    quoting = dataclasses.replace(served_ctx.route, examples=examples, rag_k=1)
    quoted = dataclasses.replace(served_ctx, quote=quoting.quoted)
    own = coherence.run(quoted)
    chosen = coherence.run(dataclasses.replace(quoted, choice_margin=10.0))
    assert chosen.evidence["quoted_turns"] == 4 * served_ctx.options.max_turns
    assert chosen.evidence["answered_per_turn"] == [4] * served_ctx.options.max_turns
    assert own.evidence["answered_per_turn"] != chosen.evidence["answered_per_turn"], "not vacuous"


@pytest.mark.parametrize("trained_k", [0, 3])
def test_learned_examples_are_quoted_only_to_a_version_that_trained_under_them(trained_k, tmp_path, minilm):
    """As the endpoint holds a version's learned examples back unless it trained retrieval-augmented rows
    (:attr:`learnerd.ml.retrieved_examples.TrainedOn.held_back`), the evaluation quotes them only then."""
    document = parse_text(DOC)
    store = AdapterStore(tmp_path / "adapters")
    sections = tuple(s.section_id for s in document.sections)
    meta = AdapterMetadata(
        "learnerd/tiny-llama",
        "id",
        sections,
        sections,
        (),
        None,
        60,
        1.0,
        0.1,
        0,
        42,
        {"retrieval_k": trained_k},
        {},
        "",
    )
    with store.stage(document.frontmatter.dlm_id) as staging:
        (staging.path / "adapter_config.json").write_text("{}")
        version = store.commit(staging, meta)
    router = text_router(document, version, minilm, rag_k=3)
    hits = router.quoted([QUESTIONS[2]], [True])[0]
    if trained_k:
        assert router.describe()["rag_k"] == 3 and hits[0]["answer"] == "Colour 2"
    else:
        assert router.describe()["rag_k"] == 0 and hits == []
    assert router([QUESTIONS[2]])[0].routed == "adapter"
