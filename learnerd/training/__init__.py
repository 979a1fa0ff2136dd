"""Training: one cycle of one document, from its rows to a candidate adapter version.

* :mod:`~learnerd.training.cycle` — what a cycle trains (none, fresh, incremental) and the commit;
* :mod:`~learnerd.training.runner` / :mod:`~learnerd.training.worker` — the child process that trains;
* :mod:`~learnerd.training.lora` — the LoRA step loop; :mod:`~learnerd.training.checkpoint` — its checkpoints;
* :mod:`~learnerd.training.config` — the ``training`` block as learnerd trains it; :mod:`~learnerd.training.recipes`
  — the per-base defaults and the undertrained check; :mod:`~learnerd.training.settings` — ``[training]``;
* :mod:`~learnerd.training.ingredients` — one module per ingredient (rows and loss terms beyond the document's
  own rows), each declaring its keys; ``INGREDIENTS`` is the tuple the worker and the step loop iterate.
"""
