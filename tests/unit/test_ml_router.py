"""The router's decision and the threshold a version routes with (learnerd.ml.router), without a model: a request
at least the threshold similar to a learned question goes to the adapter, anything else to the base; a version
with no recorded threshold, or one recorded with another embedder, routes with the default; the endpoint's decision
(``similarity_route``) sends a request close only to a retrieved example the version never learned to the base."""

import dataclasses
import json

import numpy as np
import pytest

from learnerd.ml.retrieved_examples import NOTHING_TRAINED, TrainedOn, quoted_to_base
from learnerd.ml.router import (
    ADAPTER,
    DEFAULT_THRESHOLD,
    Route,
    Router,
    adapter_alone,
    close_hits,
    document_questions,
    recorded_threshold,
    served_examples,
    served_quotes,
    similarity_route,
    version_routing,
)
from learnerd.ml.rows import ChatMessage, TrainingRow
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from learnerd.store.manifest import MANIFEST_FILE
from tests.support.documents import qa_document
from tests.support.evaluation import commit_version


def unit(*rows: list[float]) -> np.ndarray:
    vectors = np.asarray(rows, dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_a_request_at_least_the_threshold_similar_goes_to_the_adapter_any_other_to_the_base():
    router = Router(unit([1, 0, 0], [0, 1, 0]), threshold=0.6)
    assert router.route(unit([1, 0, 0])[0]) == Route("adapter", pytest.approx(1.0))
    assert router.route(unit([0.6, 0.8, 0])[0]) == Route("adapter", pytest.approx(0.8))  # the nearest question
    at = router.route(np.asarray([0.6, 0, 0.8], dtype=np.float32))  # exactly the threshold: the adapter
    assert at.routed == "adapter" and at.similarity == pytest.approx(0.6)
    below = router.route(unit([0.5, 0, 0.866])[0])
    assert below.routed == "base" and below.similarity == pytest.approx(0.5, abs=1e-3)
    assert [r.routed for r in router.route_many(unit([0, 0, 1], [0, 1, 0]))] == ["base", "adapter"]


def test_a_router_needs_a_question():
    with pytest.raises(ValueError, match="at least one question"):
        Router(np.zeros((0, 3), dtype=np.float32), 0.6)


def test_without_a_threshold_for_the_serving_embedder_the_default_holds():
    recorded = {"threshold": 0.7123, "embedder": "all-MiniLM-L6-v2"}
    assert recorded_threshold(recorded, "all-MiniLM-L6-v2") == 0.7123
    assert recorded_threshold(None, "all-MiniLM-L6-v2") == DEFAULT_THRESHOLD  # a version from before routing
    assert recorded_threshold(recorded, "text-embedding-3-small") == DEFAULT_THRESHOLD  # another scale
    assert recorded_threshold({"embedder": "all-MiniLM-L6-v2"}, "all-MiniLM-L6-v2") == DEFAULT_THRESHOLD


def test_the_questions_are_the_user_turns_of_the_single_turn_pairs_once_each():
    rows = [
        TrainingRow.chat("a", "List the pods", "kubectl get pods", system="Answer with a command."),
        TrainingRow.chat("b", "List the pods", "kubectl get po"),
        TrainingRow.plain("c", "Some prose the adapter learned."),
        TrainingRow(
            "d",
            messages=(
                ChatMessage("user", "one"),
                ChatMessage("assistant", "1"),
                ChatMessage("user", "two"),
                ChatMessage("assistant", "2"),
            ),
        ),
        TrainingRow.chat("e", "Tag the release", "git tag v1"),
    ]
    assert document_questions(rows) == ["List the pods", "Tag the release"]


def test_always_adapter_compares_nothing():
    assert adapter_alone(["a", "b"]) == [ADAPTER, ADAPTER] and ADAPTER.similarity is None


def test_a_version_routes_on_the_questions_it_embodies_and_its_recorded_entry(tmp_path):
    doc = qa_document(tmp_path / "notes.dlm", [("List the pods", "kubectl get pods"), ("Tag it", "git tag v1")])
    document = read_document(doc)
    store = AdapterStore(tmp_path / "adapters")
    bare = commit_version(store, document.frontmatter.dlm_id)  # embodies no section, has no manifest
    assert version_routing(doc, bare) == ([], None)

    section = document.sections[-1].section_id
    with store.stage(document.frontmatter.dlm_id) as staging:
        (staging.path / "adapter_config.json").write_text("{}")
        routing = {"threshold": 0.65, "embedder": "all-MiniLM-L6-v2"}
        (staging.path / MANIFEST_FILE).write_text(json.dumps(manifest_dict(section, routing)))
        version = store.commit(staging, dataclasses.replace(bare.metadata(), section_ids=(section,)))
    assert version_routing(doc, version) == (["List the pods", "Tag it"], routing)


def manifest_dict(section: str, routing: dict) -> dict:
    return {
        "schema_version": 1, "doc_key": "d", "created_at": "2026-01-01", "mode": "fresh", "reason": "r",
        "base_model": "learnerd/tiny-llama", "parent_version": None, "previous_version": None, "steps": 1,
        "start_loss": 1.0, "final_loss": 0.5, "losses": [1.0], "sections": [{"section_id": section}], "added": [],
        "replayed": [], "removed": [], "routing": routing,
    }  # fmt: skip


ROUTER = Router(np.eye(2, dtype=np.float32)[:1], threshold=0.6)


def hit(score: float) -> dict[str, object]:
    """A retrieved example of cosine similarity ``score``."""
    return {"id": f"e{score}", "query": "q", "answer": "a", "language": "bash", "score": score}


def test_only_the_hits_at_or_above_the_threshold_are_close_in_their_order() -> None:
    found = [hit(0.9), hit(0.6), hit(0.59)]
    assert close_hits(found, 0.6) == found[:2]
    assert close_hits(found, None) == found


def test_the_base_is_quoted_the_nearest_close_hit_alone() -> None:
    found = [hit(0.9), hit(0.8), hit(0.7)]
    assert quoted_to_base(found) == [hit(0.9)] and quoted_to_base(found)[0] is not found[0], "a copy"
    assert quoted_to_base([]) == []


def test_the_adapter_is_quoted_every_hit_and_the_base_the_nearest_close_one() -> None:
    """The adapter trained under the ``retrieval_k`` nearest however far, so it is served all of them; the base
    only the nearest, and nothing when even that one is below the threshold."""
    found = [hit(0.7), hit(0.55), hit(0.5)]
    assert served_quotes(found, True, 0.6) == found and served_quotes(found, True, 0.6)[0] is not found[0], "a copy"
    assert served_quotes(found, False, 0.6) == [hit(0.7)]
    assert served_quotes(found[1:], False, 0.6) == [] and served_quotes(found[1:], True, 0.6) == found[1:]
    assert served_quotes(found[1:], False, None) == [hit(0.55)]
    assert served_quotes(found, True, 0.6, under_block=False) == [hit(0.7)], "trained without a block: close ones"


def test_served_examples_hold_back_from_a_plain_adapter_what_it_learned_and_nothing_from_the_base() -> None:
    """What the endpoint and the bench quote: :func:`served_quotes` by who answers, less the examples an adapter
    learned without a block (quoted to the base all the same); a request's own ``rag_k`` (``every_hit``) quotes all."""
    found = [{**hit(0.9), "id": "learned"}, {**hit(0.8), "id": "fresh"}, {**hit(0.5), "id": "far"}]
    plain = TrainedOn(frozenset({"learned"}), under_block=False)
    assert served_examples(found, True, 0.6, plain) == ([found[1]], ["learned"])
    assert served_examples(found, True, 0.6, plain, every_hit=True) == ([found[1], found[2]], ["learned"])
    assert served_examples(found, False, 0.6, plain) == ([found[0]], []), "the base: the nearest close one, kept"
    under = TrainedOn(frozenset({"learned"}), under_block=True)
    assert served_examples(found, True, 0.6, under) == (found, []), "trained under the block: every hit, none held"
    assert served_examples(found, False, 0.6, NOTHING_TRAINED, every_hit=True) == (found, [])


def test_before_a_first_version_the_base_answers_with_the_nearest_hits_similarity() -> None:
    assert similarity_route(False, None, None, [hit(0.8), hit(0.7)]) == Route("base", 0.8)
    assert similarity_route(False, None, None, []) == Route("base", None)


def test_a_version_without_questions_answers_everything() -> None:
    assert similarity_route(True, None, None, []) == ADAPTER


def test_the_nearest_learned_question_decides_and_a_task_logged_since_goes_to_the_base() -> None:
    assert similarity_route(True, ROUTER, 0.3, []) == Route("base", 0.3)
    assert similarity_route(True, ROUTER, 0.3, [hit(0.7)]) == Route("base", 0.3)  # close only to a fresh example
    assert similarity_route(True, ROUTER, 0.6, []) == Route("adapter", 0.6)  # at the threshold: the adapter
    assert similarity_route(True, ROUTER, 0.65, [hit(0.9)]) == Route("adapter", 0.65)
    # nearer an example logged since the cycle than anything learned: the base, which copies it
    none: frozenset[str] = frozenset()
    assert similarity_route(True, ROUTER, 0.65, [hit(0.9)], learned_examples=none) == Route("base", 0.65)
    assert similarity_route(True, ROUTER, 0.65004, [hit(0.65)], learned_examples=none) == Route("adapter", 0.65004)
    learned = frozenset({"e0.9"})  # the hit is an example the version learned: the adapter
    assert similarity_route(True, ROUTER, 0.65, [hit(0.9)], learned_examples=learned) == Route("adapter", 0.65)
