"""Persistence: SQLite schema and queries, the in-memory vector index, .dlm documents, adapters."""
