"""The offline tools over a backing directory or its files, each a ``kfs`` sub-command that
registers itself (``add_parser``): dump, verify, retention, transactions, compact, adopt,
export (Parquet)."""
