"""Choosing a quoted command over the model's own (learnerd.ml.choice) on the tiny model, float32: the batched scores
are the mean token log-probabilities recomputed here one candidate at a time, under context-aware decoding too; the
margin decides; an answer whose command is quoted is kept unscored."""

from __future__ import annotations

import pytest

from learnerd.ml.base_model import load_model_directory
from learnerd.ml.choice import Choice, choose_command, chosen_replies, command_span
from learnerd.ml.generate import chat_turns, generation_eos_ids, greedy_replies
from learnerd.ml.retrieved_examples import with_examples
from learnerd.ml.rows import render_chat

pytestmark = pytest.mark.usefixtures("one_torch_thread")

COMMANDS = ["kubectl rollout restart deployment/api", "ls -la", "kubectl get pods -n dev"]
EXAMPLES = [{"query": f"task {i}", "answer": c, "language": ""} for i, c in enumerate(COMMANDS)]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model_directory(tiny_model_dir)


def mean_logprob(model, prompt: list[int], body: list[int], negative: list[int] | None = None, alpha: float = 0.0):
    """One candidate alone, token by token from full forward passes: what the batch must agree with."""
    import torch

    total = 0.0
    with torch.no_grad():
        for j, token in enumerate(body):
            c = torch.log_softmax(model(torch.tensor([prompt + body[:j]])).logits[0, -1].float(), -1)
            if negative is not None:
                u = torch.log_softmax(model(torch.tensor([negative + body[:j]])).logits[0, -1].float(), -1)
                c = torch.log_softmax((1 + alpha) * c - alpha * u, -1)
            total += float(c[token])
    return total / len(body)


def ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_the_command_is_the_first_blocks_body_else_the_whole_answer():
    fenced = "Run this:\n\n```bash\nls -la\n```\nthen look."
    start, end = command_span(fenced)
    assert fenced[start:end] == "ls -la"
    assert fenced[:start] == "Run this:\n\n```bash\n" and fenced[end:] == "\n```\nthen look."
    start, end = command_span("  ls -la \n")
    assert (start, end) == (2, 8)
    start, end = command_span("```\n```")
    assert start == end


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_the_likeliest_quoted_command_replaces_the_answer_within_the_margin(tiny, alpha):
    model, tokenizer = tiny
    asked = chat_turns("restart the api")
    prompt = render_chat(tokenizer, with_examples(asked, EXAMPLES), add_generation_prompt=True)
    negative = render_chat(tokenizer, asked, add_generation_prompt=True) if alpha else None
    eos = min(generation_eos_ids(model))
    answer = "kubectl restart api"
    own = mean_logprob(model, prompt, [*ids(tokenizer, answer), eos], negative, alpha)
    scores = [mean_logprob(model, prompt, [*ids(tokenizer, c), eos], negative, alpha) for c in COMMANDS]
    best = max(range(len(COMMANDS)), key=lambda i: scores[i])

    wide = choose_command(
        model, tokenizer, prompt, answer, COMMANDS, 100.0, ended=True, eos_id=eos, negative_ids=negative, alpha=alpha
    )
    assert wide.example == best and wide.text == COMMANDS[best]
    assert wide.own_nats == pytest.approx(own, abs=1e-4) and wide.best_nats == pytest.approx(scores[best], abs=1e-4)

    narrow = max(0.0, own - scores[best] - 0.01)  # the best quoted command just outside the margin, when below own
    kept = choose_command(
        model, tokenizer, prompt, answer, COMMANDS, narrow, ended=True, eos_id=eos, negative_ids=negative, alpha=alpha
    )
    if scores[best] < own:
        assert kept == Choice(answer, None, kept.own_nats, kept.best_nats)
    else:  # the quoted command is likelier than the model's own: any margin takes it
        assert kept.example == best


def test_a_fenced_answer_gets_the_quoted_command_in_its_block(tiny):
    model, tokenizer = tiny
    prompt = render_chat(tokenizer, with_examples(chat_turns("list files"), EXAMPLES), add_generation_prompt=True)
    answer = "Use:\n```bash\nls -l\n```"
    choice = choose_command(model, tokenizer, prompt, answer, COMMANDS, 100.0, ended=False, eos_id=None)
    assert choice.example is not None
    assert choice.text == f"Use:\n```bash\n{COMMANDS[choice.example]}\n```"


def test_a_prefilled_cache_over_the_prompt_replaces_its_forward_pass(tiny):
    """Generation's own cache (over the prompt, the answer's text before its command and more) gives the scores the
    prompt's own forward pass gives; a cache over other tokens labelled as the prompt changes them (it is used); one
    whose ids do not begin with the prompt is not used."""
    import torch

    model, tokenizer = tiny
    prompt = render_chat(tokenizer, with_examples(chat_turns("list files"), EXAMPLES), add_generation_prompt=True)
    answer = "Use:\n```bash\nls -l\n```"
    covered = [*prompt, *ids(tokenizer, answer)]

    def prefilled(tokens: list[int]):
        with torch.no_grad():
            return model(input_ids=torch.tensor([tokens]), use_cache=True).cache

    def choose(reused=None):
        return choose_command(
            model, tokenizer, prompt, answer, COMMANDS, 100.0, ended=False, eos_id=None, prefilled=reused
        )

    fresh = choose()
    again = choose((prefilled(covered), covered))
    assert (again.example, again.text) == (fresh.example, fresh.text)
    assert again.own_nats == pytest.approx(fresh.own_nats, abs=1e-4)
    assert again.best_nats == pytest.approx(fresh.best_nats, abs=1e-4)
    other = [(t + 7) % tokenizer.vocab_size for t in covered]
    used = choose((prefilled(other), covered))
    assert abs(used.own_nats - fresh.own_nats) > 1e-3, "the cache labelled as the prompt was not used"
    unused = choose((prefilled(other), other))
    assert unused.own_nats == pytest.approx(fresh.own_nats, abs=1e-4)


def test_an_answer_whose_command_is_quoted_is_kept_unscored(tiny):
    model, tokenizer = tiny
    prompt = render_chat(tokenizer, with_examples(chat_turns("list"), EXAMPLES), add_generation_prompt=True)
    for answer in ("ls   -la", "```sh\nls -la\n```", ""):
        assert choose_command(model, tokenizer, prompt, answer, COMMANDS, 100.0, ended=True, eos_id=0) == Choice(answer)
    assert choose_command(model, tokenizer, prompt, "ls", ["", " "], 100.0, ended=True, eos_id=0) == Choice("ls")


def test_a_negative_margin_or_guidance_without_a_negative_prompt_is_refused(tiny):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match="margin"):
        choose_command(model, tokenizer, [1, 2], "ls", COMMANDS, -0.1, ended=True, eos_id=0)
    with pytest.raises(ValueError, match="without its examples"):
        choose_command(model, tokenizer, [1, 2], "ls", COMMANDS, 0.5, ended=True, eos_id=0, alpha=0.5)


def test_chosen_replies_choose_for_the_quoted_conversations_only(tiny):
    model, tokenizer = tiny
    conversations = [with_examples(chat_turns("restart the api"), EXAMPLES), chat_turns("restart the api")]
    replies = greedy_replies(model, tokenizer, conversations, max_new_tokens=8)
    chosen = chosen_replies(model, tokenizer, conversations, replies, [COMMANDS, []], 100.0)
    assert replies[0].text.strip() and replies[0].text.strip() not in COMMANDS  # the random model answers its own
    assert chosen[0].example is not None and chosen[0].text == COMMANDS[chosen[0].example]
    assert chosen[1] == Choice(replies[1].text)
    with pytest.raises(ValueError, match="command lists"):
        chosen_replies(model, tokenizer, conversations, replies, [COMMANDS], 100.0)
