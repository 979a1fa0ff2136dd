"""LoRA training on the built-in tiny model, through the child process and into the adapter store."""

from __future__ import annotations

import functools
import shutil
from types import SimpleNamespace

import anyio
import pytest
import torch

from learnerd.ml.base_model import DEFAULT_BASE_MODEL, load_model_directory, resolve_base_model
from learnerd.ml.generate import greedy_answer
from learnerd.ml.loader import load_adapter
from learnerd.ml.rows import TrainingRow
from learnerd.store.adapters import AdapterStore
from learnerd.training.config import TrainingConfig
from learnerd.training.cycle import ReplayPolicy, plan_cycle, train_cycle
from learnerd.training.lora import rows_loss, train_lora
from tests.qa_pairs import EXTRA_QA_PAIRS, QA_PAIRS

# The tiny model knows nothing, so it needs a far higher learning rate than dlm's 2e-4 default; both
# keys are dlm's own, so a document carrying this training block stays valid for dlm.
MEMORISE = TrainingConfig(learning_rate=1e-2, num_epochs=40)
QA_ROWS = [TrainingRow.chat(f"qa{i:02d}", q, a) for i, (q, a) in enumerate(QA_PAIRS)]
EXTRA_ROWS = [TrainingRow.chat(f"extra{i}", q, a) for i, (q, a) in enumerate(EXTRA_QA_PAIRS)]
THREADS = 1  # torch threads of the training processes (see the one_torch_thread fixture)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, models_dir):
    """One training cycle on the 20 Q/A rows, committed and promoted as v0001 (shared: tests copy the store to
    change it)."""
    root = tmp_path_factory.mktemp("adapters")
    base = resolve_base_model(DEFAULT_BASE_MODEL, cache_dir=models_dir)
    events = []
    store = AdapterStore(root)
    cycle = functools.partial(
        train_cycle, store, "qa", base, QA_ROWS, MEMORISE, num_threads=THREADS, on_progress=events.append
    )
    outcome = anyio.run(cycle)
    store.promote(outcome.version)
    return SimpleNamespace(root=root, base=base, outcome=outcome, events=events)


def _copy_store(trained, tmp_path) -> AdapterStore:
    shutil.copytree(trained.root, tmp_path / "adapters")
    return AdapterStore(tmp_path / "adapters")


def _exact_answers(model, tokenizer, pairs) -> int:
    return sum(greedy_answer(model, tokenizer, q, max_new_tokens=len(a.encode()) + 8) == a for q, a in pairs)


def test_one_cycle_memorises_the_answers(trained):
    """Issue 4's acceptance test: >= 18 of 20 answers exact with the adapter, none without."""
    version = trained.outcome.version
    assert trained.outcome.plan.mode == "fresh" and version.name == "v0001"
    model, tokenizer = load_model_directory(trained.base.path)
    peft_model = load_adapter(model, version)
    assert _exact_answers(peft_model, tokenizer, QA_PAIRS) >= 18
    with peft_model.disable_adapter():
        assert _exact_answers(peft_model, tokenizer, QA_PAIRS) == 0


def test_loss_falls_and_progress_is_reported(trained):
    result, meta = trained.outcome.result, trained.outcome.version.metadata()
    assert result.final_loss < result.start_loss / 10
    assert result.steps == MEMORISE.total_steps(20) == 120
    assert [e.step for e in trained.events] == list(range(1, 121))
    assert all(b.tokens > a.tokens for a, b in zip(trained.events, trained.events[1:], strict=False))
    assert trained.events[-1].tokens == result.tokens_trained
    assert (meta.steps, meta.final_loss, meta.start_loss, meta.seed) == (120, result.final_loss, result.start_loss, 42)
    assert meta.section_ids == tuple(r.section_id for r in QA_ROWS) and meta.parent_version is None
    assert meta.base_model == DEFAULT_BASE_MODEL and meta.base_model_identity == trained.base.identity
    assert meta.hyperparameters["learning_rate"] == 1e-2
    assert set(meta.library_versions) == {"torch", "transformers", "peft", "tokenizers"}


def test_same_seed_same_adapter(tiny_model_dir):
    config = TrainingConfig(learning_rate=1e-2, max_steps=4, micro_batch_size=2)

    def run(cfg):
        model, tokenizer = load_model_directory(tiny_model_dir)
        peft_model, result = train_lora(model, tokenizer, QA_ROWS[:4], cfg)
        return {k: v for k, v in peft_model.state_dict().items() if "lora_" in k}, result

    (a, ra), (b, rb) = run(config), run(config)
    assert ra.final_loss == rb.final_loss and all(torch.equal(a[k], b[k]) for k in a)
    c, _ = run(TrainingConfig(learning_rate=1e-2, max_steps=4, micro_batch_size=2, seed=7))
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_a_budget_within_one_epoch_tokenises_only_the_rows_it_trains(tiny_model_dir, monkeypatch):
    from learnerd.training import lora

    encoded_rows: list[str] = []
    encode_rows = lora.encode_rows

    def recording(tokenizer, rows, max_length):  # the real encoder, recording what it is given
        encoded_rows.extend(r.section_id for r in rows)
        return encode_rows(tokenizer, rows, max_length)

    monkeypatch.setattr(lora, "encode_rows", recording)
    config = TrainingConfig(learning_rate=1e-2, max_steps=2, micro_batch_size=2, grad_accum=1)
    model, tokenizer = load_model_directory(tiny_model_dir)
    _, result = train_lora(model, tokenizer, QA_ROWS, config)  # 20 rows; 2 steps of 2 reach 4
    assert result.steps == 2 and result.rows == 4 and len(encoded_rows) == 4
    assert encoded_rows == [r.section_id for r in lora.budget_rows(QA_ROWS, config)]
    assert len(set(encoded_rows)) == 4 and set(encoded_rows) <= {r.section_id for r in QA_ROWS}
    assert lora.budget_rows(QA_ROWS, TrainingConfig(max_steps=3)) == QA_ROWS  # 3 steps of 8 rows: all 20
    assert lora.budget_rows(QA_ROWS, TrainingConfig(num_epochs=1)) == QA_ROWS  # no budget: every row


def test_group_by_length_trains_every_row_each_epoch_and_computes_less_padding(tiny_model_dir):
    from learnerd.ml.rows import encode_rows
    from learnerd.training import lora
    from learnerd.training.ingredients.multi_turn import multi_turn_rows

    # single-turn pairs and 4-pair conversations (one per pair): 40 rows, mega-batches of 16 (transformers' default)
    rows = QA_ROWS + multi_turn_rows(QA_ROWS, 20, seed=0)
    _, tokenizer = load_model_directory(tiny_model_dir)
    encoded, _ = encode_rows(tokenizer, rows, 2048)
    batches = lora._micro_batches(encoded, 4, torch.Generator().manual_seed(0), by_length=True)
    epoch = [next(batches) for _ in range(len(encoded) // 4)]
    assert sorted(r.section_id for b in epoch for r in b) == sorted(r.section_id for r in encoded)

    def train(group_by_length):
        config = TrainingConfig(learning_rate=1e-2, num_epochs=2, micro_batch_size=4, group_by_length=group_by_length)
        model, tokenizer = load_model_directory(tiny_model_dir)
        return train_lora(model, tokenizer, rows, config)[1]

    grouped, shuffled = train(True), train(False)
    assert grouped.steps == shuffled.steps == 20 and grouped.tokens_trained == shuffled.tokens_trained
    assert shuffled.tokens_computed >= grouped.tokens_computed >= grouped.tokens_trained
    assert grouped.tokens_computed < shuffled.tokens_computed  # the same rows, less padding computed


def test_incremental_cycle_resumes_and_replays(trained, tmp_path):
    store = _copy_store(trained, tmp_path)
    rows = QA_ROWS + EXTRA_ROWS
    config = TrainingConfig(learning_rate=1e-2, num_epochs=20)  # not the adapter's shape: still incremental
    outcome = anyio.run(functools.partial(train_cycle, store, "qa", trained.base, rows, config, num_threads=THREADS))
    plan, meta = outcome.plan, outcome.version.metadata()
    assert plan.mode == "incremental" and outcome.version.name == "v0002" and meta.parent_version == 1
    assert plan.new_section_ids == tuple(r.section_id for r in EXTRA_ROWS)
    # dlm's replay budget max(32, 2 × new) covers all 20 unchanged rows of this small document.
    assert sorted(plan.replay_section_ids) == sorted(r.section_id for r in QA_ROWS)
    assert meta.section_ids == tuple(r.section_id for r in rows)
    # Resumed, not fresh: the replayed rows were already known, so the cycle starts well below chance.
    assert outcome.result.start_loss < 0.6 * trained.outcome.result.start_loss
    model, tokenizer = load_model_directory(trained.base.path)
    peft_model = load_adapter(model, outcome.version)
    assert rows_loss(peft_model, tokenizer, EXTRA_ROWS) < 0.5
    assert rows_loss(peft_model, tokenizer, QA_ROWS) < 0.5  # old knowledge kept
    assert _exact_answers(peft_model, tokenizer, QA_PAIRS + EXTRA_QA_PAIRS) >= 22
    # The same document state again trains nothing: not while v0002 awaits its verdict, nor once promoted.
    waiting = anyio.run(functools.partial(train_cycle, store, "qa", trained.base, rows, config, num_threads=THREADS))
    assert waiting.version is None and waiting.plan.reason.endswith("v0002, a candidate awaiting its evaluation")
    store.promote(outcome.version)
    again = plan_cycle(rows, config, trained.base, store.current("qa"), replay=ReplayPolicy())
    assert again.mode == "none" and again.rows == ()


def test_without_replay_old_rows_are_forgotten(trained):
    """The control for the test above: the same resume on the new rows alone loses the old answers."""
    model, tokenizer = load_model_directory(trained.base.path)
    config = TrainingConfig(learning_rate=1e-2, num_epochs=20)
    peft_model, _ = train_lora(model, tokenizer, EXTRA_ROWS, config, resume_from=trained.outcome.version.path)
    assert rows_loss(peft_model, tokenizer, EXTRA_ROWS) < 0.5
    assert rows_loss(peft_model, tokenizer, QA_ROWS) > 2 * trained.outcome.result.final_loss + 0.5


def test_rehearsal_epochs_hold_every_row_and_the_next_share_of_the_rehearsal_rows():
    from learnerd.ml.rows import EncodedRow
    from learnerd.training.lora import _micro_batches

    def encoded(name, n):
        return [EncodedRow(f"{name}{i}", (1,) * (i + 1), (1,) * (i + 1)) for i in range(n)]

    every, rehearsal = encoded("n", 3), encoded("r", 10)
    batches = _micro_batches(every, 4, torch.Generator().manual_seed(0), rehearsal=rehearsal, per_epoch=5)
    epochs = [[r.section_id for _ in range(2) for r in next(batches)] for _ in range(4)]  # 8 rows: 2 batches each
    for epoch in epochs:
        assert sorted(i for i in epoch if i.startswith("n")) == ["n0", "n1", "n2"]
        assert len([i for i in epoch if i.startswith("r")]) == 5
    for pair in (epochs[0] + epochs[1], epochs[2] + epochs[3]):  # each rehearsal row once in every 10 taken
        assert sorted(i for i in pair if i.startswith("r")) == sorted(r.section_id for r in rehearsal)


def test_spread_rehearsal_keeps_the_rows_a_replay_sample_leaves_out(trained):
    """dlm's replay draws k unchanged rows and rehearses only those: the others fade. The same budget spread
    over every unchanged row (k an epoch, in turn) keeps them, at the same number of steps."""
    model, tokenizer = load_model_directory(trained.base.path)
    config = TrainingConfig(learning_rate=1e-2, num_epochs=20)
    sample, left_out = QA_ROWS[:5], QA_ROWS[5:]
    resume = trained.outcome.version.path
    spread, spread_result = train_lora(
        model, tokenizer, EXTRA_ROWS, config, resume_from=resume, rehearsal=QA_ROWS, rehearsal_per_epoch=5
    )
    spread_loss = rows_loss(spread, tokenizer, left_out)
    model, tokenizer = load_model_directory(trained.base.path)
    drawn, drawn_result = train_lora(model, tokenizer, [*EXTRA_ROWS, *sample], config, resume_from=resume)
    drawn_loss = rows_loss(drawn, tokenizer, left_out)
    assert spread_result.steps == drawn_result.steps and spread_result.rows == drawn_result.rows
    print(f"left-out rows' loss: spread {spread_loss:.3f}, drawn {drawn_loss:.3f} nats/token")
    assert spread_loss < 0.5 * drawn_loss


def test_an_incremental_cycle_over_budget_rehearses_every_unchanged_row_in_the_child(trained, tmp_path):
    """Through the training process: a budget of 4 rows an epoch over 20 unchanged ones trains the new rows and 4
    rehearsed ones an epoch (the rehearsal rows reach the child), and the version records all 20 as replayed."""
    store = _copy_store(trained, tmp_path)
    config = TrainingConfig(learning_rate=1e-2, num_epochs=20)
    cycle = train_cycle(
        store, "qa", trained.base, QA_ROWS + EXTRA_ROWS, config, replay=ReplayPolicy(0.0, 4), num_threads=THREADS
    )
    outcome = anyio.run(lambda: cycle)
    assert outcome.plan.rehearsal_per_epoch == 4 and outcome.result.rows == len(EXTRA_ROWS) + 4
    assert outcome.version.metadata().replay_section_ids == tuple(r.section_id for r in QA_ROWS)
    assert "20 rows rehearsed, 4 an epoch" in outcome.plan.reason
    model, tokenizer = load_model_directory(trained.base.path)
    assert rows_loss(load_adapter(model, outcome.version), tokenizer, EXTRA_ROWS) < 0.5


def test_a_base_of_fifty_million_parameters_checkpoints_activations_and_still_learns(tiny_model_dir):
    """A one-layer Llama with a 100k vocabulary (51 M parameters, two thirds of SmolLM2's embedding size) trains
    with gradient checkpointing, the tiny model without; the checkpointed training still lowers its loss."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from learnerd.training.lora import CHECKPOINT_ACTIVATIONS_FROM, checkpoint_activations

    tiny, tokenizer = load_model_directory(tiny_model_dir)
    assert not checkpoint_activations(tiny) and not tiny.is_activation_checkpointing
    torch.manual_seed(0)
    shape = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 4}
    big = LlamaForCausalLM(LlamaConfig(vocab_size=100_000, num_hidden_layers=1, tie_word_embeddings=False, **shape))
    assert sum(p.numel() for p in big.parameters()) >= CHECKPOINT_ACTIVATIONS_FROM
    big.generation_config.pad_token_id = big.config.pad_token_id = tokenizer.pad_token_id
    _, result = train_lora(big, tokenizer, QA_ROWS[:4], TrainingConfig(learning_rate=1e-2, num_epochs=4))
    assert big.is_activation_checkpointing and result.final_loss < result.start_loss
