"""Training checkpoints on the built-in tiny model: a training stopped part-way goes on from its last checkpoint
to the adapter the uninterrupted training gives, bit for bit; a checkpoint of another training, or one that
cannot be read, is never resumed; through the child process, a cancelled cycle's next run resumes and the
committed version's directory no longer holds a checkpoint."""

from __future__ import annotations

import functools

import anyio
import pytest
import torch
from safetensors.torch import load_file
from structlog.testing import capture_logs

from learnerd.ml.base_model import DEFAULT_BASE_MODEL, load_model_directory, resolve_base_model
from learnerd.ml.rows import TrainingRow
from learnerd.store.adapters import AdapterStore
from learnerd.training.checkpoint import CHECKPOINT_DIR, TrainingCheckpoint, fingerprint
from learnerd.training.config import TrainingConfig
from learnerd.training.cycle import train_cycle
from learnerd.training.lora import ProgressEvent, train_lora
from tests.qa_pairs import QA_PAIRS
from tests.support.steering import one_thread

ROWS = [TrainingRow.chat(f"qa{i:02d}", q, a) for i, (q, a) in enumerate(QA_PAIRS[:8])]
CONFIG = TrainingConfig(learning_rate=1e-2, num_epochs=12)  # 12 steps of 8 rows, with dlm's LoRA dropout
CYCLE_CONFIG = TrainingConfig(learning_rate=1e-2, num_epochs=60)  # 60 steps: a cancellation lands part-way
pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Stop(Exception):
    """Raised from the progress callback: the training stops there, as a killed process would."""


def _train(model_dir, checkpoint=None, stop_at=None):
    """``train_lora`` on ROWS: its trainable parameters (cloned), its result and the progress events it reported;
    raises :class:`Stop` after step ``stop_at``."""
    model, tokenizer = load_model_directory(model_dir)
    events: list[ProgressEvent] = []

    def progress(event: ProgressEvent) -> None:
        events.append(event)
        if event.step == stop_at:
            raise Stop

    peft_model, result = train_lora(model, tokenizer, ROWS, CONFIG, on_progress=progress, checkpoint=checkpoint)
    weights = {n: p.detach().clone() for n, p in peft_model.named_parameters() if p.requires_grad}
    return weights, result, events


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir):
    """:func:`_train` without a checkpoint or a stop: the adapter every resumed training must reach (read only)."""
    with one_thread():
        return _train(tiny_model_dir)


def test_a_stopped_training_resumes_from_its_checkpoint_to_the_uninterrupted_adapter(
    tiny_model_dir, tmp_path, uninterrupted
):
    straight, expected, straight_events = uninterrupted
    assert expected.steps == 12 and expected.resumed_at_step == 0
    checkpoint = TrainingCheckpoint(tmp_path / "ckpt", "a" * 64, every_s=0)
    with pytest.raises(Stop):
        _train(tiny_model_dir, checkpoint, stop_at=7)  # step 7 ran; its checkpoint is not written yet
    assert torch.load(checkpoint.path, weights_only=True)["step"] == 6

    weights, result, events = _train(tiny_model_dir, checkpoint)
    assert result.resumed_at_step == 6
    assert [e.step for e in events] == list(range(1, 13))  # the saved steps' events first, then the rest
    assert [e.restored for e in events] == [True] * 6 + [False] * 6
    assert [e.loss for e in events] == [e.loss for e in straight_events]
    assert (result.start_loss, result.final_loss, result.tokens_trained, result.tokens_computed) == (
        expected.start_loss,
        expected.final_loss,
        expected.tokens_trained,
        expected.tokens_computed,
    )
    assert weights.keys() == straight.keys()
    assert all(torch.equal(weights[n], straight[n]) for n in straight)


def test_a_checkpoint_of_another_training_or_an_unreadable_one_is_not_resumed(tiny_model_dir, tmp_path):
    other = TrainingCheckpoint(tmp_path / "ckpt", fingerprint({"rows": "others"}), every_s=0)
    with pytest.raises(Stop):
        _train(tiny_model_dir, other, stop_at=3)
    mine = TrainingCheckpoint(tmp_path / "ckpt", fingerprint({"rows": "these"}), every_s=3600)
    with capture_logs() as logs:
        _, result, events = _train(tiny_model_dir, mine)
    assert result.resumed_at_step == 0 and events[0].step == 1
    assert [e["event"] for e in logs if e["event"].startswith("training.checkpoint")] == ["training.checkpoint_other"]
    assert not mine.path.exists()  # removed, not kept until a save of this training replaces it

    mine.path.parent.mkdir()
    mine.path.write_bytes(b"not a checkpoint")
    with capture_logs() as logs:
        _, result, _ = _train(tiny_model_dir, mine)
    assert result.resumed_at_step == 0
    assert [e["event"] for e in logs if e["event"].startswith("training.checkpoint")] == [
        "training.checkpoint_unreadable"
    ]


def test_a_checkpoint_whose_parameters_are_not_the_adapters_is_refused_before_anything_loads(
    tiny_model_dir, tmp_path, uninterrupted
):
    checkpoint = TrainingCheckpoint(tmp_path / "ckpt", "a" * 64, every_s=0)
    with pytest.raises(Stop):
        _train(tiny_model_dir, checkpoint, stop_at=2)
    state = torch.load(checkpoint.path, weights_only=True)
    name = next(iter(state["params"]))
    state["params"][name] = torch.zeros(3)
    torch.save(state, checkpoint.path)
    straight, _, _ = uninterrupted
    with capture_logs() as logs:
        weights, result, _ = _train(tiny_model_dir, checkpoint)
    assert result.resumed_at_step == 0 and all(torch.equal(weights[n], straight[n]) for n in straight)
    assert any(e["event"] == "training.checkpoint_unreadable" for e in logs)


def test_a_cancelled_cycle_goes_on_from_its_checkpoint_in_the_next_one_and_commits_the_same_adapter(
    models_dir, tmp_path
):
    base = resolve_base_model(DEFAULT_BASE_MODEL, cache_dir=models_dir)

    async def cancelled_cycle(store: AdapterStore) -> None:
        with anyio.CancelScope() as scope:

            def stepped(event: ProgressEvent) -> None:
                if event.step >= 5:
                    scope.cancel()

            await train_cycle(
                store, "qa", base, ROWS, CYCLE_CONFIG, num_threads=1, checkpoint_every_s=0, on_progress=stepped
            )
        assert scope.cancelled_caught

    interrupted = AdapterStore(tmp_path / "interrupted")
    anyio.run(cancelled_cycle, interrupted)
    assert interrupted.latest("qa") is None and (interrupted.doc_dir("qa") / CHECKPOINT_DIR).is_dir()
    cycle = functools.partial(train_cycle, interrupted, "qa", base, ROWS, CYCLE_CONFIG, num_threads=1)
    resumed = anyio.run(cycle)
    # step 5 was reported after step 4's checkpoint was saved; the child may have saved more before it was stopped
    assert 4 <= resumed.result.resumed_at_step < resumed.result.steps == 60
    assert resumed.version.metadata().extra["resumed_at_step"] == resumed.result.resumed_at_step
    assert not (interrupted.doc_dir("qa") / CHECKPOINT_DIR).exists()

    uninterrupted = AdapterStore(tmp_path / "uninterrupted")
    straight = anyio.run(functools.partial(train_cycle, uninterrupted, "qa", base, ROWS, CYCLE_CONFIG, num_threads=1))
    assert straight.result.resumed_at_step == 0 and straight.result.final_loss == resumed.result.final_loss
    got = load_file(resumed.version.path / "adapter_model.safetensors")
    want = load_file(straight.version.path / "adapter_model.safetensors")
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
