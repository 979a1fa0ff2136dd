"""Training throughput: learnerd's training path (a child process, via ``train_cycle`` into the adapter
store) against a bare peft training loop in this process — same tiny model, rows, batch size, step
count and torch threads, measured in the same run, alternating, the median of ``--repeats`` runs each.

Two ratios are printed (learnerd ÷ bare, in tokens per second; 1.0 = parity):

* **loop** — the training steps alone (``TrainingResult.train_s`` in the child vs the bare loop's steps);
* **end to end** — the whole ``await train_cycle(...)``: starting Python, importing torch and
  transformers, loading the base model, measuring the start and final losses, saving and committing
  the adapter. The bare side is charged only its steps, so this ratio is the overhead of a cycle as
  the daemon experiences it; it approaches the loop ratio as ``--steps`` grows.

Tokens are input tokens without padding. Usage::

    python benchmarks/bench_training.py [--steps 300] [--rows 64] [--batch-size 8] [--threads 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio

from learnerd.ml.base_model import DEFAULT_BASE_MODEL, load_model_directory, resolve_base_model
from learnerd.ml.cycle import train_cycle
from learnerd.ml.hyperparams import TrainingConfig
from learnerd.ml.rows import TrainingRow
from learnerd.store.adapters import AdapterStore


def make_rows(n: int) -> list[TrainingRow]:
    """``n`` chat rows of varied length: question ``i`` about a made-up item, a short factual answer."""
    return [
        TrainingRow.chat(
            f"r{i:04d}",
            f"What is item number {i} called in catalogue {i % 7}?",
            f"Item {i} is the {'x' * (i % 23)}widget",
        )
        for i in range(n)
    ]


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
    batch = config.batch_size()
    model.train()
    tokens, started = 0, time.perf_counter()
    for step in range(config.max_steps or 0):
        chunk = [encoded[(step * batch + j) % len(encoded)] for j in range(batch)]
        width = max(map(len, chunk))
        input_ids = torch.full((batch, width), tokenizer.pad_token_id)
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


def learnerd_cycle(base, rows, config, threads: int, root: Path) -> tuple[int, float, float]:
    """One fresh ``train_cycle`` into a new store. Returns ``(tokens, loop seconds, end-to-end seconds)``."""
    store = AdapterStore(root)
    started = time.perf_counter()
    outcome = anyio.run(functools.partial(train_cycle, store, "bench", base, rows, config, num_threads=threads))
    wall = time.perf_counter() - started
    assert outcome.result is not None
    return outcome.result.tokens_trained, outcome.result.train_s, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))  # warnings and up only
    with tempfile.TemporaryDirectory(prefix="bench-training-") as tmp:
        base = resolve_base_model(DEFAULT_BASE_MODEL, cache_dir=Path(tmp) / "models")
        rows = make_rows(args.rows)
        config = TrainingConfig(learning_rate=1e-3, micro_batch_size=args.batch_size, max_steps=args.steps)
        bare, loop, e2e = [], [], []
        for i in range(args.repeats):
            tokens, seconds = bare_peft_loop(base.path, rows, config, args.threads)
            bare.append(tokens / seconds)
            tokens, loop_s, wall_s = learnerd_cycle(base, rows, config, args.threads, Path(tmp) / f"store{i}")
            loop.append(tokens / loop_s)
            e2e.append(tokens / wall_s)
            print(f"run {i + 1}: bare {bare[-1]:9.0f} tok/s   learnerd loop {loop[-1]:9.0f} tok/s   "
                  f"learnerd end-to-end {e2e[-1]:9.0f} tok/s", flush=True)  # fmt: skip
    b, lp, ee = statistics.median(bare), statistics.median(loop), statistics.median(e2e)
    print(f"\n{args.rows} rows, batch {args.batch_size}, {args.steps} steps, {args.threads} torch thread(s), "
          f"median of {args.repeats}")  # fmt: skip
    print(f"bare peft loop (in process)        {b:9.0f} tokens/s")
    print(f"learnerd training steps (child)    {lp:9.0f} tokens/s   ratio {lp / b:.2f}")
    print(f"learnerd train_cycle, end to end   {ee:9.0f} tokens/s   ratio {ee / b:.2f}")


if __name__ == "__main__":
    main()
