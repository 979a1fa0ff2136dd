"""Model-facing code: base models found and loaded (:mod:`.base_model`, :mod:`.hub_cache`, :mod:`.gguf_import`,
the built-in :mod:`.tiny_model`, all through the one :mod:`.loader`), embedders, training rows (:mod:`.rows`),
retrieved examples in a prompt (:mod:`.retrieved_examples`), greedy generation, divergences, the undertrained
check (:mod:`.undertrained`), the served models (:mod:`.serving`, :mod:`.llamacpp_serving`) and the GGUF exports
(:mod:`.gguf_lora`, :mod:`.gguf_base`). Training itself is :mod:`learnerd.training`."""
