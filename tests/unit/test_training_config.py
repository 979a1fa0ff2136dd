"""The ``training`` block as learnerd trains it: dlm's keys and every ingredient's, composed into one model whose
keys are documented from their docstrings, with no key declared twice."""

from __future__ import annotations

import pytest
from pydantic import Field

from learnerd.store import dlm
from learnerd.store.dlm import TrainingConfigError
from learnerd.training import ingredients
from learnerd.training.config import LEARNERD_KEYS, IngredientClash, TrainingConfig, compose, reference
from learnerd.training.ingredients.spec import Ingredient, Options
from tests.conftest import REPO_ROOT


def test_every_ingredient_key_is_a_field_of_the_block_and_learnerds():
    keys = {key for ingredient in ingredients.INGREDIENTS for key in ingredient.options.model_fields}
    assert keys == {
        "general_replay",
        "replay_kl_weight",
        "multi_turn_rows",
        "retrieval_k",
        "retrieval_own",
        "retrieval_rewrites",
        "retrieval_multi_turn",
        "fresh_rows",
    }
    assert keys <= TrainingConfig.model_fields.keys() and keys <= LEARNERD_KEYS
    assert keys | dlm.LEARNERD_LOOP_KEYS == LEARNERD_KEYS
    assert issubclass(TrainingConfig, dlm.TrainingConfig) and "general_replay" not in dlm.TrainingConfig.model_fields


def test_the_block_without_ingredients_keeps_their_keys_as_unknown():
    """dlm's model alone does not know them: the trainer reads the block with the ingredients' keys."""
    plain = dlm.TrainingConfig.from_mapping({"retrieval_k": 3})
    assert plain.unknown_keys() == ("retrieval_k",)
    assert TrainingConfig.from_mapping({"retrieval_k": 3}).unknown_keys() == ()


class Clashing(Options):
    seed: int = Field(0, ge=0)
    """a key the block already has"""


class Twice(Options):
    retrieval_k: int = Field(0, ge=0)
    """a key another ingredient already has"""


class DlmsOwn(Options):
    sources: int = 0
    """a key of dlm's block that learnerd keeps unvalidated"""


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (Clashing, "key 'seed' is dlm's block already"),
        (Twice, "key 'retrieval_k' is ingredient 'retrieval''s already"),
        (DlmsOwn, "key 'sources' is dlm's block already"),
    ],
)
def test_an_ingredient_key_that_is_taken_is_refused_with_both_owners(options, needle):
    with pytest.raises(IngredientClash, match=f"training ingredient 'toy': {needle}"):
        compose((*ingredients.INGREDIENTS, Ingredient("toy", options)))


def test_ingredient_keys_are_read_as_the_blocks_own():
    """Lax numbers as YAML 1.1 writes them, no booleans, and the block's one-line error naming the key."""
    assert TrainingConfig.from_mapping({"general_replay": "4e0"}).general_replay == 4.0
    for raw, message in [
        ({"retrieval_k": True}, "training.retrieval_k must be a number, not True"),
        ({"general_replay": 11}, "training.general_replay must be >= 0.0 and <= 10.0, not 11"),
    ]:
        with pytest.raises(TrainingConfigError) as info:
            TrainingConfig.from_mapping(raw)
        assert str(info.value) == message and info.value.key == next(iter(raw))


def test_the_reference_lists_every_key_with_its_docstring_range_and_owner():
    text = reference()
    fields = {key: info for key, info in TrainingConfig.model_fields.items() if key != "extra"}
    undocumented = sorted(key for key, info in fields.items() if not info.description)
    assert undocumented == [], "each key's docstring is its meaning in the reference"
    rows = {line.split(" | ")[0].strip("|` "): line for line in text.splitlines() if line.startswith("| `")}
    assert rows.keys() == fields.keys()
    assert "| 0..16 | `retrieval` |" in rows["retrieval_k"] and "| 1..256 | dlm |" in rows["lora_r"]
    assert "| `true`, `false` | learnerd |" in rows["group_by_length"]


def test_the_documented_reference_is_the_generated_one():
    documented = (REPO_ROOT / "docs" / "training-reference.md").read_text()
    assert documented == reference(), (
        "docs/training-reference.md is stale: python -c 'from learnerd.training.config import reference; "
        'print(reference(), end="")\' > docs/training-reference.md'
    )
