"""``learnerd versions DOC [vN]``: each version names the examples it added and removed, with the log file
and line their commands came from (built on the manifest every commit writes); ``learnerd train`` reports
Q/A pairs; ``eval --history --plot`` draws each version's loss curve from the manifest."""

from __future__ import annotations

import json
import struct

import pytest

from learnerd.store.adapters import AdapterStore
from learnerd.store.manifest import read_manifest
from tests.support.provenance import ThreeVersions

pytestmark = pytest.mark.slow


def entries(changes: dict, kind: str) -> list[tuple]:
    return [(e["example_id"], e["file"], e["line"]) for e in changes[kind] if e["example_id"]]


def test_each_version_names_the_examples_it_added_and_removed_with_file_and_line(three_versions: ThreeVersions):
    tv, a, b = three_versions, str(three_versions.logs / "a.jsonl"), str(three_versions.logs / "b.jsonl")
    rows = json.loads(tv.cli("versions", str(tv.document), "--json").stdout)
    assert [(r["name"], r["mode"], r["examples_added"], r["examples_removed"]) for r in rows] == [
        ("v0001", "fresh", 2, 0),
        ("v0002", "incremental", 2, 0),
        ("v0003", "fresh", 0, 1),
    ]
    assert rows[1]["replayed"] == 3, "the two examples and the document's prose, rehearsed"
    assert [r["status"] for r in rows] == ["promoted", "promoted", "served"] and all(r["steps"] > 0 for r in rows)
    assert all(r["score"] is not None for r in rows), "a score from each eval.json"
    assert all("calibration_drift" in r["retention"] for r in rows), "each version evaluated by its train"

    first = json.loads(tv.cli("versions", str(tv.document), "v1", "--json").stdout)
    assert entries(first, "added") == [("nb-k8s-1", a, 3), ("nb-k8s-2", a, 6)]
    second = json.loads(tv.cli("versions", str(tv.document), "v0002", "--json").stdout)
    assert entries(second, "added") == [("nb-k8s-3", b, 3), ("nb-k8s-4", b, 6)] and second["removed"] == []
    assert {e["example_id"] for e in second["replayed"]} == {"nb-k8s-1", "nb-k8s-2", None}
    assert [e["time"] for e in second["added"]] == [1763700079.0, 1763700117.0]  # the executed events' own times
    third = json.loads(tv.cli("versions", str(tv.document), "v3", "--json").stdout)
    assert entries(third, "removed") == [("nb-k8s-2", a, 6)], "the origin it had when it was learned"
    assert third["added"] == [] and third["previous_version"] == 2

    table = tv.cli("versions", str(tv.document), "v2").stdout
    assert f"example nb-k8s-3 (1 row(s)) from {b}:3 · 2025-11-21T04:41:19Z" in table
    assert f"example nb-k8s-4 (1 row(s)) from {b}:6" in table


def test_every_manifest_records_the_losses_of_its_steps_and_train_reports_pairs(three_versions: ThreeVersions):
    tv = three_versions
    store = AdapterStore(tv.state / "adapters")
    for version in store.list_versions(tv.dlm_id):
        manifest = read_manifest(version.path, version.number)
        meta = version.metadata()
        assert len(manifest.losses) == manifest.steps == meta.steps and manifest.final_loss == meta.final_loss
        assert [s.section_id for s in manifest.sections] == list(meta.section_ids)
    assert "Q/A pairs: 2 new, 0 replayed" in tv.train_outputs[0]
    assert "Q/A pairs: 2 new, 2 replayed" in tv.train_outputs[1]
    assert f"what it learned: learnerd versions {tv.document} v0002" in tv.train_outputs[1]


def test_an_unknown_version_exits_1_listing_those_that_exist(three_versions: ThreeVersions):
    proc = three_versions.cli("versions", str(three_versions.document), "v9", check=False)
    assert proc.returncode == 1 and "no adapter v0009 (versions: v0001, v0002, v0003)" in proc.stderr


def test_eval_history_plot_draws_the_versions_loss_curves(three_versions: ThreeVersions, tmp_path):
    tv, plot = three_versions, tmp_path / "history.png"
    history = json.loads(tv.cli("eval", str(tv.document), "--history", "--plot", str(plot), "--json").stdout)
    assert [p["name"] for p in history] == ["v0001", "v0002", "v0003"], "each evaluated by its train (the gate)"
    assert all("calibration_drift" in p["retention"] for p in history), "retention where it was measured"
    png = plot.read_bytes()
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert png.startswith(b"\x89PNG") and (width, height) == (700, 750), "a second panel: the loss curves"
