"""Per-base training defaults under the document's own keys, and the undertrained check."""

from __future__ import annotations

import math

import pytest

from learnerd.ml.recipes import (
    MIN_STEPS,
    PRETRAINED_RECIPE,
    RANDOM_BASE_RECIPE,
    default_training,
    training_config,
    undertrained_reason,
)
from learnerd.store.dlm import TrainingConfigError


def test_document_keys_win_over_the_recipe():
    assert training_config(None, builtin=True).learning_rate == RANDOM_BASE_RECIPE["learning_rate"]
    pretrained = training_config({}, builtin=False)
    assert (pretrained.learning_rate, pretrained.batch_size()) == (1e-3, PRETRAINED_RECIPE["micro_batch_size"])
    own = training_config({"learning_rate": 2e-4, "num_epochs": 3}, builtin=False)
    assert (own.learning_rate, own.num_epochs, own.lora_r) == (2e-4, 3, PRETRAINED_RECIPE["lora_r"])
    with pytest.raises(TrainingConfigError, match="lora_r"):
        training_config({"lora_r": 0}, builtin=True)


def test_new_documents_get_the_recipe_of_their_base():
    assert default_training("learnerd/tiny-llama") == RANDOM_BASE_RECIPE
    assert default_training("smollm2-135m-instruct") == PRETRAINED_RECIPE
    assert default_training("learnerd/tiny-llama") is not RANDOM_BASE_RECIPE  # a copy


def test_the_recipes_train_at_least_min_steps_on_twenty_pairs():
    for builtin in (True, False):
        assert training_config(None, builtin=builtin).total_steps(20) >= MIN_STEPS


def test_undertrained_reason():
    assert undertrained_reason(MIN_STEPS, 0.5, 262) is None
    few = undertrained_reason(9, 0.5, 262)
    assert few is not None and few.startswith("undertrained: 9 optimizer steps (< 50)")
    uniform = math.log(262)
    high = undertrained_reason(120, uniform + 0.01, 262)
    assert high is not None and f"ln(262) = {uniform:.3f}" in high and "steps" not in high.split(";")[0]
    assert undertrained_reason(120, uniform - 0.01, 262) is None
    both = undertrained_reason(9, 6.3, 262)
    assert both is not None and " and " in both and "\n" not in both
    assert undertrained_reason(120, 99.0, 0) is None  # vocabulary unknown: no loss check
