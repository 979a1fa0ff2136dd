"""What learnerd writes into .dlm documents, read by the released dlm (document-language-model 0.10.0)
itself: its training rows (``dlm.data.sections_to_rows``), its probes (``dlm.eval.probes.extract_probes``)
and its ``dlm harvest`` command, installed from PyPI in a virtualenv of their own (``dlm_release``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from learnerd.daemon.config import config_from_dict
from learnerd.reconcilers.examples import judge
from learnerd.reconcilers.probes import probes_reconciler
from learnerd.reconcilers.settings import ExamplesConfig
from learnerd.store.blocks import Block, Cell
from learnerd.store.db import connect, transaction
from learnerd.store.dlm import read_document
from learnerd.store.examples import Example, put_example
from learnerd.training.config import LEARNERD_KEYS, TrainingConfig
from learnerd.training.recipes import default_training
from tests.conftest import cli_env, learnerd_command

pytestmark = pytest.mark.slow  # installs the release once per session (about a minute)


def example_of(block_id: str, cells: list[str], answer: str, at: float) -> Example:
    """The example learnerd learns from a notebook block: markdown cells, then the executed cell."""
    block = Block(
        id=block_id,
        source="test",
        context=[Cell("markup", text) for text in cells],
        executed=Cell("code", answer, "bash"),
        exit_code=0,
    )
    example = judge(block, ExamplesConfig()).example
    assert example is not None
    return Example(example.id, example.query, example.answer, example.language, at)


# the base of the document learnerd creates: a built-in random model's recipe has only dlm's keys, a pretrained
# base's has learnerd's own too (general replay), which the released dlm refuses in a frontmatter
@pytest.mark.parametrize("base_model", ["learnerd/tiny-llama", "smollm2-135m-instruct"])
def test_probe_sections_learnerd_writes_train_and_probe_in_the_released_dlm(
    dlm_release, tmp_path: Path, base_model: str
) -> None:
    cfg = config_from_dict(
        {"state_dir": "state", "docs_dirs": ["docs"], "probes": {"base_model": base_model}}, base=tmp_path
    )
    conn = connect(cfg.layout.db_path)
    examples = [
        # two markdown cells, one with two paragraphs: the query dlm 0.10.0 refused (blank lines)
        example_of(
            "b1",
            ["# Disk usage\n\nThe disk is full again.", "Show the biggest directories here"],
            "du -sh * | sort -h | tail",
            1.0,
        ),
        example_of("b2", ["List the files", "with their sizes"], "ls -la\nls -lh", 2.0),
        example_of("b3", ["Count Python lines"], "```sh\nfind . -name '*.py' | xargs wc -l\n```", 3.0),
        # an answer with a blank line: dlm 0.10.0 would end it there, so learnerd refuses and counts it
        example_of("b4", ["Go to tmp and list it"], "cd /tmp\n\nls", 4.0),
    ]
    with transaction(conn):
        for e in examples:
            put_example(conn, e)
    rec = probes_reconciler(cfg)
    doc = rec.route(examples[0])
    outcome = rec.reconcile_sync(str(doc))
    assert outcome.added == 3 and [eid for eid, _ in outcome.refused] == ["b4"]
    assert "blank line" in rec.refused["b4"]
    with doc.open("a") as f:  # a person's section after learnerd's: learnerd's ids must not change
        f.write("\n::instruction::\n### Q\nWhat does `df -h` show?\n\n### A\nFree space per file system.\n")

    ours = read_document(doc)
    written = ours.frontmatter.training  # the recipe of the base, not dlm's defaults
    assert (
        ours.frontmatter.base_model == base_model
        and written.learning_rate == default_training(base_model)["learning_rate"]
    )
    dlm = dlm_release.rows(doc)  # fails with dlm's traceback where it refuses the frontmatter
    assert dlm["section_ids"] == [s.section_id for s in ours.sections]
    learned = [
        (p.question, p.answer, s.section_id) for s in ours.sections if s.type == "instruction" for p in s.qa_pairs()
    ]
    assert [tuple(row) for row in dlm["chat"]] == learned and len(learned) == 4
    assert learned[0][0] == "# Disk usage\nThe disk is full again.\nShow the biggest directories here"
    probes = [(q, a, sid) for s in ours.auto_sections("learnerd/") for q, a, sid in learned if sid == s.section_id]
    # explicit `!probe` pairs come first; dlm fills up to k with other instruction pairs
    assert [tuple(p) for p in dlm["probes"]][: len(probes)] == probes and len(probes) == 3


def test_learnerd_keys_are_the_fields_the_released_dlm_does_not_have(dlm_release) -> None:
    done = dlm_release.run(
        "-c",
        "import json; from dlm.doc.schema import TrainingConfig; print(json.dumps(list(TrainingConfig.model_fields)))",
    )
    assert done.returncode == 0, done.stderr
    ours = TrainingConfig.model_fields.keys() - {"extra"}
    assert ours - set(json.loads(done.stdout)) == LEARNERD_KEYS


def learnerd_harvest(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        learnerd_command("harvest", *map(str, args)), env=cli_env(), capture_output=True, text=True, timeout=120
    )


MINIMAL_REPORT = {  # what dlm's harvest needs of a sway report, and nothing more
    "schema_version": 1,
    "probes": [
        {
            "name": "recall_1",
            "kind": "probe_recall",
            "verdict": "fail",
            "evidence": {"prompt": "How do I list open ports?", "reference": "ss -tulpn"},
        },
        {
            "name": "recall_2",
            "kind": "probe_recall",
            "verdict": "fail",
            "evidence": {"prompt": "Free disk space per mount?", "reference": "df -h"},
        },
        {
            "name": "recall_3",
            "kind": "probe_recall",
            "verdict": "pass",
            "evidence": {"prompt": "Who am I?", "reference": "whoami"},
        },
    ],
}


def sway_envelope(report: dict) -> dict:
    """``report`` with the rest of a whole sway report around it (what learnerd used to require)."""
    probes = [
        {**p, "score": 0.0 if p["verdict"] == "fail" else 1.0, "raw": 0.0, "message": ""} for p in report["probes"]
    ]
    return {
        **report,
        "sway_version": "0.1.0",
        "base_model_id": "smollm2-135m",
        "adapter_id": "v0001",
        "started_at": "2026-01-01T00:00:00+00:00",
        "finished_at": "2026-01-01T00:01:00+00:00",
        "wall_seconds": 60.0,
        "score": {"overall": 0.5},
        "probes": probes,
    }


@pytest.mark.parametrize("envelope", ["minimal", "sway"])
@pytest.mark.parametrize("first", ["learnerd", "dlm"])
def test_each_harvest_sees_the_others_sections_as_already_present(
    dlm_release, tmp_path: Path, first: str, envelope: str
) -> None:
    doc = tmp_path / "notes.dlm"
    doc.write_text("---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: smollm2-135m\n---\n\n# Notes\n")
    report = tmp_path / "sway.json"
    report.write_text(json.dumps(MINIMAL_REPORT if envelope == "minimal" else sway_envelope(MINIMAL_REPORT)))

    def run(tool: str) -> subprocess.CompletedProcess[str]:
        if tool == "learnerd":
            return learnerd_harvest(doc, "--sway-json", report, "--apply")
        return dlm_release.cli("harvest", doc, "--sway-json", report, "--apply")

    applied = run(first)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    written = doc.read_bytes()
    assert [s.harvest_source for s in read_document(doc).auto_sections()] == [
        "auto-harvest/recall_1",
        "auto-harvest/recall_2",
    ]
    second = run("dlm" if first == "learnerd" else "learnerd")
    assert second.returncode == 2, second.stdout + second.stderr
    assert second.stdout.count("already_present") == 2 and doc.read_bytes() == written
    assert len(dlm_release.rows(doc)["probes"]) == 2


def test_a_gallery_document_still_trains_in_the_released_dlm_after_learnerd_harvests_into_it(
    dlm_release, peer_copy, tmp_path: Path
) -> None:
    doc = peer_copy("dlm/gallery/shell-one-liner.dlm")
    before = dlm_release.rows(doc)
    report = tmp_path / "sway.json"
    paragraphs = {
        "prompt": "Delete empty directories.\n\nRecursively, from here.",
        "reference": "find . -type d -empty -delete",
    }
    cut = {"prompt": "Two commands?", "reference": "cd /tmp\n\nls"}  # an answer dlm 0.10.0 would cut: not written
    report.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "probes": [
                    {"name": "p", "verdict": "fail", "evidence": paragraphs},
                    {"name": "c", "verdict": "fail", "evidence": cut},
                ],
            }
        )
    )
    done = learnerd_harvest(doc, "--sway-json", report, "--apply", "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert [a["probe"] for a in plan["additions"]] == ["p"]
    assert [(s["probe"], s["reason"]) for s in plan["skipped"]] == [("c", "unrepresentable")]
    after = dlm_release.rows(doc)
    assert after["chat"][: len(before["chat"])] == before["chat"]
    assert after["chat"][-1][:2] == [
        "Delete empty directories.\nRecursively, from here.",
        "find . -type d -empty -delete",
    ]
