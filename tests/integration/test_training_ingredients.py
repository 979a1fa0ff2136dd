"""General replay, the KL term to the base and multi-turn rows, on the built-in tiny model."""

from __future__ import annotations

import dataclasses
import json

import anyio
import pytest
import torch

from learnerd.eval.probes.retention import general_pool
from learnerd.ml.base_model import DEFAULT_BASE_MODEL, load_model_directory, resolve_base_model
from learnerd.ml.rows import TrainingRow
from learnerd.store.adapters import AdapterStore
from learnerd.training.config import TrainingConfig
from learnerd.training.cycle import train_cycle
from learnerd.training.ingredients.multi_turn import MULTI_TURN_PAIRS, multi_turn_rows
from learnerd.training.ingredients.replay import (
    CORE_PROMPTS,
    SECTION_PREFIX,
    ReplayAnswer,
    cache_path,
    cached_answers,
    drawn_prompts,
    replay_prompts,
    replay_rows,
)
from learnerd.training.lora import train_lora
from learnerd.training.worker import TrainingRequest, retention_rows
from tests.qa_pairs import QA_PAIRS

QA_ROWS = [TrainingRow.chat(f"qa{i:02d}", q, a) for i, (q, a) in enumerate(QA_PAIRS)]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_replay_prompts_are_disjoint_from_the_answer_retention_items():
    """The replay pool never trains on what ``answer_retention`` evaluates."""
    evaluated = {item.prompt.casefold() for item in general_pool()}
    prompts = replay_prompts()
    assert len(prompts) == len(set(prompts)) >= 64
    assert not {p.casefold() for p in prompts} & evaluated


def test_replay_rows_are_mixed_at_the_ratio_after_the_document_rows(tiny_model_dir, tmp_path):
    model, tokenizer = load_model_directory(tiny_model_dir)
    config = TrainingConfig(general_replay=0.5, multi_turn_rows=3)
    request = TrainingRequest(str(tiny_model_dir), str(tmp_path), tuple(QA_ROWS), config, replay_cache=None)
    rows, rehearsal, per_epoch = retention_rows(model, tokenizer, request)
    assert rows[:20] == QA_ROWS and rehearsal == [] and per_epoch == 0
    assert [r.section_id for r in rows[20:23]] == ["multi-turn:0", "multi-turn:1", "multi-turn:2"]
    replay = rows[23:]
    assert len(replay) == 10 and all(r.section_id.startswith(SECTION_PREFIX) for r in replay)
    assert all(r.messages[0].content in replay_prompts() for r in replay)
    # An incremental cycle rehearsing 6 of 16 unchanged rows an epoch: replay at the ratio of the rows an epoch
    # trains (4 + 6), conversations drawn from all 20 pairs.
    request = dataclasses.replace(request, rows=tuple(QA_ROWS[:4]), rehearsal=tuple(QA_ROWS[4:]), rehearsal_per_epoch=6)
    rows, rehearsal, per_epoch = retention_rows(model, tokenizer, request)
    assert rows[:4] == QA_ROWS[:4] and rehearsal == QA_ROWS[4:] and per_epoch == 6
    conversations = [r for r in rows if r.section_id.startswith("multi-turn:")]
    assert len(conversations) == 3 and len([r for r in rows if r.section_id.startswith(SECTION_PREFIX)]) == 5
    questions = {m.content for r in conversations for m in r.messages if m.role == "user"}
    assert questions - {q for q, _ in QA_PAIRS[:4]}, "conversations draw from the rehearsed pairs too"


def test_a_cycle_draws_distinct_prompts_before_it_repeats_one():
    """A large document rehearses more of the pool, not the same prompts more often: every prompt once before
    any twice, the core's before the others', in an order that depends on the seed alone."""
    size = len(replay_prompts())
    few, everything = drawn_prompts(10, seed=3), drawn_prompts(size + 5, seed=3)
    assert len(set(few)) == 10 and few == everything[:10]
    assert sorted(everything) == list(range(size)) and drawn_prompts(10, seed=4) != few
    assert sorted(everything[:CORE_PROMPTS]) == list(range(CORE_PROMPTS))
    answers = [ReplayAnswer(f"q{i}", "" if i == everything[1] else f"a{i}") for i in everything]
    rows = replay_rows(everything, answers, size + 5)
    ids = [int(r.section_id.removeprefix(SECTION_PREFIX)) for r in rows]
    assert len(rows) == size + 5 and everything[1] not in ids  # the empty answer is skipped
    assert ids[: size - 1] == [i for i in everything if i != everything[1]] and len(set(ids[: size - 1])) == size - 1


def test_replay_answers_are_generated_once_and_cached_per_base(models_dir, tmp_path):
    """The first cycle writes the base's answers to the prompts it drew into the model cache; the next cycle
    of the same rows reads that file (a changed answer in the file is what it trains on) and does not rewrite
    it; a cycle that draws more prompts generates only the new ones and adds them to the file."""
    base = resolve_base_model(DEFAULT_BASE_MODEL, cache_dir=models_dir)
    cache_dir = tmp_path / "models"
    config = TrainingConfig(learning_rate=1e-2, max_steps=2, general_replay=1.0)
    store = AdapterStore(tmp_path / "adapters")

    def cycle(doc_key, rows):
        run = train_cycle(store, doc_key, base, rows, config, num_threads=1, replay_cache_dir=cache_dir)
        return anyio.run(lambda: run)

    cycle("a", QA_ROWS[:4])
    path = cache_path(cache_dir, base.identity)
    cached = json.loads(path.read_text())
    drawn = [replay_prompts()[i] for i in drawn_prompts(4, config.seed)]
    assert sorted(cached["answers"]) == sorted(drawn)
    cached["answers"] = {p: "cached " + p for p in cached["answers"]}
    path.write_text(json.dumps(cached))
    inode = path.stat().st_ino

    model, tokenizer = load_model_directory(base.path)
    request = TrainingRequest(str(base.path), str(tmp_path), tuple(QA_ROWS[:4]), config, replay_cache=str(path))
    replay = retention_rows(model, tokenizer, request).every_epoch[4:]
    assert [r.messages[-1].content for r in replay] == ["cached " + p for p in drawn]
    outcome = cycle("b", QA_ROWS[:4])
    assert outcome.version is not None and path.stat().st_ino == inode

    cycle("c", QA_ROWS[:6])
    grown = json.loads(path.read_text())["answers"]
    more = [replay_prompts()[i] for i in drawn_prompts(6, config.seed)]
    assert sorted(grown) == sorted(more) and all(grown[p] == "cached " + p for p in drawn)
    assert not any(grown[p].startswith("cached ") for p in more[4:])
    assert list(cache_dir.glob("replay-*.json")) == [path]


def test_an_unreadable_cache_is_generated_again_and_an_unwritable_one_skipped(tiny_model_dir, tmp_path):
    """The cache is derived data: a torn file, one of another cache version or one of another system prompt
    is replaced by fresh answers (equal to those of no cache at all); a cache path that cannot be written
    still gives the answers."""
    model, tokenizer = load_model_directory(tiny_model_dir)
    drawn = drawn_prompts(5, seed=0)
    fresh = cached_answers(None, model, tokenizer, drawn)
    assert [a.prompt for a in fresh] == [replay_prompts()[i] for i in drawn]
    path = tmp_path / "replay-torn.json"
    other_system = {"version": 2, "system": "Be terse.", "answers": {a.prompt: "x" for a in fresh}}
    old_version = {"version": 1, "system": None, "answers": [{"prompt": a.prompt, "answer": "x"} for a in fresh]}
    for bad in ('{"answers": [{"prompt": "What is', json.dumps(other_system), json.dumps(old_version)):
        path.write_text(bad)
        assert cached_answers(path, model, tokenizer, drawn) == fresh
        assert json.loads(path.read_text())["answers"] == {a.prompt: a.answer for a in fresh}
    blocked = tmp_path / "a-file" / "replay.json"
    blocked.parent.write_text("not a directory")
    assert cached_answers(blocked, model, tokenizer, drawn) == fresh


def test_the_kl_term_changes_what_the_adapter_learns(tiny_model_dir):
    def adapter(kl_weight):
        model, tokenizer = load_model_directory(tiny_model_dir)
        config = TrainingConfig(learning_rate=1e-2, max_steps=3, micro_batch_size=4, replay_kl_weight=kl_weight)
        rows = [*QA_ROWS[:2], TrainingRow.chat(f"{SECTION_PREFIX}0", "What is 2 + 2?", "4"), *QA_ROWS[2:3]]
        peft_model, _ = train_lora(model, tokenizer, rows, config)
        return {k: v for k, v in peft_model.state_dict().items() if "lora_B" in k}

    plain, with_kl = adapter(0.0), adapter(5.0)
    assert not all(torch.equal(plain[k], with_kl[k]) for k in plain)


def test_multi_turn_rows_chain_the_document_pairs():
    rows = multi_turn_rows(QA_ROWS, 2, seed=1)
    assert [r.section_id for r in rows] == ["multi-turn:0", "multi-turn:1"]
    pairs = {(q, a) for q, a in QA_PAIRS}
    for row in rows:
        roles = [m.role for m in row.messages]
        assert roles == ["user", "assistant"] * MULTI_TURN_PAIRS
        turns = list(zip(row.messages[::2], row.messages[1::2], strict=True))
        assert {(u.content, a.content) for u, a in turns} <= pairs and len(set(turns)) == MULTI_TURN_PAIRS
    assert multi_turn_rows(QA_ROWS[:1], 5, seed=1) == []
    assert len(multi_turn_rows(QA_ROWS[:5], 40, seed=1)) == 5, "at most one conversation per pair"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_multi_turn_rows_ask_every_pair_at_a_later_turn_before_any_twice(seed):
    """30 pairs in 10 conversations: 30 later turns, one per pair (independent draws would leave about a third of
    the pairs never asked after turn 1: (1 - 3/30) ** 10 = 0.35); the first turns are 10 distinct pairs, and no
    conversation asks a pair twice."""
    rows = [TrainingRow.chat(f"p{i:02d}", f"question {i}", f"answer {i}") for i in range(30)]
    chains = [[m.content for m in r.messages if m.role == "user"] for r in multi_turn_rows(rows, 10, seed=seed)]
    later = [q for chain in chains for q in chain[1:]]
    assert sorted(later) == sorted(f"question {i}" for i in range(30))
    assert len({chain[0] for chain in chains}) == 10
    assert all(len(set(chain)) == MULTI_TURN_PAIRS for chain in chains)


def test_the_kl_term_runs_the_base_on_the_replay_rows_alone_and_equals_the_whole_batchs(tiny_model_dir):
    """The base's forward pass of the KL term sees only the replay rows, cut to the longest of them, and gives
    the KL the whole padded batch gives (float32 rounding apart): the other rows carry no KL term."""
    import torch.nn.functional as F

    from learnerd.ml.rows import IGNORE_INDEX, encode_rows
    from learnerd.training.ingredients.replay_kl import replay_kl
    from learnerd.training.lora import _collate, attach_lora
    from learnerd.training.loss import loss_logits, loss_mask

    model, tokenizer = load_model_directory(tiny_model_dir)
    peft_model = attach_lora(model, TrainingConfig(lora_dropout=0.0), None)
    with torch.no_grad():  # an adapter that changes something, so the KL is not zero
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    long_question = " and then ".join(q for q, _ in QA_PAIRS[:6])
    rows = [
        TrainingRow.chat(f"{SECTION_PREFIX}0", "What is 2 + 2?", "4"),
        TrainingRow.chat("qa-long", long_question, QA_PAIRS[0][1]),
        TrainingRow.chat(f"{SECTION_PREFIX}1", "Name a primary colour.", "Red is a primary colour."),
        TrainingRow.chat("qa-short", "ls?", "ls"),
    ]
    batch, _ = encode_rows(tokenizer, rows, 512)
    input_ids, attention_mask, labels = _collate(batch, tokenizer.pad_token_id or 0)
    replay_width = max(len(batch[0].input_ids), len(batch[2].input_ids))
    assert input_ids.shape[1] > replay_width  # the document row is the longest
    seen = []
    hook = peft_model.get_base_model().register_forward_pre_hook(
        lambda _module, _args, kwargs: seen.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        with torch.no_grad():
            logits = peft_model(input_ids=input_ids, attention_mask=attention_mask).logits
            at_labels = loss_logits(peft_model, input_ids, attention_mask, loss_mask(labels))
            seen.clear()
            kl = replay_kl(peft_model, batch, input_ids, attention_mask, labels, at_labels)
            with peft_model.disable_adapter():
                whole = peft_model(input_ids=input_ids, attention_mask=attention_mask).logits
    finally:
        hook.remove()
    assert seen[0] == (2, replay_width)
    mask = (labels[:, 1:] != IGNORE_INDEX) & torch.tensor([True, False, True, False])[:, None]
    expected = F.kl_div(
        F.log_softmax(logits[:, :-1][mask], -1),
        F.log_softmax(whole[:, :-1][mask], -1),
        log_target=True,
        reduction="sum",
    )
    assert float(kl) > 0 and torch.allclose(kl, expected, rtol=1e-4)
