"""``learnerd versions``' rows: the status is the current version's ``served`` or a gate's ``verdict.json``, a
version without a manifest has no counts, and the examples of each version are found by their manifests."""

from learnerd.eval.versions import read_verdict, version_changes, version_rows, versions_training
from learnerd.store.adapters import AdapterMetadata, AdapterStore, GateVerdict
from learnerd.store.manifest import Manifest, SectionOrigin, write_manifest


def metadata(mode: str) -> AdapterMetadata:
    return AdapterMetadata(
        base_model="learnerd/tiny-llama",
        base_model_identity="learnerd/tiny-llama@0",
        section_ids=("s1",),
        new_section_ids=("s1",),
        replay_section_ids=(),
        parent_version=None,
        steps=2,
        start_loss=3.0,
        final_loss=0.5,
        tokens_trained=10,
        seed=0,
        hyperparameters={},
        library_versions={},
        created_at="2026-11-25T16:00:00+00:00",
        extra={"mode": mode},
    )


def commit(store: AdapterStore, mode: str, manifest: Manifest | None = None, verdict: GateVerdict | None = None):
    with store.stage("doc") as staging:
        (staging.path / "adapter_config.json").write_text("{}")
        if manifest is not None:
            write_manifest(staging.path, manifest)
        version = store.commit(staging, metadata(mode))
    if verdict is not None:
        store.record_verdict(version, verdict)
        if verdict.promoted:
            store.promote(version)
    return version


def verdict(outcome: str, *reasons: str) -> GateVerdict:
    return GateVerdict(outcome, reasons, (), None, "2026-11-25T16:00:00+00:00")  # type: ignore[arg-type]


def manifest(sections: tuple[SectionOrigin, ...], added: tuple[str, ...], removed=()) -> Manifest:
    return Manifest(
        "doc", "2026-11-25T16:00:00+00:00", "fresh", "r", "learnerd/tiny-llama", None, None, 2, 3.0, 0.5,
        (1.0, 0.5), sections, added, (), removed,
    )  # fmt: skip


LEARNED = SectionOrigin("s2", 1, "learnerd/ex-1", "ex-1", "ex-1", "/logs/a.jsonl", 3, 7.0, "learnerd")
FORGOTTEN = SectionOrigin("s3", 1, "learnerd/ex-0", "ex-0", "ex-0", "/logs/a.jsonl", 1, 5.0, "learnerd")


def test_status_is_served_for_current_and_a_gates_verdict_where_one_was_written(tmp_path):
    store = AdapterStore(tmp_path)
    commit(store, "fresh")  # before the gate: no verdict, no manifest, no counts
    commit(store, "incremental", manifest((SectionOrigin("s1"), LEARNED), ("s2",), (FORGOTTEN,)),
           verdict=verdict("rejected", "probe recall fell 20/20 -> 12/20", "answer_retention 80 % < 95 %"))  # fmt: skip
    commit(store, "incremental", verdict=verdict("promoted"))
    commit(store, "fresh", verdict=verdict("promoted"))
    commit(store, "fresh")  # the candidate awaiting its evaluation
    rows = version_rows(store, "doc")
    assert [(r.name, r.status, r.reason) for r in rows] == [
        ("v0001", "—", ""),
        ("v0002", "rejected", "probe recall fell 20/20 -> 12/20; answer_retention 80 % < 95 %"),
        ("v0003", "promoted", ""),
        ("v0004", "served", ""),
        ("v0005", "candidate", ""),
    ]
    assert (rows[0].added, rows[0].examples_added, rows[0].score, rows[0].retention) == (None, None, None, {})
    assert (rows[1].added, rows[1].examples_added, rows[1].removed, rows[1].examples_removed) == (1, 1, 1, 1)
    assert rows[1].mode == "incremental" and rows[1].final_loss == 0.5


def test_a_damaged_verdict_or_manifest_is_skipped_not_fatal(tmp_path):
    store = AdapterStore(tmp_path)
    version = commit(store, "fresh", verdict=verdict("promoted"))
    assert read_verdict(version) == ("promoted", "")
    (version.path / "verdict.json").write_text("{oops")
    (version.path / "manifest.json").write_text("[]")
    (row,) = version_rows(store, "doc")
    assert (row.status, row.added) == ("served", None)


def test_changes_and_training_versions_come_from_the_manifests(tmp_path):
    store = AdapterStore(tmp_path)
    commit(store, "fresh", manifest((SectionOrigin("s1"), FORGOTTEN), ("s1", "s3")))
    commit(store, "fresh", manifest((SectionOrigin("s1"), LEARNED), ("s2",), (FORGOTTEN,)))
    changes = version_changes(store, "doc", "v2")
    assert changes.added == (LEARNED,) and changes.removed == (FORGOTTEN,)
    assert changes.to_dict()["added"][0]["file"] == "/logs/a.jsonl"
    assert versions_training(store, "doc", {"ex-0", "ex-1", "ex-9"}) == {
        "ex-0": ["v0001"],
        "ex-1": ["v0002"],
        "ex-9": [],
    }
