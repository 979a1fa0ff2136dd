"""Evaluation end to end on the built-in tiny model: a document of Q/A probes, one training cycle, the
report — and ``learnerd eval`` / ``learnerd harvest`` reading it; a base without a chat template."""

from __future__ import annotations

import json
from types import SimpleNamespace

import anyio
import pytest
import torch

from learnerd.eval.harvest import plan_harvest
from learnerd.eval.history import REPORT_FILE, adapter_key, report_path
from learnerd.eval.inputs import probe_name
from learnerd.eval.probes import coherence
from learnerd.eval.report import dump_report, load_report
from learnerd.eval.suite import evaluate_version
from learnerd.ml.base_model import resolve_base_model
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from tests.qa_pairs import EXTRA_QA_PAIRS, QA_PAIRS
from tests.support.evaluation import DLM_ID, state_with_models
from tests.support.evaluation import run_cli_in_process as run_cli  # no interpreter's start per command
from tests.support.memorised import memorised as memorised_state
from tests.support.training import train_document

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def memorised(tmp_path_factory, models_dir):
    """The 20 Q/A probes the tiny model memorised in one cycle (dlm's keys: learning_rate 1e-2, 40 epochs; the
    shared state of :mod:`tests.support.memorised`, copied), then one more probe appended after training, so the
    evaluation sees 20 learned probes and 1 unlearned."""
    trained = memorised_state().copy(tmp_path_factory.mktemp("memorised") / "memorised")
    state, doc = trained.state_dir, trained.doc
    version = AdapterStore(state / "adapters").current(DLM_ID)
    new_q, new_a = EXTRA_QA_PAIRS[0]
    with doc.open("a") as f:
        f.write(f"::instruction::\n### Q !probe\n{new_q}\n\n### A\n{new_a}\n")
    document = read_document(doc)
    base = resolve_base_model(document.frontmatter.base_model, cache_dir=models_dir)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # module fixtures set up before the function-scoped one_torch_thread
    try:
        report = evaluate_version(document, version, base)
    finally:
        torch.set_num_threads(threads)
    return SimpleNamespace(state=state, doc=doc, document=document, version=version, report=report)


def test_the_adapter_recalls_its_probes_and_stands_far_above_noise(memorised):
    report = memorised.report
    by_kind: dict[str, list] = {}
    for p in report.probes:
        by_kind.setdefault(p.kind, []).append(p)
    recall = {p.name: p for p in by_kind["probe_recall"]}
    learned = [recall[probe_name(q, a)] for q, a in QA_PAIRS]
    assert sum(p.verdict == "pass" for p in learned) >= 18
    assert not any(p.evidence["base_similarity"] == 1.0 for p in learned)  # the base knows none of it
    unlearned = recall[probe_name(*EXTRA_QA_PAIRS[0])]
    assert unlearned.verdict == "fail" and unlearned.evidence["confidence"] > 0.3
    assert {"prompt", "reference", "generated", "confidence"} <= set(unlearned.evidence)

    (dk,) = by_kind["delta_kl"]
    null = report.null_stats["delta_kl"]
    assert dk.verdict == "pass" and null["n"] == 3
    assert dk.z_score is not None and dk.z_score > 20, dk.message
    assert dk.raw > null["mean"] + 20 * null["std"]

    (sis,) = by_kind["section_internalization"]
    sections = [s for s in memorised.document.sections if s.type == "instruction"]
    assert [e["section_id"] for e in sis.evidence["per_section"]] == [s.section_id for s in sections]
    assert [e["passed"] for e in sis.evidence["per_section"]] == [True] * 4 + [False]  # the appended probe
    assert sis.z_score is not None and sis.z_score > 3

    (mt,) = by_kind["multi_turn_coherence_decay"]
    assert mt.verdict in ("pass", "fail", "warn") and len(mt.evidence["per_turn_kls"]) == 3
    assert len(mt.evidence["sparkline"]) == 3 and mt.evidence["fit_status"] in ("ok", "stable", "non_monotonic")


def test_the_dialogues_ask_the_documents_questions_and_count_the_answers_per_turn(memorised):
    probes = memorised.report.probes
    (mt,) = [p for p in probes if p.kind == "multi_turn_coherence_decay"]
    recall = {p.name: p for p in probes if p.kind == "probe_recall"}
    answered = mt.evidence["answered_per_turn"]
    pairs = [*QA_PAIRS, EXTRA_QA_PAIRS[0]]
    asked = [pairs[i] for i in coherence.spread(len(pairs), 10)]  # 10 dialogues of pairs spread over the 21
    assert mt.evidence["num_prompts"] == 10 and len(answered) == 4 and asked[1] == pairs[2]
    # turn 1 asks each of the 10 questions alone, as probe_recall does: the same exact answers
    assert answered[0] == sum(recall[probe_name(q, a)].evidence["exact_match"] for q, a in asked)
    lost = min(answered[1:]) < answered[0] - 1
    assert ("at a later turn" in mt.message) == lost and (mt.verdict == "fail" or not lost)


def test_the_report_is_schema_1_and_harvest_reads_it(memorised):
    path = report_path(memorised.version)
    path.write_text(dump_report(memorised.report))
    again = load_report(path)
    assert dump_report(again) == dump_report(memorised.report)
    raw = json.loads(path.read_text())
    assert {"schema_version", "sway_version", "base_model_id", "adapter_id", "started_at", "finished_at",
            "wall_seconds", "score", "probes", "null_stats"} <= set(raw)  # fmt: skip
    assert raw["schema_version"] == 1 and raw["generator"].startswith("learnerd")
    assert {"name", "kind", "verdict", "score", "raw", "evidence", "message"} <= set(raw["probes"][1])

    plan = plan_harvest(memorised.document, again, reinforce=True)
    assert [(a.candidate.prompt, a.reinforcement) for a in plan.additions] == [(EXTRA_QA_PAIRS[0][0], True)]
    proc = run_cli("harvest", str(memorised.doc), "--sway-json", str(path), "--reinforce")
    assert "reinforcement copy" in proc.stdout and "dry-run: nothing written" in proc.stdout
    # dlm's rule: the probe's own section is already there; calibration_drift's worst offenders, the general
    # knowledge the memorising adapter displaced, are sway's items that judge every candidate: sealed, never written
    (drift,) = [p for p in again.probes if p.kind == "calibration_drift"]
    assert drift.verdict == "fail"
    plain = plan_harvest(memorised.document, again)
    assert [s.candidate.prompt for s in plain.skipped if s.reason == "already_present"] == [EXTRA_QA_PAIRS[0][0]]
    sealed = [s.candidate for s in plain.skipped if s.reason == "sealed"]
    assert len(sealed) == 5 and {c.probe_kind for c in sealed} == {"calibration_drift"}
    assert plain.additions == ()
    proc = run_cli("harvest", str(memorised.doc), "--sway-json", str(path), check=False)
    assert proc.returncode == 2 and "no candidates to harvest" in proc.stdout  # dlm's exit: nothing to add
    assert proc.stdout.count("sealed") >= 5, proc.stdout


def test_learnerd_eval_history_plots_the_pass_rate(memorised, tmp_path):
    report_path(memorised.version).write_text(dump_report(memorised.report))
    plot = tmp_path / "history.png"
    proc = run_cli("eval", str(memorised.doc), "--history", "--plot", str(plot), "--state-dir", str(memorised.state))
    assert "v0001" in proc.stdout and "95% (20/21)" in proc.stdout, proc.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    default = memorised.state / "adapters" / adapter_key(memorised.document) / "eval-history.png"
    run_cli("eval", str(memorised.doc), "--history", "--state-dir", str(memorised.state))
    assert default.is_file()


def test_learnerd_eval_without_a_chat_template_skips_the_dialogue(tmp_path, models_dir):
    state = state_with_models(tmp_path, models_dir)
    doc = tmp_path / "notes.dlm"
    doc.write_text(
        f"---\ndlm_id: {DLM_ID}\nbase_model: learnerd/tiny-llama-no-chat\n"
        "training:\n  learning_rate: 0.01\n  max_steps: 6\n---\n"
        "# Rivers\nThe Nile flows north into the Mediterranean.\n\n"
        "::prose::\n# Mountains\nEverest is the highest mountain above sea level.\n"
    )
    anyio.run(train_document, AdapterStore(state / "adapters"), doc, models_dir)
    out = tmp_path / "report.json"
    proc = run_cli(
        "eval", str(doc), "--state-dir", str(state), "--output", str(out), "--null-runs", "2", "--log-level", "warning"
    )
    report = load_report(out)
    (mt,) = [p for p in report.probes if p.kind == "multi_turn_coherence_decay"]
    assert mt.verdict == "skip" and "no chat template" in mt.message and mt.evidence["reason"] == mt.message
    assert "no chat template" in proc.stdout
    (recall,) = [p for p in report.probes if p.kind == "probe_recall"]
    assert recall.verdict == "skip"
    (dk,) = [p for p in report.probes if p.kind == "delta_kl"]
    assert dk.verdict == "pass" and dk.evidence["prompts"] == ["# Rivers", "# Mountains"]
    assert (state / "adapters" / DLM_ID / "versions" / "v0001" / REPORT_FILE).is_file()
    assert report.score.findings[0].startswith("undertrained: 6 optimizer steps (< 50)")  # sway's one-line finding
    assert "undertrained: 6 optimizer steps" in proc.stdout


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_evaluation_on_a_gpu_runs_every_probe(memorised):
    """The same version evaluated on CUDA (bfloat16): every probe runs (none errors on a tensor left on
    the CPU) and recall agrees with the CPU report's within the two probes bf16 rounding may flip."""
    from learnerd.ml.device import resolve_device

    base = resolve_base_model(memorised.document.frontmatter.base_model, cache_dir=memorised.state / "models")
    report = evaluate_version(memorised.document, memorised.version, base, placement=resolve_device("cuda"))
    errored = [(p.name, p.message) for p in report.probes if p.verdict == "error"]
    assert not errored
    cpu_passed = sum(p.verdict == "pass" for p in memorised.report.probes if p.kind == "probe_recall")
    gpu_passed = sum(p.verdict == "pass" for p in report.probes if p.kind == "probe_recall")
    assert abs(gpu_passed - cpu_passed) <= 2, (cpu_passed, gpu_passed)
