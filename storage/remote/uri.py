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


def scrub(text: str, uri: str) -> str:
    """``text`` (a library's message about ``uri``) with ``uri`` and the credentials written
    into it replaced by :func:`redact`'s form, on one line."""
    text = " ".join(str(text).split())
    if uri != redact(uri):
        text = text.replace(uri, redact(uri))
        userinfo = uri.partition("://")[2].partition("/")[0].rpartition("@")[0]
        if userinfo:
            text = text.replace(userinfo, "***")
    return text


def is_uri(path: str) -> bool:
    """Whether ``path`` names a store by URI (``scheme://…``) rather than a local path."""
    return "://" in str(path)
