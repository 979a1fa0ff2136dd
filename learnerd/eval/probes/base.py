"""What a run gives every probe: the options of the evaluation, composed from the probes' own, and the
context a probe reads.

A probe is a function ``run(ctx) -> ProbeResult | list[ProbeResult]`` in a module of
:data:`~learnerd.eval.probes.PROBES`. A probe that supports null-adapter calibration also offers
``raw_value(ctx, view_factory) -> float``: its raw metric with the fine-tuned side replaced by another
view (see :mod:`learnerd.eval.probes.null_adapter`). A module with knobs declares them in its ``Options``
(a :class:`~learnerd.eval.probes.common.ProbeOptions`); :class:`EvalOptions` is composed of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from pydantic import ConfigDict

from learnerd.eval import probes
from learnerd.eval.backend import DifferentialBackend
from learnerd.eval.inputs import DocumentInputs
from learnerd.eval.probes import common
from learnerd.eval.probes.common import z_score
from learnerd.eval.settings import EvaluationSettings
from learnerd.ml.router import Quoter, Route, adapter_alone, no_quotes

__all__ = ["EvalOptions", "ProbeContext", "option_models", "z_score"]


def option_models(modules: Iterable[ModuleType]) -> tuple[type[common.ProbeOptions], ...]:
    """The ``Options`` models :class:`EvalOptions` is composed of: the shared :class:`common.Options`, then
    the ``Options`` of each of ``modules`` that declares one, in order.

    Raises:
        TypeError: two of them (or one and :class:`EvaluationSettings`) declare the same field name.
    """
    parts = [(common.__name__, common.Options), *((m.__name__, m.Options) for m in modules if hasattr(m, "Options"))]
    owner = dict.fromkeys(EvaluationSettings.model_fields, EvaluationSettings.__name__)
    for module, model in parts:
        for name in model.model_fields:
            if name in owner:
                raise TypeError(f"option {name!r} of {module} is already declared by {owner[name]}")
            owner[name] = module
    return tuple(model for _, model in parts)


class EvalOptions(EvaluationSettings, *option_models(probes.PROBES)):  # type: ignore[misc]  # bases made at import
    """The knobs of an evaluation: the ``[evaluation]`` settings plus every probe module's ``Options``
    (defaults follow sway's where it has one), flat: ``EvalOptions(top_k=64, min_similarity=0.8)``.
    Validated by pydantic like the config (a value out of range raises ``pydantic.ValidationError``, a
    ``ValueError``). Divergences are in nats.
    """

    model_config = ConfigDict(frozen=True)

    @classmethod
    def from_settings(cls, settings: EvaluationSettings, **overrides: Any) -> EvalOptions:
        """The options the ``[evaluation]`` config section sets (with ``overrides``); defaults for the rest."""
        return cls.model_validate({**settings.model_dump(), **overrides})


@dataclass
class ProbeContext:
    """What a probe reads: the backend, the document's encoded inputs, the options, and the null-adapter
    statistics per probe kind (``{"mean", "std", "n", "degenerate"}``) once calibration ran.

    ``route`` says which model the served system answers each text with, a user message as the endpoint routes it
    (:func:`learnerd.ml.router.text_router`; default: the adapter alone): the retention and dialogue probes score each
    item as served and report the adapter alone beside it. ``quote`` gives the retrieved examples the endpoint quotes
    with each text, by whether its adapter answers it (:meth:`learnerd.ml.router.TextRouter.quoted`; default: none):
    the dialogue probe answers each turn under them, as served, a turn the base answers decoded with context-aware
    decoding at ``context_alpha`` (the endpoint's ``[serve] context_alpha`` as its backend applies it; 0: off) when
    any is quoted, and carrying the quoted command the answering model chooses at ``choice_margin`` nats per token
    (the endpoint's ``ServeConfig.served_choice_margin``; None: off; :func:`learnerd.ml.choice.choose_command`).

    ``progress`` is called with a short description after each step of work (:func:`learnerd.eval.suite.total_steps`
    of them in a whole evaluation); it is where a progress bar or a log event hooks in.
    """

    backend: DifferentialBackend
    inputs: DocumentInputs
    options: EvalOptions = field(default_factory=EvalOptions)
    null_stats: dict[str, dict[str, float]] = field(default_factory=dict)
    progress: Callable[[str], None] = field(default_factory=lambda: _no_progress)
    route: Callable[[Sequence[str]], list[Route]] = field(default_factory=lambda: adapter_alone)
    quote: Quoter = field(default_factory=lambda: no_quotes)
    context_alpha: float = 0.0
    choice_margin: float | None = None

    def by_adapter(self, texts: Sequence[str]) -> list[bool]:
        """Whether the served system answers each of ``texts`` with the adapter (else the base: :attr:`route`)."""
        return [r.routed == "adapter" for r in self.route(texts)]

    def step(self, description: str) -> None:
        """One step of work done: report it, then stop here if the evaluation was cancelled.

        Raises:
            EvaluationCancelled: the backend's cancel event is set.
        """
        self.progress(description)
        self.backend.check_cancelled()


def _no_progress(description: str) -> None:
    return None
