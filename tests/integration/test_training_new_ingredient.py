"""A new training ingredient is one module and one entry of ``INGREDIENTS``: a toy ingredient, written into a
temporary package and registered with ``monkeypatch``, gets its keys read and checked in a document's ``training``
block and listed in the generated key reference, its rows trained and its loss term added, with nothing else
changed.

The training worker runs in a child process, which imports ``INGREDIENTS`` as written and cannot see a tuple
patched in the test's process: the worker's row building (``retention_rows``) and the step loop (``train_lora``)
are run in-process here, on the built-in tiny model.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from learnerd.ml.base_model import load_model_directory
from learnerd.ml.rows import document_rows
from learnerd.store.dlm import TrainingConfigError, read_document
from learnerd.training import ingredients
from learnerd.training.config import check_trainable, reference
from learnerd.training.lora import rows_loss, train_lora
from learnerd.training.recipes import document_training
from learnerd.training.worker import TrainingRequest, retention_rows
from tests.qa_pairs import QA_PAIRS

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOY_MODULE = '''
    """A toy ingredient: copies of one Q/A pair, and a penalty on the adapted model's logits."""

    from pydantic import Field

    from learnerd.ml.rows import TrainingRow
    from learnerd.training.ingredients import spec

    SEEN: list[str] = []
    """The section ids of the micro-batches the loss term was given."""


    class Options(spec.Options):
        toy_rows: int = Field(0, ge=0, le=8)
        """copies of the toy pair a cycle adds"""
        toy_weight: float = Field(0.0, ge=0.0, le=1.0)
        """the weight of a penalty on the adapted logits' mean square"""


    def rows(options, cycle):
        pair = ("What does the toy say?", "squeak squeak")
        return spec.Rows([TrainingRow.chat(f"toy:{n}", *pair, system=cycle.system) for n in range(options.toy_rows)])


    def loss(options, batch):
        SEEN.extend(row.section_id for row in batch.rows)
        if not options.toy_weight:
            return None
        return options.toy_weight * batch.logits.float().pow(2).mean(dim=-1).sum()


    INGREDIENT = spec.Ingredient("toy", Options, rows=rows, loss=loss)
'''

DOCUMENT = """---
dlm_id: 01KPPJZWBDDDYRESSA0HESRDHS
base_model: learnerd/tiny-llama
training:
  learning_rate: 1e-2
  max_steps: 8
  micro_batch_size: 4
  toy_rows: 4
  toy_weight: 0.5
---
""" + "".join(f"::instruction::\n### Q\n{q}\n\n### A\n{a}\n\n" for q, a in QA_PAIRS[:4])


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The toy module, imported from a package in ``tmp_path`` (not yet registered)."""
    package = tmp_path / "toy_ingredients"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "toy.py").write_text(textwrap.dedent(TOY_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("toy_ingredients.toy")
    for name in ("toy_ingredients.toy", "toy_ingredients"):
        sys.modules.pop(name, None)


def lora_b(peft_model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in peft_model.state_dict().items() if "lora_B" in k}


def test_one_module_and_one_registration_suffice(toy, tmp_path: Path, tiny_model_dir: Path, monkeypatch):
    doc = tmp_path / "toy.dlm"
    doc.write_text(DOCUMENT)
    document = read_document(doc)
    block = document.frontmatter.raw["training"]
    with pytest.raises(TrainingConfigError, match="unknown key"):  # not registered yet: a typo, as far as we know
        check_trainable(document_training(block, builtin=True).config)

    monkeypatch.setattr(ingredients, "INGREDIENTS", (*ingredients.INGREDIENTS, toy.INGREDIENT))

    training = document_training(block, builtin=True)
    config = check_trainable(training.config)
    assert (config.toy_rows, config.toy_weight) == (4, 0.5) and {"toy_rows", "toy_weight"} <= training.own_keys
    with pytest.raises(TrainingConfigError) as refused:
        document_training({**block, "toy_rows": 9}, builtin=True)
    assert str(refused.value) == "training.toy_rows must be in 0..8, not 9" and refused.value.key == "toy_rows"
    assert "| `toy_rows` | `0` | 0..8 | `toy` | copies of the toy pair a cycle adds |" in reference().splitlines()

    model, tokenizer = load_model_directory(tiny_model_dir)
    request = TrainingRequest(str(tiny_model_dir), str(tmp_path / "out"), tuple(document_rows(document)), config)
    rows, rehearsal, _ = retention_rows(model, tokenizer, request)
    toy_ids = [f"toy:{n}" for n in range(4)]
    assert [r.section_id for r in rows] == [r.section_id for r in request.rows] + toy_ids and rehearsal == []
    toy_rows = [r for r in rows if r.section_id in toy_ids]
    before = rows_loss(model, tokenizer, toy_rows)
    peft_model, _ = train_lora(model, tokenizer, rows, config)
    assert set(toy_ids) <= set(toy.SEEN), "the toy rows were in the micro-batches the step loop trained"
    assert rows_loss(peft_model, tokenizer, toy_rows) < before

    model, tokenizer = load_model_directory(tiny_model_dir)
    without_term, _ = train_lora(model, tokenizer, rows, config.model_copy(update={"toy_weight": 0.0}))
    with_term, without = lora_b(peft_model), lora_b(without_term)
    assert not all(torch.equal(with_term[k], without[k]) for k in with_term), "the toy's loss term changed the steps"
