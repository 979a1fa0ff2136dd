"""The device setting: its grammar, CPU float32, and a GPU asked for where torch sees none."""

from __future__ import annotations

import re

import pytest
import torch

from learnerd.daemon.config import Config, load_config
from learnerd.ml.device import DeviceError, check_device, resolve_device
from learnerd.sections import ConfigError

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")


@pytest.mark.parametrize("spec", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_well_formed_settings(spec):
    assert check_device(spec) == spec


@pytest.mark.parametrize("spec", ["gpu", "CUDA", "cuda:", "cuda:x", "mps", "", "cpu "])
def test_malformed_settings_are_refused(spec):
    with pytest.raises(DeviceError, match=re.escape(f"device {spec!r} is not one of auto | cpu | cuda | cuda:N")):
        check_device(spec)


def test_cpu_is_float32():
    assert resolve_device("cpu") == resolve_device() and resolve_device("cpu").dtype is torch.float32


@NO_GPU
def test_auto_without_a_gpu_is_cpu_and_cuda_is_refused_naming_the_fix():
    assert resolve_device("auto").device == "cpu"
    for spec in ("cuda", "cuda:1"):
        with pytest.raises(DeviceError, match=r'torch sees no CUDA GPU .*set device = "cpu" or "auto"'):
            resolve_device(spec)


def test_config_sections_validate_the_device(tmp_path):
    assert Config().training.device == "auto" and Config().evaluation.device == "auto"
    path = tmp_path / "learnerd.toml"
    path.write_text('[training]\ndevice = "cuda:1"\n[evaluation]\ndevice = "cpu"\n')
    cfg = load_config(path)
    assert (cfg.training.device, cfg.evaluation.device) == ("cuda:1", "cpu")
    path.write_text('[evaluation]\ndevice = "gpu"\n')
    with pytest.raises(ConfigError, match=r"evaluation\.device 'gpu' is not one of"):
        load_config(path)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_placement_trains_and_answers(tiny_model_dir):
    from learnerd.ml.base_model import load_model_directory
    from learnerd.ml.generate import greedy_reply
    from learnerd.ml.rows import TrainingRow
    from learnerd.store.dlm import TrainingConfig
    from learnerd.training.lora import train_lora

    placement = resolve_device("cuda")
    assert placement.dtype in (torch.bfloat16, torch.float16)
    model, tokenizer = load_model_directory(tiny_model_dir, placement=placement)
    assert model.device.type == "cuda"
    rows = [TrainingRow.chat("s1", "list pods", "kubectl get pods")]
    peft_model, result = train_lora(model, tokenizer, rows, TrainingConfig(learning_rate=1e-2, max_steps=60))
    assert result.final_loss < result.start_loss
    assert greedy_reply(peft_model, tokenizer, "list pods", max_new_tokens=8).token_ids
