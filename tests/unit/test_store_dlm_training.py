"""TrainingConfig: dlm's training block — names, defaults, ranges — plus learnerd's step budget, and
what learnerd's trainer refuses of it (``check_trainable``)."""

from __future__ import annotations

import re

import pytest

from learnerd.store.dlm import DocumentError, TrainingConfigError
from learnerd.store.dlm.document import MAX_DOCUMENT_BYTES, parse_bytes
from learnerd.training.config import TrainingConfig, check_trainable


def test_defaults_are_dlms():
    cfg = TrainingConfig.from_mapping(None)
    assert (cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout) == (8, 16, 0.05)
    assert (cfg.learning_rate, cfg.num_epochs, cfg.seed) == (2e-4, 3, 42)
    assert (cfg.sequence_len, cfg.lr_scheduler, cfg.warmup_ratio) == (2048, "cosine", 0.1)
    assert cfg.target_modules == "auto" and cfg.peft_target_modules() == "all-linear"
    assert cfg.max_steps is None and cfg == TrainingConfig()
    assert (cfg.general_replay, cfg.replay_kl_weight, cfg.multi_turn_rows) == (0.0, 0.0, 0)  # learnerd's: off
    assert cfg.retrieval_k == 0 and cfg.group_by_length is False  # learnerd's: off


def test_mapping_overrides_and_round_trips():
    cfg = TrainingConfig.from_mapping(
        {"lora_r": 4, "learning_rate": 1, "target_modules": ["q_proj", "v_proj"], "micro_batch_size": 2,
         "sources": [{"path": "x"}]}
    )  # fmt: skip
    assert cfg.lora_r == 4 and cfg.learning_rate == 1.0 and isinstance(cfg.learning_rate, float)
    assert cfg.target_modules == ("q_proj", "v_proj") and cfg.peft_target_modules() == ["q_proj", "v_proj"]
    assert cfg.extra == {"sources": [{"path": "x"}]}
    assert TrainingConfig.from_mapping(cfg.to_dict()) == cfg


def test_yaml_1_1_strings_are_coerced_like_pydantic_lax_mode():
    cfg = TrainingConfig.from_mapping({"learning_rate": "2e-4", "lora_r": "16", "num_epochs": 2.0})
    assert (cfg.learning_rate, cfg.lora_r, cfg.num_epochs) == (2e-4, 16, 2)
    assert isinstance(cfg.lora_r, int) and isinstance(cfg.num_epochs, int)


def test_dlm_only_keys_are_kept_and_trainable():
    cfg = TrainingConfig.from_mapping({"precision": "bf16", "preference": {"enabled": False}, "lora_r": 16})
    assert cfg.lora_r == 16 and cfg.precision == "bf16" and cfg.extra == {"preference": {"enabled": False}}
    assert cfg.unknown_keys() == () and check_trainable(cfg) is cfg


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"lora_r": 0}, "training.lora_r must be in 1..256, not 0"),
        ({"lora_r": True}, "training.lora_r"),
        ({"lora_dropout": 0.6}, "training.lora_dropout"),
        ({"sequence_len": 32}, "training.sequence_len"),
        ({"learning_rate": 0}, "training.learning_rate"),
        ({"learning_rate": float("nan")}, "training.learning_rate"),
        ({"micro_batch_size": "big"}, "training.micro_batch_size"),
        ({"adapter": "full"}, "training.adapter"),
        ({"lr_scheduler": "step"}, "training.lr_scheduler"),
        ({"target_modules": []}, "training.target_modules"),
        ({"max_steps": 0}, "training.max_steps"),
        ({"max_steps": "auto"}, "training.max_steps"),
        ({"general_replay": -0.5}, "training.general_replay"),
        ({"general_replay": True}, "training.general_replay"),
        ({"replay_kl_weight": float("inf")}, "training.replay_kl_weight"),
        ({"multi_turn_rows": 0.5}, "training.multi_turn_rows"),
        ({"retrieval_k": True}, "training.retrieval_k"),
        ({"retrieval_k": 1.5}, "training.retrieval_k"),
        ({"group_by_length": "yes"}, "training.group_by_length"),
        ({"group_by_length": 1}, "training.group_by_length"),
    ],
)
def test_bad_values_are_refused_with_the_key(raw, needle):
    with pytest.raises(TrainingConfigError) as info:
        TrainingConfig.from_mapping(raw)
    assert needle in str(info.value) and info.value.key == next(iter(raw))


def test_direct_construction_is_validated_too():
    with pytest.raises(TrainingConfigError, match=r"training\.lora_r"):
        TrainingConfig(lora_r=0)


def test_not_a_mapping():
    with pytest.raises(TrainingConfigError, match="must be a mapping"):
        TrainingConfig.from_mapping(["lora_r", 8])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"lora_rank": 8}, "unknown key(s) in training: lora_rank"),
        ({"adapter": "qlora"}, "training.adapter 'qlora' needs a GPU"),
        ({"optimizer": "adamw_bnb_8bit"}, "training.optimizer 'adamw_bnb_8bit' needs a GPU"),
    ],
)
def test_valid_for_dlm_but_not_trainable_here(raw, needle):
    cfg = TrainingConfig.from_mapping(raw)  # dlm accepts these (or, for a typo, learnerd keeps the key) ...
    with pytest.raises(TrainingConfigError) as info:  # ... the trainer refuses them
        check_trainable(cfg)
    assert needle in str(info.value)


def test_total_steps_from_epochs_or_budget():
    cfg = TrainingConfig(num_epochs=3, micro_batch_size=4, grad_accum=2)
    assert cfg.total_steps(20) == 3 * 3  # ceil(20 / 8) steps per epoch
    assert cfg.total_steps(0) == 0
    assert TrainingConfig(max_steps=7).total_steps(1000) == 7
    assert cfg.model_copy(update={"min_steps": 50}).total_steps(20) == 50  # more epochs over a few rows
    assert cfg.model_copy(update={"min_steps": 5}).total_steps(20) == 9 and TrainingConfig().min_steps == 0
    assert TrainingConfig(max_steps=7, min_steps=50).total_steps(1000) == 7  # a budget is the budget
    assert TrainingConfig().batch_size() == 8 and TrainingConfig().accumulation() == 1


@pytest.mark.parametrize(
    ("key", "value", "range_"),
    [
        ("num_epochs", 10**9, "1..1000"),
        ("max_steps", 10**9, "1..1000000"),
        ("multi_turn_rows", 10**9, "0..10000"),
        ("retrieval_k", 17, "0..16"),
        ("lora_alpha", 10**21, "1..1024"),
        ("seed", 2**64, "0..4294967295"),
        ("seed", -1, "0..4294967295"),
    ],
)
def test_hostile_budgets_and_seeds_are_refused_with_their_range(key: str, value: int, range_: str) -> None:
    with pytest.raises(TrainingConfigError, match=rf"training\.{key} must be in {re.escape(range_)}"):
        TrainingConfig.from_mapping({key: value})


def test_a_document_larger_than_the_limit_is_refused_before_parsing() -> None:
    data = b"---\ndlm_id: 01KPPJZWBDDDYRESSA0HESRDHS\nbase_model: x\n---\n" + b"a" * MAX_DOCUMENT_BYTES
    with pytest.raises(DocumentError, match="learnerd reads at most 16,777,216"):
        parse_bytes(data)
