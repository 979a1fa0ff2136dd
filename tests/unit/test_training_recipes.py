"""Per-base training defaults under the document's own keys, and the undertrained check: its cause and fix
blame only the document's own keys; learnerd's defaults never train fewer than MIN_STEPS."""

from __future__ import annotations

import math

import pytest

from learnerd.ml.undertrained import GENERAL_FIX
from learnerd.store.dlm import TrainingConfigError
from learnerd.training.config import LEARNERD_KEYS, TrainingConfig
from learnerd.training.ingredients.retrieval import MAX_RETRIEVAL_K
from learnerd.training.recipes import (
    MIN_STEPS,
    PRETRAINED_RECIPE,
    RANDOM_BASE_RECIPE,
    default_training,
    document_training,
    undertrained_reason,
)

DLM_DEFAULTS = {k: v for k, v in TrainingConfig().to_dict().items() if v is not None}
"""dlm's whole block spelled out: what ``learnerd init`` used to write."""


def training_config(raw: dict | None, *, builtin: bool) -> TrainingConfig:
    return document_training(raw, builtin=builtin).config


def test_document_keys_win_over_the_recipe():
    assert training_config(None, builtin=True).learning_rate == RANDOM_BASE_RECIPE["learning_rate"]
    pretrained = training_config({}, builtin=False)
    assert (pretrained.learning_rate, pretrained.batch_size()) == (1e-3, PRETRAINED_RECIPE["micro_batch_size"])
    own = training_config({"learning_rate": 2e-4, "num_epochs": 3}, builtin=False)
    assert (own.learning_rate, own.num_epochs, own.lora_r) == (2e-4, 3, PRETRAINED_RECIPE["lora_r"])
    with pytest.raises(TrainingConfigError, match="lora_r"):
        training_config({"lora_r": 0}, builtin=True)


def test_own_keys_are_those_that_differ_from_the_recipe():
    assert document_training(None, builtin=True).own_keys == frozenset()
    assert document_training(default_training("learnerd/tiny-llama"), builtin=True).own_keys == frozenset()
    # YAML 1.1 reads 1e-2 as a string: the same value as the recipe's, so still learnerd's
    assert document_training({"learning_rate": "1e-2", "seed": 7}, builtin=True).own_keys == {"seed"}
    old_init = document_training(DLM_DEFAULTS, builtin=True).own_keys
    assert {"num_epochs", "learning_rate", "micro_batch_size", "lora_r"} <= old_init
    assert "sequence_len" not in old_init and "adapter" not in old_init  # dlm's default, not the recipe's either


def test_new_documents_get_the_recipe_of_their_base_in_keys_dlm_knows():
    assert default_training("learnerd/tiny-llama") == RANDOM_BASE_RECIPE
    assert default_training("learnerd/tiny-llama") is not RANDOM_BASE_RECIPE  # a copy
    written = default_training("smollm2-135m-instruct")
    assert {"general_replay", "replay_kl_weight"} <= PRETRAINED_RECIPE.keys()
    assert written == {k: v for k, v in PRETRAINED_RECIPE.items() if k not in LEARNERD_KEYS} and written
    # learnerd still trains the document with the whole recipe, and none of it counts as the document's own
    training = document_training(written, builtin=False)
    assert training.config == TrainingConfig.from_mapping(PRETRAINED_RECIPE) and training.own_keys == frozenset()


def test_learnerd_keys_are_fields_of_the_block():
    assert TrainingConfig.model_fields.keys() > LEARNERD_KEYS


def test_the_recipes_train_at_least_min_steps_on_twenty_pairs():
    assert training_config(None, builtin=True).total_steps(20) >= MIN_STEPS
    # a pretrained base trains each pair, (under [serve] rag_k, 3 by default) a RAFT row of each pair and its
    # conversations quoted as served, at most one per pair: 60 rows for 20 pairs, and fewer epochs over them
    pretrained = document_training(None, builtin=False, served_rag_k=3).config
    assert pretrained.multi_turn_rows == 0 and pretrained.retrieval_multi_turn == 40
    rows = 20 + 20 * (pretrained.retrieval_k > 0) + min(20, pretrained.retrieval_multi_turn)
    assert rows == 60 and pretrained.total_steps(rows) >= MIN_STEPS
    # a small document's rows, 5 pairs: one conversation per pair, and more epochs to reach MIN_STEPS
    assert pretrained.total_steps(5 + 5 + 5) == MIN_STEPS > pretrained.num_epochs * 4
    plain = document_training(None, builtin=False).config  # nothing quoted when the endpoint quotes nothing
    assert plain.multi_turn_rows == 40 and plain.retrieval_multi_turn == 0 and plain.retrieval_k == 0
    # routed, the adapter is asked only what it learned, whose example retrieval quotes: every RAFT row quotes it
    assert pretrained.retrieval_own == 1.0 and TrainingConfig.from_mapping({"retrieval_k": 3}).retrieval_own == 0.5


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
    assert few.endswith("; fix: more epochs (training.num_epochs) or more rows")  # without the cycle's training


def test_learnerds_defaults_train_at_least_min_steps_on_a_few_rows():
    """The pretrained recipe's ``min_steps``: a small document's rows for more epochs, never an undertrained cycle
    by its steps; the finding then has no own key to blame and gives the general advice."""
    for block in (None, default_training("smollm2-135m-instruct")):  # left out, or the recipe written out
        training = document_training(block, builtin=False)
        assert training.config.total_steps(3) == MIN_STEPS and training.config.min_steps == MIN_STEPS
        reason = undertrained_reason(4, 0.5, 49152, training=training, rows=3)
        assert reason == f"undertrained: 4 optimizer steps (< 50); {GENERAL_FIX}"
    assert document_training(None, builtin=False).config.total_steps(200) == 100  # 2 epochs of 50 batches


def test_the_documents_own_keys_are_named_with_their_fix():
    old_init = document_training(DLM_DEFAULTS, builtin=True)
    reason = undertrained_reason(9, 6.049, 262, training=old_init, rows=21)
    assert reason is not None and reason.startswith("undertrained: 9 optimizer steps (< 50) and final loss 6.049")
    assert reason.endswith(
        "; cause: the document's training block sets num_epochs: 3, micro_batch_size: auto, learning_rate: 0.0002; "
        "fix: delete them to use learnerd's recipe for this base (360 steps over 21 rows)"
    )
    assert document_training({"num_epochs": 5}, builtin=False).config.total_steps(3) == MIN_STEPS  # min_steps
    short = document_training({"num_epochs": 5, "min_steps": 0}, builtin=False)
    assert short.config.total_steps(3) == 5
    reason = undertrained_reason(5, 0.5, 49152, training=short, rows=3)
    assert reason is not None and reason.endswith(
        "cause: the document's training block sets num_epochs: 5, min_steps: 0; fix: delete them to use learnerd's "
        "recipe for this base (50 steps over 3 rows)"
    )
    hot = document_training({"learning_rate": 0.5}, builtin=False)
    reason = undertrained_reason(60, 12.0, 49152, training=hot, rows=60)
    assert reason is not None and reason.endswith(
        "sets learning_rate: 0.5; fix: delete it to use learnerd's recipe for this base (50 steps over 60 rows)"
    )
    flat = undertrained_reason(60, 12.0, 49152, training=document_training(None, builtin=False), rows=60)
    assert flat is not None and "learnerd's default learning_rate 0.001 did not fit these rows" in flat


def test_a_served_rag_k_trains_retrieved_examples_unless_the_document_says_otherwise():
    served = document_training({"seed": 7}, builtin=False, served_rag_k=3)
    assert served.config.retrieval_k == 3 and served.own_keys == {"seed"}  # learnerd's value, not the document's
    assert served.recipe().retrieval_k == 3 and document_training({}, builtin=False).config.retrieval_k == 0
    own = document_training({"retrieval_k": 0}, builtin=False, served_rag_k=3)
    assert own.config.retrieval_k == 0 and own.own_keys == {"retrieval_k"}
    # without retrieval rows the recipe's conversations are plain ones, not none
    assert (own.config.multi_turn_rows, own.config.retrieval_multi_turn) == (40, 0)
    assert (served.config.multi_turn_rows, served.config.retrieval_multi_turn) == (0, 40)
    assert document_training(None, builtin=False, served_rag_k=40).config.retrieval_k == MAX_RETRIEVAL_K
    assert document_training(None, builtin=True, served_rag_k=3).config.retrieval_k == 0  # the tiny quick start's
