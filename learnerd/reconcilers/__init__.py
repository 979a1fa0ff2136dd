"""Level-triggered, idempotent reconcilers, one module each (examples, embeddings, foyle_export, probes,
evaluation, training), each exporting its controller spec (``SPEC``, :mod:`learnerd.reconcilers.spec`)."""
