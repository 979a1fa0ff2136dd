"""Level-triggered, idempotent reconcilers, one module each (examples, embeddings, foyle_export, probes,
evaluation, vllm_export, gguf_export, training; :mod:`.vllm_api` is vllm_export's client of a vLLM server),
each exporting its controller spec (``SPEC``, :mod:`learnerd.reconcilers.spec`)."""
