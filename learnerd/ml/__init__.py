"""Model-facing code: base models found and loaded (:mod:`.base_model`, :mod:`.hub_cache`, :mod:`.gguf_import`,
the built-in :mod:`.tiny_model`, all through the one :mod:`.loader`), embedders, training rows (:mod:`.rows`,
:mod:`.retrieved_examples`), greedy generation, divergences, the served models (:mod:`.serving`,
:mod:`.llamacpp_serving`) and the GGUF exports (:mod:`.gguf_lora`, :mod:`.gguf_base`).
LoRA training: :mod:`.cycle`, :mod:`.lora`, :mod:`.train_runner`, :mod:`.train_worker`, :mod:`.recipes`,
:mod:`.hyperparams`, :mod:`.general_replay`, :mod:`.checkpoint`."""
