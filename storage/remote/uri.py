"""Naming a log directory by URI (``scheme://…``) rather than a local path, and saying it in
messages without the credentials a URI may carry. No I/O, no pyarrow: the CLI imports it."""

from __future__ import annotations


def redact(uri: str) -> str:
    """``uri`` without credentials written into it (``s3://KEY:SECRET@bucket``), for
    messages."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    query = ""
    if "?" in path:
        path, query = path.split("?", 1)
        query = "?…"
    return f"{scheme}://{authority}{slash}{path}{query}"


def is_uri(path: str) -> bool:
    """Whether ``path`` names a store by URI (``scheme://…``) rather than a local path."""
    return "://" in str(path)
