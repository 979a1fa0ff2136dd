"""The cross-entropy at the loss-carrying positions only (learnerd/training/loss.py) is transformers' loss on the
whole logits: the same number, the same gradients, and so the same adapter after a few steps (float rounding apart).
The tiny model, rows whose prompts are longer than their answers, right padding."""

from __future__ import annotations

import pytest
import torch

from learnerd.ml.base_model import load_model_directory
from learnerd.ml.rows import TrainingRow, encode_rows
from learnerd.training import lora
from learnerd.training.config import TrainingConfig
from learnerd.training.lora import _collate, attach_lora, loss_sample, train_lora
from learnerd.training.loss import cross_entropy_sum, loss_logits, loss_mask, loss_targets
from tests.qa_pairs import QA_PAIRS

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROWS = [
    TrainingRow.chat(f"qa{i}", " and then ".join(q for q, _ in QA_PAIRS[i : i + 3]), a, system="Answer in one line.")
    for i, (_, a) in enumerate(QA_PAIRS[:6])
]
CONFIG = TrainingConfig(learning_rate=1e-2, max_steps=6, micro_batch_size=3, lora_dropout=0.0)


def _lora_grads(model) -> dict[str, torch.Tensor]:
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad(set_to_none=True)
    return grads


def test_the_loss_and_its_gradients_are_transformers_on_the_whole_logits(tiny_model_dir):
    model, tokenizer = load_model_directory(tiny_model_dir)
    peft_model = attach_lora(model, CONFIG)
    with torch.no_grad():  # an adapter that changes the logits, so its gradients are not the fresh adapter's
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    encoded, _ = encode_rows(tokenizer, ROWS, 512)
    input_ids, attention_mask, labels = _collate(encoded, tokenizer.pad_token_id or 0)
    tokens = sum(row.loss_tokens for row in encoded)
    mask = loss_mask(labels)
    assert 0 < int(mask.sum()) == tokens < int(attention_mask.sum()) // 2, "the prompts outweigh the answers"

    whole = peft_model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, num_items_in_batch=tokens)
    whole.loss.backward()
    expected = _lora_grads(peft_model)
    logits = loss_logits(peft_model, input_ids, attention_mask, mask)
    assert logits.shape == (tokens, whole.logits.shape[-1])
    torch.testing.assert_close(logits, whole.logits[mask], rtol=1e-5, atol=1e-5)
    loss = cross_entropy_sum(logits, loss_targets(labels)) / tokens
    loss.backward()
    got = _lora_grads(peft_model)

    torch.testing.assert_close(loss, whole.loss, rtol=1e-6, atol=1e-6)
    assert got.keys() == expected.keys()
    for name in got:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-6)


def test_training_on_the_selected_logits_gives_the_adapter_of_the_whole_logits(tiny_model_dir, monkeypatch):
    """The step loop with logits computed everywhere, then selected (what it did before), trains the same adapter."""

    def run():
        model, tokenizer = load_model_directory(tiny_model_dir)
        peft_model, result = train_lora(model, tokenizer, ROWS, CONFIG)
        return {k: v for k, v in peft_model.state_dict().items() if "lora_" in k}, result

    selected, new = run()

    def everywhere(model, input_ids, attention_mask, mask):
        return model(input_ids=input_ids, attention_mask=attention_mask).logits[mask]

    monkeypatch.setattr(lora, "loss_logits", everywhere)
    whole, old = run()
    assert new.steps == old.steps == CONFIG.max_steps
    assert new.start_loss == pytest.approx(old.start_loss, rel=1e-5)
    assert new.final_loss == pytest.approx(old.final_loss, rel=1e-4)
    assert any(not torch.equal(v, torch.zeros_like(v)) for k, v in selected.items() if "lora_B" in k), "it trained"
    for name in selected:
        torch.testing.assert_close(selected[name], whole[name], rtol=1e-4, atol=1e-5)


def test_the_start_and_final_losses_score_a_seeded_sample_of_the_rows(tiny_model_dir):
    _, tokenizer = load_model_directory(tiny_model_dir)
    encoded, _ = encode_rows(tokenizer, [TrainingRow.chat(f"r{i}", f"q{i}?", f"a{i}") for i in range(100)], 512)
    sample = loss_sample(encoded, seed=42)
    assert len(sample) == lora.LOSS_SAMPLE_ROWS and sample == loss_sample(encoded, seed=42)
    assert [encoded.index(r) for r in sample] == sorted(encoded.index(r) for r in sample), "kept in their order"
    assert sample != loss_sample(encoded, seed=7)
    assert loss_sample(encoded[:10], seed=42) == encoded[:10], "all of them when there are few"
