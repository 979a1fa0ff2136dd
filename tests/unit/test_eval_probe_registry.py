"""The probe registry: what it derives from :data:`PROBES` (calibrated kinds, categories, the options), the
general-question pool of ``answer_retention``."""

from __future__ import annotations

import re
from types import ModuleType

import pytest
from pydantic import ValidationError

from learnerd.eval.probes import CALIBRATED, CATEGORY, PROBES, common, retention
from learnerd.eval.probes.base import EvalOptions, option_models
from learnerd.eval.settings import EvaluationSettings


def test_calibrated_probes_are_those_that_offer_raw_value():
    assert [p.KIND for p in CALIBRATED] == [
        "delta_kl",
        "section_internalization",
        "paraphrase_invariance",
        "calibration_drift",
    ]
    assert all(p in CALIBRATED for p in PROBES if callable(getattr(p, "raw_value", None)))


def test_categories_are_sways():
    registry = pytest.importorskip("dlm_sway.probes.base", reason="dlm-sway 0.1.0 is not installed").registry()
    shared = [p.KIND for p in PROBES if p.KIND in registry]
    assert {"null_adapter", "delta_kl", "section_internalization", "paraphrase_invariance", "calibration_drift"} <= set(
        shared
    )
    assert {k: CATEGORY[k] for k in shared} == {k: registry[k].category for k in shared}
    assert CATEGORY[retention.KIND] == registry["calibration_drift"].category  # learnerd's own retention probe


def test_eval_options_are_the_settings_and_each_probe_modules_options():
    owned = [EvaluationSettings, common.Options, *(p.Options for p in PROBES if hasattr(p, "Options"))]
    fields = [name for model in owned for name in model.model_fields]
    assert sorted(fields) == sorted(EvalOptions.model_fields) and len(fields) == len(set(fields))
    defaults = EvalOptions()
    for model in owned[1:]:
        assert model().model_dump() == {k: getattr(defaults, k) for k in model.model_fields}
    options = EvalOptions(top_k=8, min_similarity=0.5, drift_items_limit=10, retention_max_new_tokens=16)
    assert (options.top_k, options.min_similarity, options.drift_items_limit) == (8, 0.5, 10)
    with pytest.raises(ValidationError):
        EvalOptions(retention_max_new_tokens=0)
    with pytest.raises(ValidationError):
        EvalOptions(no_such_option=1)


def probe_module(name: str, **fields: object) -> ModuleType:
    """A probe module with an ``Options`` of ``fields`` (name: default)."""
    module = ModuleType(name)
    module.Options = type("Options", (common.ProbeOptions,), {"__annotations__": dict.fromkeys(fields, int), **fields})
    return module


def test_a_new_probe_module_brings_its_options_and_a_clash_is_refused():
    new = probe_module("new", new_knob=3)
    assert option_models((new,))[-1] is new.Options and new.Options().new_knob == 3
    with pytest.raises(TypeError, match=r"'top_k' of clash is already declared by learnerd\.eval\.probes\.common"):
        option_models((probe_module("clash", top_k=1),))
    with pytest.raises(TypeError, match="'null_runs' of clash is already declared by EvaluationSettings"):
        option_models((probe_module("clash", null_runs=1),))


def test_the_general_pool():
    pool = retention.general_pool()
    categories = {item.category for item in pool}
    assert len(pool) >= 450 and categories == {"knowledge", "arithmetic", "writing", "code"}
    assert all(sum(item.category == c for item in pool) >= 80 for c in categories)
    assert len({item.prompt for item in pool}) == len(pool)
    # a gold of one character would be "right" by chance in a random model's bytes; one in its own
    # question would be "right" for a model that repeats the question
    assert all(len(item.gold) >= 2 and not retention.contains(item.prompt, item.gold) for item in pool)


def test_the_retention_pool_is_the_whole_pool_or_the_same_seeded_sample_in_file_order():
    pool = retention.general_pool()
    assert retention.retention_pool(0) == retention.retention_pool(len(pool) + 1) == pool
    sample = retention.retention_pool(200)
    assert len(set(sample)) == 200 and set(sample) < set(pool)
    assert [pool.index(item) for item in sample] == sorted(pool.index(item) for item in sample)
    assert sample == retention.retention_pool(200) and sample != pool[:200]
    assert {item.category for item in sample} == {item.category for item in pool}
    with pytest.raises(ValueError, match="retention_pool_size must be >= 0, not -1"):
        retention.retention_pool(-1)


@pytest.mark.parametrize(
    ("answer", "gold", "right"),
    [
        ("The capital of France is Paris.", "Paris", True),
        ("the capital is PARIS", "Paris", True),
        ("Parisian food", "Paris", False),
        ("It is 120.", "12", False),
        ("It is 12.", "12", True),
        ("save it as main.py", ".py", True),
        ("Structured\n  Query   Language", "Query Language", True),
        ("", "Paris", False),
    ],
)
def test_an_answer_is_right_when_it_contains_the_gold_as_a_word(answer: str, gold: str, right: bool):
    assert retention.contains(answer, gold) is right


def words(text: str) -> tuple[list[int], list[str]]:
    """``text`` as word-level "tokens" (each word with its leading space, as BPE tokenizers cut) and the
    vocabulary their ids index."""
    vocab = re.findall(r"\s*\S+", text)
    return list(range(len(vocab))), vocab


@pytest.mark.parametrize(
    ("answer", "gold", "span"),
    [
        ("There are 12 months in a year.", "12", (2, 3)),  # " 12" is the third token
        ("It is 120 days, no, 12 days.", "12", (5, 6)),  # not the "12" of "120"
        ("The painter was Leonardo da Vinci, they say.", "da Vinci", (4, 6)),
        ("port80", "80", None),  # inside a word: no match
    ],
)
def test_the_gold_span_is_the_tokens_of_the_answers_first_match(answer: str, gold: str, span: tuple | None):
    ids, vocab = words(answer)

    def decode(token_ids: list[int]) -> str:
        return "".join(vocab[i] for i in token_ids)

    if span is None:
        with pytest.raises(ValueError, match="does not contain '80'"):
            retention.gold_span(decode, ids, gold)
        return
    start, end = retention.gold_span(decode, ids, gold)
    assert (start, end) == span
    assert retention.contains(decode(ids[start:end]), gold) and not retention.contains(decode(ids[:start]), gold)


def test_calibration_drift_is_applicable_in_a_plain_install():
    """``dlm-sway`` (whose file holds the calibration pack) is a runtime dependency, not a test extra: a plain
    install runs ``calibration_drift`` rather than skipping it as not applicable."""
    import tomllib

    from learnerd.eval.probes.calibration_drift import sway_pack
    from tests.conftest import REPO_ROOT

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert "dlm-sway==0.1.0" in project["dependencies"]
    assert all("dlm-sway" not in r for extra in project["optional-dependencies"].values() for r in extra)
    assert len(sway_pack().items) == 200
