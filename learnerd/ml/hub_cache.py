"""dlm's base-model registry keys and ``hf:org/name``, resolved from the local Hugging Face cache only.

:data:`DLM_REGISTRY` is the key → (Hugging Face repo id, pinned commit) table of
``dlm/base_models/registry.py`` in the released ``document-language-model==0.10.0`` wheel (every entry of
its ``_ENTRIES``), copied here so learnerd does not depend on dlm at run time.

:func:`find_cached_snapshot` asks ``huggingface_hub.snapshot_download(..., local_files_only=True)`` for the
snapshot directory: the pinned commit first, then whatever the cache's ``main`` ref points at. Nothing is
ever downloaded; a model not in the cache raises :class:`ModelNotCachedError`, whose one-line message
names the cache directory and the command that fills it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HubModel:
    """A Hugging Face model repository: ``repo_id`` (``org/name``) and an optional pinned ``revision``."""

    repo_id: str
    revision: str | None = None


DLM_REGISTRY: dict[str, HubModel] = {
    "qwen2.5-0.5b": HubModel("Qwen/Qwen2.5-0.5B-Instruct", "7ae557604adf67be50417f59c2c2f167def9a775"),
    "qwen2.5-1.5b": HubModel("Qwen/Qwen2.5-1.5B-Instruct", "989aa7980e4cf806f80c7fef2b1adb7bc71aa306"),
    "qwen2.5-3b": HubModel("Qwen/Qwen2.5-3B-Instruct", "aa8e72537993ba99e69dfaafa59ed015b17504d1"),
    "qwen2.5-coder-1.5b": HubModel("Qwen/Qwen2.5-Coder-1.5B-Instruct", "2e1fd397ee46e1388853d2af2c993145b0f1098a"),
    "qwen3-1.7b": HubModel("Qwen/Qwen3-1.7B", "70d244cc86ccca08cf5af4e1e306ecf908b1ad5e"),
    "qwen3-1.7b-thinking": HubModel("Qwen/Qwen3-1.7B", "70d244cc86ccca08cf5af4e1e306ecf908b1ad5e"),
    "qwen3-4b": HubModel("Qwen/Qwen3-4B", "1cfa9a7208912126459214e8b04321603b3df60c"),
    "qwen3-8b": HubModel("Qwen/Qwen3-8B", "b968826d9c46dd6066d109eabc6255188de91218"),
    "llama-3.2-1b": HubModel("meta-llama/Llama-3.2-1B-Instruct", "9213176726f574b556790deb65791e0c5aa438b6"),
    "llama-3.2-3b": HubModel("meta-llama/Llama-3.2-3B-Instruct", "0cb88a4f764b7a12671c53f0838cd831a0843b95"),
    "llama-3.3-8b-instruct": HubModel("allura-forge/Llama-3.3-8B-Instruct", "df95224cf87c32d9f4958dd284a07ded620aa4fc"),
    "smollm3-3b": HubModel("HuggingFaceTB/SmolLM3-3B", "a07cc9a04f16550a088caea529712d1d335b0ac1"),
    "olmo-2-7b-instruct": HubModel("allenai/OLMo-2-1124-7B-Instruct", "470b1fba1ae01581f270116362ee4aa1b97f4c84"),
    "gemma-2-2b-it": HubModel("google/gemma-2-2b-it", "299a8560bedf22ed1c72a8a11e7dce4a7f9f51f8"),
    "gemma-2-9b-it": HubModel("google/gemma-2-9b-it", "11c9b309abf73637e4b6f9a3fa1e92e615547819"),
    "smollm2-135m": HubModel("HuggingFaceTB/SmolLM2-135M-Instruct", "12fd25f77366fa6b3b4b768ec3050bf629380bac"),
    "smollm2-360m": HubModel("HuggingFaceTB/SmolLM2-360M-Instruct", "a10cc1512eabd3dde888204e902eca88bddb4951"),
    "smollm2-1.7b": HubModel("HuggingFaceTB/SmolLM2-1.7B-Instruct", "31b70e2e869a7173562077fd711b654946d38674"),
    "phi-3.5-mini": HubModel("microsoft/Phi-3.5-mini-instruct", "2fe192450127e6a83f7441aef6e3ca586c338b77"),
    "phi-4-mini-reasoning": HubModel("microsoft/Phi-4-mini-reasoning", "0e3b1e2d02ee478a3743abe3f629e9c0cb722e0a"),
    "mixtral-8x7b-instruct": HubModel(
        "mistralai/Mixtral-8x7B-Instruct-v0.1", "eba92302a2861cdc0098cc54bc9f17cb2c47eb61"
    ),
    "mistral-small-3.1-24b-instruct": HubModel(
        "mistralai/Mistral-Small-3.1-24B-Instruct-2503", "68faf511d618ef198fef186659617cfd2eb8e33a"
    ),
    "paligemma-3b-mix-224": HubModel("google/paligemma-3b-mix-224", "d1d8734c9c3ad0ccfeea4afc270faa356c2ba515"),
    "qwen2-vl-2b-instruct": HubModel("Qwen/Qwen2-VL-2B-Instruct", "895c3a49bc3fa70a340399125c650a463535e71c"),
    "internvl2-2b": HubModel("OpenGVLab/InternVL2-2B", "e4f6747bd20f139e637642c6a058c6bd00b36919"),
    "internvl3-2b": HubModel("OpenGVLab/InternVL3-2B", "899155015275a9b7338c7f4677e19c784e0e5a21"),
    "qwen2-audio-7b-instruct": HubModel("Qwen/Qwen2-Audio-7B-Instruct", "0a095220c30b7b31434169c3086508ef3ea5bf0a"),
}
"""dlm 0.10.0's registry (``dlm/base_models/registry.py``): key → repository and the commit dlm pins."""


class ModelNotCachedError(LookupError):
    """The model is not in the local Hugging Face cache (learnerd never downloads)."""


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache directory (``HF_HUB_CACHE``, default ``~/.cache/huggingface/hub``)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def find_cached_snapshot(model: HubModel) -> tuple[Path, str]:
    """``(snapshot directory, commit hash)`` of ``model`` in the local Hugging Face cache.

    Tries ``model.revision`` (when pinned), then the cached ``main``; never touches the network.

    Raises:
        ModelNotCachedError: neither is cached; the message names the cache path and the fix.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    revisions = [model.revision, None] if model.revision else [None]
    for revision in revisions:
        try:
            path = Path(snapshot_download(model.repo_id, revision=revision, local_files_only=True))
        except (LocalEntryNotFoundError, FileNotFoundError, ValueError):
            continue
        return path, path.name
    raise ModelNotCachedError(
        f"{model.repo_id} is not in the Hugging Face cache {hub_cache_dir()}; learnerd never downloads: "
        f"run `hf download {model.repo_id}` on a machine with network access (same cache path), "
        "or set base_model to a local model directory"
    )
