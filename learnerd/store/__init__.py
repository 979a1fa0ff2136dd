"""Persistence: SQLite or PostgreSQL (:mod:`.db`, :mod:`.pg`; each table's module owns its DDL and migrations,
:mod:`.schema` lists them), the in-memory vector index and retrieval, ``.dlm`` documents (:mod:`.dlm`), the
adapter store and each version's manifest, the probe journal, the files learnerd writes for others (foyle's
examples, vLLM's and llama.cpp's exports), what ``learnerd forget`` and ``learnerd db scrub`` change, the answers
served as suggestions, and the state directory's layout (:mod:`.layout`) and safety (:mod:`.state_dir`,
:mod:`.atomic`)."""
