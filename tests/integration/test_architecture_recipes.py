"""docs/architecture.md's recipes are true: the reconciler's example module plus one entry in the controller
table is a working, configurable controller fed by what it watches — nothing else is edited; the probe's
example module composes with the registry's options and measures a real adapter; the training ingredient's plus
one entry in ``INGREDIENTS`` is a documented key and a loss term."""

from __future__ import annotations

import math
import re
import types
from pathlib import Path

import anyio
import pytest

from benchmarks.bench_eval import noisy_lora
from learnerd.daemon import controllers
from learnerd.daemon.app import Daemon
from learnerd.daemon.config import config_from_dict
from learnerd.eval.backend import DifferentialBackend
from learnerd.eval.inputs import document_inputs
from learnerd.eval.probes import CATEGORY, PROBES
from learnerd.eval.probes.base import EvalOptions, ProbeContext, option_models
from learnerd.eval.report import ProbeResult, Verdict
from learnerd.eval.score import DEFAULT_WEIGHTS
from learnerd.store.dlm import parse_text
from tests.conftest import REPO_ROOT
from tests.support.daemon import SAMPLE_BLOCKS, append_blocks

ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"


def recipe_module(recipe: str = "reconciler") -> types.ModuleType:
    """The code block of ``recipe``'s recipe, as a module; its line numbers are the page's, so pydantic reads
    its fields' docstrings from the page."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index(f"<!-- recipe: {recipe} -->")
    code = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert code is not None, f"the {recipe} recipe shows its module"
    module = types.ModuleType(f"{recipe}_recipe")
    lines_above = text[: start + code.start(1)].count("\n")
    exec(compile("\n" * lines_above + code.group(1), str(ARCHITECTURE), "exec"), module.__dict__)
    return module


def test_the_reconciler_recipe_is_its_module_plus_one_entry_in_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, minilm
) -> None:
    spec = recipe_module().SPEC
    monkeypatch.setattr(controllers, "CONTROLLERS", (*controllers.CONTROLLERS, spec))
    append_blocks(tmp_path / "logs" / "session.jsonl", SAMPLE_BLOCKS)
    raw = {
        "state_dir": "state",
        "log_dirs": ["logs"],
        "docs_dirs": ["docs"],
        "training": {"enabled": False},
        "controllers": {spec.name: {"workers": 3}},
    }
    cfg = config_from_dict(raw, base=tmp_path)
    assert cfg.controller(spec.name).workers == 3, "its [controllers.NAME] table is accepted"

    daemon = Daemon(cfg, embedder=minilm)
    try:
        summary = anyio.run(daemon.run_once)
        assert daemon.controllers[spec.name].workers == 3, "and applied"
    finally:
        daemon.close()
    files = {p.stem: p.read_text() for p in (cfg.state_dir / "answer-files").iterdir()}
    assert files == {block_id: command for block_id, (_, command) in SAMPLE_BLOCKS.items()}
    assert summary.changes[spec.name] == {"written": len(SAMPLE_BLOCKS)}
    assert spec.name in daemon.pipeline, "it drains with the pipeline"


def test_the_probe_recipe_composes_with_the_registry_and_measures_an_adapter(tiny_model_dir, one_torch_thread) -> None:
    probe = recipe_module("probe")
    assert probe.KIND not in CATEGORY and probe.CATEGORY in DEFAULT_WEIGHTS
    *_, probe_options = option_models((*PROBES, probe))  # no knob clashes with a registered probe's
    options_model = type("RecipeOptions", (EvalOptions, probe_options), {})
    peft_model, tokenizer = noisy_lora(tiny_model_dir, scale=0.5)
    backend = DifferentialBackend(peft_model.eval(), tokenizer)
    frontmatter = "---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: learnerd/tiny-llama\n---\n"
    document = parse_text(
        frontmatter + "::instruction::\n### Q !probe\nList the pods in dev\n\n### A\nkubectl get pods\n"
    )
    inputs = document_inputs(document, tokenizer)

    def measured(**knobs: float) -> ProbeResult:
        return probe.run(ProbeContext(backend, inputs, options_model(answer_length_max_tokens=8, **knobs)))

    lenient, strict = measured(answer_length_max_ratio=100.0), measured(answer_length_max_ratio=1e-6)
    assert lenient.kind == strict.kind == probe.KIND
    assert 0 < lenient.ft_value <= 8 and 0 < lenient.base_value <= 8, "greedy answers within the budget"
    assert lenient.raw == pytest.approx(lenient.ft_value / max(lenient.base_value, 1.0))
    assert (lenient.verdict, strict.verdict) == (Verdict.PASS, Verdict.FAIL)
    no_probes = document_inputs(parse_text(frontmatter + "Prose only.\n"), tokenizer)
    assert probe.run(ProbeContext(backend, no_probes, options_model())).verdict == Verdict.SKIP


def test_the_training_ingredient_recipe_is_its_module_plus_one_entry_in_the_tuple(monkeypatch) -> None:
    """Its key is read and documented; its term is PaLM's z-loss: all-zero logits over V tokens have log Z = ln V."""
    import torch

    from learnerd.training import ingredients
    from learnerd.training.config import check_trainable, reference
    from learnerd.training.ingredients.spec import Batch
    from learnerd.training.recipes import document_training

    z_loss = recipe_module("training ingredient")
    monkeypatch.setattr(ingredients, "INGREDIENTS", (*ingredients.INGREDIENTS, z_loss.INGREDIENT))
    config = check_trainable(document_training({"z_loss_weight": 1e-4}, builtin=True).config)
    assert "| `z_loss_weight` | `0` | >= 0.0 and <= 1.0 | `z_loss` | the weight of log² Z" in reference()
    labels = torch.tensor([[-100, -100, 5, 6], [-100, 7, -100, -100]])  # 3 tokens carry loss
    batch = Batch(None, (), labels.clamp(min=0), torch.ones_like(labels), labels, torch.zeros(3, 50))
    term = z_loss.loss(z_loss.Options.of(config), batch)
    assert torch.isclose(term, torch.tensor(1e-4 * 3 * math.log(50) ** 2))
    assert z_loss.loss(z_loss.Options(), batch) is None
