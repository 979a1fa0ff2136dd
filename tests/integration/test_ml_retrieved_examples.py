"""The examples a version learned without retrieval-augmented rows are held back from its block of retrieved
examples."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerd.ml.base_model import resolve_base_model
from learnerd.ml.retrieved_examples import TrainedOn, split_learned, trained_on
from learnerd.store.adapters import AdapterStore
from tests.support.tied_model import commit_noise_adapter

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_examples_a_version_learned_without_retrieval_rows_are_held_back_from_its_block(
    models_dir: Path, tmp_path: Path
):
    """A version trained without retrieval rows is quoted only the hits its manifest does not list (in their
    order, none replaced); one trained with them, or whose manifest or metadata is missing, is quoted all."""
    base = resolve_base_model("learnerd/tiny-llama", cache_dir=models_dir)
    store = AdapterStore(tmp_path / "adapters")
    plain = commit_noise_adapter(store, "doc", base, learned=["ex-a", "ex-b"])
    hits = [
        {"id": i, "query": f"q {i}", "answer": f"a {i}", "language": "", "score": 0.9}
        for i in ("ex-c", "ex-a", "ex-d", "ex-b")
    ]
    assert trained_on(plain) == TrainedOn(frozenset({"ex-a", "ex-b"}), under_block=False)
    quoted, withheld = split_learned(hits, trained_on(plain).held_back)
    assert [h["id"] for h in quoted] == ["ex-c", "ex-d"] and withheld == ["ex-a", "ex-b"]
    assert quoted[0] == hits[0]

    with_rows = commit_noise_adapter(store, "doc", base, learned=["ex-a"], hyperparameters={"retrieval_k": 3})
    no_manifest = commit_noise_adapter(store, "doc", base)
    broken = commit_noise_adapter(store, "doc", base, learned=["ex-a"])
    (broken.path / "metadata.json").write_text("{", encoding="utf-8")
    for version in (with_rows, no_manifest, broken):
        assert trained_on(version).held_back == frozenset()
        assert split_learned(hits, trained_on(version).held_back) == (hits, [])
    assert trained_on(broken) == TrainedOn(frozenset({"ex-a"}), under_block=True), "the manifest still read"

    (broken.path / "metadata.json").write_text((plain.path / "metadata.json").read_text("utf-8"), "utf-8")
    assert trained_on(broken).held_back == {"ex-a"}, "a failed read is not remembered: the repaired version is read"


def test_every_example_a_version_learned_is_known_to_routing_whatever_it_trained_with(models_dir: Path, tmp_path: Path):
    """``TrainedOn.example_ids``: the manifest's examples, with retrieval rows too (routing tells an example logged
    since the cycle by its absence); none without a manifest."""
    base = resolve_base_model("learnerd/tiny-llama", cache_dir=models_dir)
    store = AdapterStore(tmp_path / "adapters")
    with_rows = commit_noise_adapter(store, "doc", base, learned=["ex-a"], hyperparameters={"retrieval_k": 3})
    assert trained_on(with_rows) == TrainedOn(frozenset({"ex-a"}), under_block=True)
    assert trained_on(commit_noise_adapter(store, "doc", base)).example_ids == frozenset()
