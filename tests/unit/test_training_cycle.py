"""plan_cycle: what a training cycle trains, from the document's rows and the current adapter's metadata."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerd.ml.base_model import BaseModelRef
from learnerd.ml.rows import TrainingRow
from learnerd.store.adapters import AdapterMetadata, AdapterStore, GateVerdict
from learnerd.training.config import TrainingConfig
from learnerd.training.cycle import ReplayPolicy, already_tried, plan_cycle

BASE = BaseModelRef("learnerd/tiny-llama", Path("/nonexistent"), identity="learnerd/tiny-llama@aa", builtin=True)
DEFAULTS = TrainingConfig()


def rows(*ids: str) -> list[TrainingRow]:
    return [TrainingRow.plain(i, f"text of {i}") for i in ids]


def commit(store: AdapterStore, ids, config=DEFAULTS, base=BASE):
    with store.stage("doc") as staging:
        (staging.path / "adapter_config.json").write_text("{}")
        meta = AdapterMetadata(
            base_model=base.name, base_model_identity=base.identity, section_ids=tuple(ids),
            new_section_ids=tuple(ids), replay_section_ids=(), parent_version=None, steps=1, start_loss=2.0,
            final_loss=1.0, tokens_trained=10, seed=config.seed, hyperparameters=config.to_dict(),
            library_versions={}, created_at="2026-01-01T00:00:00+00:00",
        )  # fmt: skip
        return store.commit(staging, meta)


def test_first_cycle_is_fresh_on_every_row_once():
    plan = plan_cycle(rows("a", "b", "a"), TrainingConfig(), BASE, None)
    assert plan.mode == "fresh" and [r.section_id for r in plan.rows] == ["a", "b"]
    assert plan.section_ids == plan.new_section_ids == ("a", "b") and plan.parent is None


def test_sections_with_several_rows_keep_them_all(tmp_path):
    qa = [TrainingRow.chat("sec1", f"q{i}", f"a{i}") for i in range(3)]
    plan = plan_cycle([*qa, *rows("p"), *qa], TrainingConfig(), BASE, None)  # a duplicated section counts once
    assert plan.rows == (*qa, *rows("p")) and plan.section_ids == ("sec1", "p")
    current = commit(AdapterStore(tmp_path), ["sec1", "p"])
    added = [TrainingRow.chat("sec2", "new q", "new a"), TrainingRow.chat("sec2", "q2", "a2")]
    step = plan_cycle([*qa, *rows("p"), *added], TrainingConfig(), BASE, current, replay=ReplayPolicy(1.0, 3))
    assert step.mode == "incremental" and step.new_section_ids == ("sec2",)
    assert step.rows == (*added, *qa, *rows("p")) and step.replay_section_ids == ("sec1", "p")
    assert step.rehearsal_per_epoch == 3  # k counts rows: max(3, 1.0 × 2) of the 4 unchanged
    assert step.training_rows() == (tuple(added), (*qa, *rows("p")))


def test_unchanged_rows_train_nothing(tmp_path):
    current = commit(AdapterStore(tmp_path), ["a", "b"])
    plan = plan_cycle(rows("b", "a"), TrainingConfig(learning_rate=0.1), BASE, current)
    assert plan.mode == "none" and plan.rows == () and "unchanged since v0001" in plan.reason
    assert plan_cycle([], TrainingConfig(), BASE, current).mode == "none"


def test_new_rows_resume_and_every_unchanged_row_shares_the_rehearsal_budget(tmp_path):
    old = [f"s{i:03d}" for i in range(100)]
    current = commit(AdapterStore(tmp_path), old)
    policy = ReplayPolicy(ratio=2.0, min_rows=10)
    plan = plan_cycle(rows(*old, "n1", "n2"), TrainingConfig(), BASE, current, replay=policy)
    assert plan.mode == "incremental" and plan.parent == current
    assert plan.new_section_ids == ("n1", "n2") and plan.replay_section_ids == tuple(old)
    assert [r.section_id for r in plan.rows] == ["n1", "n2", *old]
    assert plan.section_ids == (*old, "n1", "n2")
    assert plan.rehearsal_per_epoch == 10 and "100 rows rehearsed, 10 an epoch" in plan.reason
    every_epoch, rehearsed = plan.training_rows()
    assert [r.section_id for r in every_epoch] == ["n1", "n2"] and [r.section_id for r in rehearsed] == old
    many_new = plan_cycle(rows(*old, *[f"n{i}" for i in range(30)]), TrainingConfig(), BASE, current, replay=policy)
    assert many_new.rehearsal_per_epoch == 60  # ratio × new
    assert plan_cycle(rows(*old, "n1"), TrainingConfig(), BASE, current).rehearsal_per_epoch == 32  # default
    # A budget that covers every unchanged row trains them all every epoch, as new ones.
    small = plan_cycle(rows(*old[:20], "n1"), TrainingConfig(), BASE, commit(AdapterStore(tmp_path / "s"), old[:20]))
    assert small.rehearsal_per_epoch == 0 and small.replay_section_ids == tuple(old[:20])
    assert small.training_rows() == (small.rows, ()) and "20 rows replayed" in small.reason


@pytest.mark.parametrize(
    ("config", "base", "needle"),
    [
        (TrainingConfig(), BASE, "section(s) removed"),
        (TrainingConfig(lora_r=16), BASE, "shape changed"),
        (TrainingConfig(target_modules=("q_proj",)), BASE, "shape changed"),
        (TrainingConfig(), BaseModelRef("x", Path("/x"), "local:/x@bb", False), "base model changed"),
    ],
)
def test_fresh_retrain_when_the_adapter_cannot_be_resumed(tmp_path, config, base, needle):
    current = commit(AdapterStore(tmp_path), ["a", "b", "c"])
    kept = ["a", "b"] if needle == "section(s) removed" else ["a", "b", "c"]
    plan = plan_cycle(rows(*kept, "d"), config, base, current)
    assert plan.mode == "fresh" and needle in plan.reason and plan.parent is None
    assert plan.removed_section_ids == (() if kept[-1] == "c" else ("c",))
    assert [r.section_id for r in plan.rows] == [*kept, "d"]
    assert plan_cycle(rows(*kept, "d"), config, base, current, fresh=True).mode == "fresh"


def test_replay_policy_validation():
    with pytest.raises(ValueError, match="replay"):
        ReplayPolicy(ratio=-1)


def test_a_candidate_trained_on_the_same_rows_is_not_trained_again(tmp_path):
    store = AdapterStore(tmp_path)
    store.promote(commit(store, ["a"]))
    candidate = commit(store, ["a", "b"])
    plan = plan_cycle(rows("a", "b"), DEFAULTS, BASE, store.current("doc"))
    assert plan.mode == "incremental" and plan.parent.number == 1  # from the current version, not the candidate
    waiting = already_tried(plan, store.candidate("doc"), DEFAULTS, BASE)
    assert waiting.mode == "none" and waiting.reason.endswith("v0002, a candidate awaiting its evaluation")
    verdict = GateVerdict("rejected", ("answer_retention: kept 1/5",), (), 1, "2026-01-01T00:00:00+00:00")
    store.record_verdict(candidate, verdict)
    rejected = already_tried(plan, store.candidate("doc"), DEFAULTS, BASE)
    assert rejected.mode == "none" and "rejected (answer_retention: kept 1/5); change the document" in rejected.reason
    # Other rows, another training block or another base: train (from the current version).
    assert (
        already_tried(plan_cycle(rows("a", "c"), DEFAULTS, BASE, store.current("doc")), candidate, DEFAULTS, BASE)
        is None
    )
    assert already_tried(plan, candidate, TrainingConfig(learning_rate=0.5), BASE) is None
    other = BaseModelRef("learnerd/tiny-llama", Path("/nonexistent"), identity="learnerd/tiny-llama@bb", builtin=True)
    assert already_tried(plan, candidate, DEFAULTS, other) is None
    assert already_tried(plan, None, DEFAULTS, BASE) is None
