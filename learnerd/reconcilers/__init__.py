"""Level-triggered, idempotent reconcilers: one module each (examples, embeddings, probes, training, evaluation)."""
