"""The sealed holdout (learnerd.eval.holdout): the sets that judge a candidate — answer_retention's pool, sway's
calibration items, paraphrase_invariance's paraphrases — are disjoint from the training replay prompts, harvest
never writes them into a document, and a cycle's training rows hold none of them: the rows the training worker
builds (:func:`learnerd.training.worker.retention_rows`: the document's pairs, quoted multi-turn, retrieval-augmented
and general replay rows) of ``examples/commands.dlm`` after the closed loop's harvest and the CLI's, the replay
answers given by the built-in tiny model."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from learnerd.eval.harvest import SkipReason, auto_harvest
from learnerd.eval.holdout import Holdout, holdout, normalized, sway_prompts
from learnerd.eval.probes.calibration_drift import sway_pack
from learnerd.eval.probes.paraphrase import paraphrased
from learnerd.eval.probes.retention import general_pool
from learnerd.eval.report import ProbeResult, Report, Score, Verdict
from learnerd.ml.base_model import load_model_directory
from learnerd.ml.rows import TrainingRow, document_rows
from learnerd.store.dlm import read_document
from learnerd.training.ingredients.replay import SECTION_PREFIX, replay_prompts
from learnerd.training.ingredients.retrieval import QUOTED_MULTI_TURN_PREFIX, RETRIEVAL_PREFIX
from learnerd.training.recipes import document_training
from learnerd.training.worker import TrainingRequest, retention_rows

pytestmark = pytest.mark.usefixtures("one_torch_thread")
EXAMPLE = Path(__file__).parents[2] / "examples" / "commands.dlm"
PAIRS = [
    (p.question, p.answer) for s in read_document(EXAMPLE).sections if s.type == "instruction" for p in s.qa_pairs()
]


def test_the_judging_sets_are_disjoint_from_the_replay_prompts_and_from_each_other():
    pool = [normalized(item.prompt) for item in general_pool()]
    sway = {normalized(prompt) for prompt in sway_prompts()}
    replay = {normalized(prompt) for prompt in replay_prompts()}
    assert len(set(pool)) == len(pool) >= 450 and len(sway) == 200 and len(replay) >= 380
    assert not set(pool) & replay
    assert not sway & replay
    assert not set(pool) & sway


def failing(name: str, kind: str, **evidence: object) -> ProbeResult:
    return ProbeResult(name, kind, Verdict.FAIL, 0.0, 0.0, evidence, "")


def report_of_every_judging_set() -> Report:
    """A report whose failing probes carry one item of each judging set, and one of the document's own pairs."""
    t = datetime(2026, 1, 1, tzinfo=UTC)
    offenders = [{"prompt": p, "gold": g} for p, g in sway_pack().items[:5]]
    item = general_pool()[0]
    question, answer = PAIRS[0]
    probes = (
        failing("cal_general", "calibration_drift", worst_offenders=offenders),
        failing("recall_pool", "probe_recall", prompt=item.prompt, reference=item.gold),
        failing("recall_para", "probe_recall", prompt=paraphrased(PAIRS[1][0])[0], reference=PAIRS[1][1]),
        failing("recall_own", "probe_recall", prompt=question, reference=answer),
    )
    return Report("0.1.0", "b", "a", t, t, 0.0, Score(0.5), probes)


def texts(row: TrainingRow) -> list[str]:
    """Every text a row trains on or is asked under, whole and line by line (a retrieved example is quoted
    as ``> question`` lines in the system message)."""
    out = [row.text or ""] if row.messages is None else [m.content for m in row.messages]
    return out + [line.removeprefix(">").strip() for text in out for line in text.splitlines()]


def leaks(rows: list[TrainingRow], sealed: Holdout) -> list[tuple[str, str]]:
    """``(section id, judging set)`` of every row holding a judging text."""
    found = ((row.section_id, sealed.judging_set(text)) for row in rows for text in texts(row))
    return [(section_id, judging) for section_id, judging in found if judging is not None]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path):
    return load_model_directory(tiny_model_dir)


@pytest.mark.parametrize("reinforce", [True, False], ids=["closed loop", "learnerd harvest"])
def test_no_judging_item_reaches_a_cycles_training_rows(tiny, tiny_model_dir, tmp_path, reinforce):
    doc = tmp_path / "commands.dlm"
    doc.write_bytes(EXAMPLE.read_bytes())
    harvested = auto_harvest(doc, report_of_every_judging_set(), reinforce=reinforce)
    assert [a.candidate.probe_name for a in harvested.plan.additions] == ["recall_own"]
    assert sorted({s.candidate.probe_name for s in harvested.plan.skipped if s.reason == SkipReason.SEALED}) == [
        "cal_general",
        "recall_para",
        "recall_pool",
    ]
    rows = sealed_rows(tiny, tiny_model_dir, tmp_path, doc)
    sealed = holdout(q for q, _ in PAIRS)
    kinds = {row.section_id.split(":")[0] + ":" for row in rows if ":" in row.section_id}
    assert kinds == {QUOTED_MULTI_TURN_PREFIX, RETRIEVAL_PREFIX, SECTION_PREFIX}  # every ingredient is in the scan
    assert leaks(rows, sealed) == []


def test_the_scan_finds_a_judging_item_a_person_wrote(tiny, tiny_model_dir, tmp_path):
    """The scan can fail: a document that teaches an answer_retention item is caught in its own rows and in
    the multi-turn and retrieval rows built of them."""
    item = general_pool()[0]
    doc = tmp_path / "commands.dlm"
    doc.write_text(EXAMPLE.read_text() + f"\n::instruction::\n### Q\n{item.prompt}\n\n### A\n{item.gold}\n")
    found = leaks(sealed_rows(tiny, tiny_model_dir, tmp_path, doc), holdout(q for q, _ in PAIRS))
    assert found and {judging for _, judging in found} == {"answer_retention's pool"}


def sealed_rows(tiny, tiny_model_dir: Path, tmp_path: Path, doc: Path) -> list[TrainingRow]:
    """The rows the training worker trains for ``doc`` under the pretrained recipe with retrieval rows (as
    ``[serve] rag_k = 3`` sets it) and with general replay (a document's own key: the recipe has none since
    routing), replay answers by the tiny model: every ingredient that adds rows."""
    model, tokenizer = tiny
    config = document_training({"general_replay": 1.0}, builtin=False, served_rag_k=3).config
    rows = tuple(document_rows(read_document(doc)))
    request = TrainingRequest(str(tiny_model_dir), str(tmp_path / "out"), rows, config, replay_cache=None)
    built = retention_rows(model, tokenizer, request)
    return built.every_epoch + built.rehearsal
