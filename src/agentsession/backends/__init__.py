"""Storage backends: memory, JSONL, SQLite and PostgreSQL. Open them with ``open_store``."""
