"""``learnerd run --once`` over the project's example logs leaves a ``learned.dlm`` with one probe
section per learnable example; re-running adds nothing; changing one block's executed cell in the log
replaces exactly one section."""

import shutil
import time

from learnerd.analyzer.blocklog import event_line
from learnerd.store.blocks import Cell
from learnerd.store.dlm import read_document
from tests.conftest import REPO_ROOT
from tests.support.pipeline import run_once

RECENT = time.time() - 3600.0
"""An hour ago: later than the example logs' events, and not in the future (blocks more than a day ahead are
refused)."""


def probe_sections(path):
    return {s.harvest_source: s for s in read_document(path).auto_sections("learnerd/")}


def test_learned_document_follows_the_examples(tmp_path):
    logs = tmp_path / "logs"
    shutil.copytree(REPO_ROOT / "examples" / "logs", logs)
    with (logs / "assistant.jsonl").open("a", encoding="utf-8") as f:  # an answer the released dlm would cut
        f.write(event_line("context", "nb-blank-1", RECENT, cells=[Cell("markup", "Go to tmp, list it")]))
        f.write(event_line("executed", "nb-blank-1", RECENT + 1, cell=Cell("code", "cd /tmp\n\nls", "bash"),
                           exit_code=0))  # fmt: skip
    state = tmp_path / "state"
    summary = run_once(state, logs)
    doc = state / "docs" / "learned.dlm"

    sections = probe_sections(doc)
    # 24 blocks: one failed, one eval mode, one never run; 21 examples, one refused a section
    assert len(sections) == summary["examples"] - 1 == 20
    assert summary["refused_examples"] == [
        {"example_id": "nb-blank-1", "document": str(doc), "reason": summary["refused_examples"][0]["reason"]}
    ]
    assert "blank line" in summary["refused_examples"][0]["reason"]
    for section in sections.values():
        (pair,) = section.qa_pairs()
        assert pair.probe and pair.question and pair.answer
        assert section.type == "instruction"
    assert "learnerd/nb-fail-1" not in sections and "learnerd/nb-eval-1" not in sections
    (pods,) = sections["learnerd/nb-k8s-1"].qa_pairs()
    assert pods.answer == "kubectl get pods -n dev"

    before = doc.read_bytes()
    again = run_once(state, logs)
    assert again["changes"]["probes"] == {} and doc.read_bytes() == before

    with (logs / "assistant.jsonl").open("a", encoding="utf-8") as f:
        f.write(event_line("executed", "nb-k8s-1", RECENT, cell=Cell("code", "kubectl get pods -A", "bash"),
                           exit_code=0))  # fmt: skip
    changed = run_once(state, logs)
    after = probe_sections(doc)
    assert changed["changes"]["probes"]["sections_replaced"] == 1
    assert after.keys() == sections.keys()
    differing = [src for src in sections if after[src].qa_pairs() != sections[src].qa_pairs()]
    assert differing == ["learnerd/nb-k8s-1"]
    assert after["learnerd/nb-k8s-1"].qa_pairs()[0].answer == "kubectl get pods -A"
