"""Evaluation speed and agreement: learnerd's ``delta_kl`` (with its null calibration) against the released
dlm-sway 0.1.0's, on the same base, the same LoRA adapter and the same prompt token ids.

Both sides load the adapter onto the base on CPU in float32 and compute what a z-scored ``delta_kl`` costs:
``--null-runs`` noise adapters on sway's sentinel prompts (learnerd's default ``calibration = "sway"``),
then the probe itself on ``--prompts`` prompts. sway runs its own ``NullAdapterProbe`` and
``DeltaKLProbe`` through its HF backend (one forward pass per prompt and view); learnerd runs
``learnerd.eval.probes.delta_kl`` through its differential backend (batched forward passes). The prompts are
plain text, so both tokenize them the same way (``tokenizer(text).input_ids``; checked). Each side is
timed from a freshly loaded backend (no cached forward passes), alternating, ``--repeats`` times; the
best run of each is compared (the least disturbed by whatever else the machine runs).

Printed: seconds per prompt for each side and their ratio (learnerd ÷ sway; ≤ 1.0: learnerd is as fast or
faster), and the largest relative difference of the per-prompt divergences, the mean, the null mean and
std and the z-score (the target is within 1%). With ``--top-k`` below the vocabulary the two differ by
design where the tail is heavy (sway spreads the tail over the union of both top-k, learnerd over the
whole vocabulary); the default covers the tiny model's whole vocabulary.

Input: dlm-sway 0.1.0 (``pip install dlm-sway==0.1.0``; the project's ``test`` extra) — absent, the
benchmark says so and exits 2. The base is the built-in tiny model (built into a temporary model cache),
or ``--base DIR``, a local Hugging Face model directory. Usage::

    python benchmarks/bench_eval.py [--prompts 20] [--null-runs 3] [--repeats 3] [--threads 1] [--top-k 1024]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

INPUT = (
    "Input: dlm-sway 0.1.0 (pip install dlm-sway==0.1.0; the test extra); absent, exits 2. "
    "Base: the built-in tiny model, or --base DIR."
)

TOPICS = ("the river", "a mountain", "the old library", "our garden", "the train station", "a small boat",
          "the market", "winter", "the north wind", "a lighthouse")  # fmt: skip


def prompts(n: int) -> list[str]:
    """``n`` distinct plain-text prompts of varied length."""
    return [
        f"Tell me about {TOPICS[i % len(TOPICS)]}{' and what lies beyond it' * (i // len(TOPICS))}" for i in range(n)
    ]


def noisy_lora(base_dir: Path, scale: float = 0.05) -> tuple[Any, Any]:
    """The model directory ``base_dir`` with a LoRA adapter of learnerd's default shape whose ``lora_B``
    entries are N(0, ``scale``²) float32 from a generator seeded with 7 (the same adapter on every run; a
    fresh adapter's B is zero, so it would change nothing): ``(peft_model, tokenizer)``. ``scale`` nan makes
    every logit NaN."""
    import torch

    from learnerd.ml.base_model import load_model_directory
    from learnerd.store.dlm import TrainingConfig
    from learnerd.training.lora import attach_lora

    model, tokenizer = load_model_directory(base_dir)
    peft_model = attach_lora(model, TrainingConfig())
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * scale)
    return peft_model, tokenizer


def make_adapter(base_dir: Path, out: Path, scale: float = 0.05) -> Path:
    """Save :func:`noisy_lora`'s adapter on ``base_dir`` to ``out``; returns ``out``."""
    peft_model, _ = noisy_lora(base_dir, scale)
    peft_model.save_pretrained(out)
    return out


def run_sway(base_dir: Path, adapter: Path, texts: list[str], null_runs: int, top_k: int) -> dict:
    from dlm_sway.backends.hf import HuggingFaceDifferentialBackend
    from dlm_sway.core.model import ModelSpec
    from dlm_sway.probes.base import RunContext
    from dlm_sway.probes.delta_kl import DeltaKLProbe, DeltaKLSpec
    from dlm_sway.probes.null_adapter import NullAdapterProbe, NullAdapterSpec

    backend = HuggingFaceDifferentialBackend(
        base_spec=ModelSpec(base=str(base_dir), dtype="fp32", device="cpu"), adapter_path=adapter
    )
    ids = [list(backend._tokenizer(t)["input_ids"]) for t in texts]
    started = time.perf_counter()
    null = NullAdapterProbe().run(
        NullAdapterSpec(name="null", runs=null_runs, calibrate_kinds=["delta_kl"], cache=False),
        RunContext(backend=backend, top_k=top_k),
    )
    stats = null.evidence["null_stats"]["delta_kl"]
    result = DeltaKLProbe().run(
        DeltaKLSpec(name="delta_kl", prompts=texts),
        RunContext(backend=backend, top_k=top_k, null_stats=null.evidence["null_stats"]),
    )
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "ids": ids, "per_prompt": result.evidence["per_prompt"], "raw": result.raw,
            "z": result.z_score, "null_mean": stats["mean"], "null_std": stats["std"]}  # fmt: skip


def run_learnerd(base_dir: Path, adapter: Path, texts: list[str], null_runs: int, top_k: int) -> dict:
    from peft import PeftModel

    from learnerd.eval.backend import DifferentialBackend
    from learnerd.eval.inputs import DocumentInputs, Encoder, Prompt
    from learnerd.eval.probes import delta_kl
    from learnerd.eval.probes.base import EvalOptions, ProbeContext
    from learnerd.ml.base_model import load_model_directory

    model, tokenizer = load_model_directory(base_dir)
    backend = DifferentialBackend(PeftModel.from_pretrained(model, adapter).eval(), tokenizer)
    encoder = Encoder(tokenizer)
    inputs = DocumentInputs(encoder, (), tuple(Prompt(t, "prose", encoder.text_prompt(t)) for t in texts), ())
    options = EvalOptions(top_k=top_k, null_runs=null_runs, calibration="sway")
    ctx = ProbeContext(backend, inputs, options)
    started = time.perf_counter()
    samples = [
        delta_kl.raw_value(ctx, partial(backend.as_null_adapter, options.null_seed_base + i, options.null_init_scale))
        for i in range(null_runs)
    ]
    ctx.null_stats[delta_kl.KIND] = {
        "mean": statistics.fmean(samples),
        "std": statistics.pstdev(samples),
        "n": null_runs,
    }
    result = delta_kl.run(ctx)
    seconds = time.perf_counter() - started
    null = ctx.null_stats[delta_kl.KIND]
    ids = [list(p.ids) for p in inputs.prompts]
    return {"seconds": seconds, "ids": ids, "per_prompt": result.evidence["per_prompt"],
            "raw": result.raw, "z": result.z_score, "null_mean": null["mean"], "null_std": null["std"]}  # fmt: skip


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=INPUT)
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--null-runs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--top-k", type=int, default=1024)
    parser.add_argument("--base", type=Path, help="a local Hugging Face model directory (default: the tiny model)")
    args = parser.parse_args()
    try:
        import dlm_sway
    except ImportError:
        print("bench_eval needs dlm-sway 0.1.0 (pip install dlm-sway==0.1.0): not installed", file=sys.stderr)
        return 2
    if dlm_sway.__version__ != "0.1.0":
        print(f"bench_eval compares with dlm-sway 0.1.0, found {dlm_sway.__version__}", file=sys.stderr)
        return 2
    if args.base is not None and not (args.base / "config.json").is_file():
        print(f"bench_eval: {args.base} is not a model directory (no config.json)", file=sys.stderr)
        return 2
    import torch

    from learnerd.ml.tiny_model import ensure_tiny_model

    torch.set_num_threads(args.threads)
    texts = prompts(args.prompts)
    with tempfile.TemporaryDirectory() as tmp:
        base_dir = args.base or ensure_tiny_model(Path(tmp) / "models")
        adapter = make_adapter(base_dir, Path(tmp) / "adapter")
        runs: dict[str, list[dict]] = {"sway": [], "learnerd": []}
        for i in range(args.repeats):
            runs["sway"].append(run_sway(base_dir, adapter, texts, args.null_runs, args.top_k))
            runs["learnerd"].append(run_learnerd(base_dir, adapter, texts, args.null_runs, args.top_k))
            last = {side: rs[-1]["seconds"] for side, rs in runs.items()}
            print(f"run {i + 1}: sway {last['sway']:.2f} s, learnerd {last['learnerd']:.2f} s")
    sway, ours = runs["sway"][0], runs["learnerd"][0]
    if sway["ids"] != ours["ids"]:
        print("bench_eval: the two sides tokenized the prompts differently", file=sys.stderr)
        return 1
    best = {side: min(r["seconds"] for r in rs) for side, rs in runs.items()}
    n = args.prompts
    print(f"\ndelta_kl with {args.null_runs} null runs, {n} prompts, top-k {args.top_k}, "
          f"{args.threads} torch thread(s), best of {args.repeats}")  # fmt: skip
    print(f"{'dlm-sway 0.1.0':<16} {best['sway'] / n * 1000:8.1f} ms per prompt")
    ratio = best["learnerd"] / best["sway"]
    print(f"{'learnerd':<16} {best['learnerd'] / n * 1000:8.1f} ms per prompt   ratio {ratio:.2f} (learnerd / sway)")
    worst_prompt = max(rel(a, b) for a, b in zip(ours["per_prompt"], sway["per_prompt"], strict=True))
    diffs = {k: rel(ours[k], sway[k]) for k in ("raw", "null_mean", "null_std", "z")}
    print(
        f"largest relative difference: per prompt {worst_prompt:.2e}, "
        + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items())
        + f" (z = {ours['z']:+.2f} vs {sway['z']:+.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
