"""Decode-time steering: one logit delta per vocabulary cluster, tuned so answers get shorter without
getting less correct (``learnerd evolve``; the plan of compressor_2's "evolution of steering deltas").

* :mod:`~learnerd.steering.clusters` — every token in one of K + 2 clusters (0 = EOS, 1 = numbers and
  arithmetic, 2 … K+1 = k-means over token embeddings), cached per tokenizer;
* :mod:`~learnerd.steering.processor` — the ``LogitsProcessor`` adding the deltas, and the steering
  file (``deltas_best.json``) that carries them, refused for another tokenizer;
* :mod:`~learnerd.steering.pool` — the questions: a document's probes or a ``{question, answer}`` JSONL;
* :mod:`~learnerd.steering.judges` — correctness with an explanation (normalised match, or a chat model);
* :mod:`~learnerd.steering.reflectors` — the next deltas from one iteration's evidence (offline (1+1)-ES,
  or a chat model under a strict JSON schema); :mod:`~learnerd.steering.chat` — the structured requests;
* :mod:`~learnerd.steering.evolve` — the loop and its run directory; :mod:`~learnerd.steering.plot` —
  ``evolution.png``; :mod:`~learnerd.steering.server` — an external inference server evolve drives
  (``[steering.server]``); :mod:`~learnerd.steering.settings` — ``[steering]``.

Imports: ``ml``, ``store`` and ``sections`` below it. ``learnerd.cmd`` (``evolve``, ``generate --steering``) and
``learnerd.daemon`` (``[serve] steering``: the served models apply a document's best deltas) use it.
"""
