"""TrainingConfig: dlm's training block — names, defaults, ranges — plus learnerd's step budget."""

from __future__ import annotations

import pytest

from learnerd.ml.hyperparams import TrainingConfig, TrainingConfigError, training_config_from_mapping


def test_defaults_are_dlms():
    cfg = training_config_from_mapping(None)
    assert (cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout) == (8, 16, 0.05)
    assert (cfg.learning_rate, cfg.num_epochs, cfg.seed) == (2e-4, 3, 42)
    assert (cfg.sequence_len, cfg.lr_scheduler, cfg.warmup_ratio) == (2048, "cosine", 0.1)
    assert cfg.target_modules == "auto" and cfg.peft_target_modules() == "all-linear"
    assert cfg.max_steps is None


def test_mapping_overrides_and_round_trips():
    cfg = training_config_from_mapping(
        {"lora_r": 4, "learning_rate": 1, "target_modules": ["q_proj", "v_proj"], "micro_batch_size": 2}
    )
    assert cfg.lora_r == 4 and cfg.learning_rate == 1.0 and isinstance(cfg.learning_rate, float)
    assert cfg.target_modules == ("q_proj", "v_proj") and cfg.peft_target_modules() == ["q_proj", "v_proj"]
    assert training_config_from_mapping(cfg.to_dict()) == cfg


def test_dlm_only_keys_are_accepted_and_ignored():
    cfg = training_config_from_mapping({"precision": "bf16", "preference": {"enabled": False}, "lora_r": 16})
    assert cfg == TrainingConfig(lora_r=16)


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"lora_rank": 8}, "unknown key(s) in training: lora_rank"),
        ({"lora_r": 0}, "training.lora_r must be an integer in 1..256, not 0"),
        ({"lora_r": True}, "training.lora_r"),
        ({"lora_dropout": 0.6}, "training.lora_dropout"),
        ({"sequence_len": 32}, "training.sequence_len"),
        ({"learning_rate": 0}, "training.learning_rate"),
        ({"learning_rate": float("nan")}, "training.learning_rate"),
        ({"micro_batch_size": "big"}, "training.micro_batch_size"),
        ({"adapter": "qlora"}, "training.adapter"),
        ({"optimizer": "adamw_bnb_8bit"}, "training.optimizer"),
        ({"lr_scheduler": "step"}, "training.lr_scheduler"),
        ({"target_modules": []}, "training.target_modules"),
        ({"max_steps": 0}, "training.max_steps"),
        ({"max_steps": "auto"}, "training.max_steps"),
    ],
)
def test_bad_values_are_refused_with_the_key(raw, needle):
    with pytest.raises(TrainingConfigError) as info:
        training_config_from_mapping(raw)
    assert needle in str(info.value)


def test_not_a_mapping():
    with pytest.raises(TrainingConfigError, match="must be a mapping"):
        training_config_from_mapping(["lora_r", 8])  # type: ignore[arg-type]


def test_total_steps_from_epochs_or_budget():
    cfg = TrainingConfig(num_epochs=3, micro_batch_size=4, grad_accum=2)
    assert cfg.total_steps(20) == 3 * 3  # ceil(20 / 8) steps per epoch
    assert cfg.total_steps(0) == 0
    assert TrainingConfig(max_steps=7).total_steps(1000) == 7
    assert TrainingConfig().batch_size() == 8 and TrainingConfig().accumulation() == 1
