"""Evaluation of adapter versions, sway-compatible: the probes (:mod:`.probes`, one module each, and their
registry) run over the differential backend (:mod:`.backend`: one base seen with and without its adapter) on a
document's encoded inputs (:mod:`.inputs`) by :mod:`.suite`, into sway's schema-1 report (:mod:`.report`,
:mod:`.score`, :mod:`.junit`, :mod:`.summary`); the promotion gate that decides from it which version is served
(:mod:`.gate`); ``learnerd harvest``'s rules (:mod:`.harvest`); a document's report history and what each version
learned (:mod:`.history`, :mod:`.versions`); the base's answers and log-likelihoods kept between evaluations
(:mod:`.base_answers`, :mod:`.base_logprobs`); the dialogue half-life fit (:mod:`.half_life`); and the
evaluation's threads (:mod:`.threads`). ``[evaluation]`` is :mod:`.settings`."""
