"""Where a log directory or a segment file is: a local path or an object store's URI
(``s3://bucket/prefix``, ``gs://…``, ``hdfs://…``, ``file://…``, with pyarrow's query string,
e.g. ``?endpoint_override=host:port&scheme=http``), told apart once, and said in messages without
the credentials a URI may carry. No I/O and no pyarrow: the CLI imports it before anything loads.

The front ends (the mount, Spark, the tools) hold a :class:`Location` and never look at the text
themselves; ``storage.directory`` opens what it names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .remote.uri import is_uri, redact


@dataclass(frozen=True)
class Location:
    """A local path or an object store's URI, each kept as given (a URI's credentials and query
    string included: only :attr:`display` is ever shown)."""

    text: str
    is_remote: bool

    @classmethod
    def parse(cls, location: str | os.PathLike | Location) -> Location:
        """``location`` told apart: a URI when it has a scheme (``scheme://``), else a local
        path."""
        if isinstance(location, Location):
            return location
        text = os.fspath(location)
        if is_uri(text):
            return cls(text, True)
        return cls(text, False)

    @property
    def path(self) -> Path:
        """The local path. Raises ValueError for an object store's URI."""
        if self.is_remote:
            raise ValueError(f"{self.display} is an object store's URI, not a local path")
        return Path(self.text)

    @property
    def display(self) -> str:
        """How messages name it: a URI without credentials and with its query string elided, a
        path as given."""
        return redact(self.text) if self.is_remote else self.text

    @property
    def name(self) -> str:
        """The last component (a file's or a partition directory's name), without a URI's
        query string."""
        return self._without_query().rstrip("/").rpartition("/")[2]

    @property
    def parent_name(self) -> str:
        """The name of the directory holding it (a local path's made absolute first)."""
        text = self._without_query() if self.is_remote else os.path.abspath(self.text)
        return text.rstrip("/").rpartition("/")[0].rpartition("/")[2]

    def sibling(self, name: str) -> Location:
        """The file ``name`` in the same directory (a URI keeps its query string)."""
        head = self._without_query().rstrip("/").rpartition("/")[0]
        return Location(f"{head}/{name}{self._query()}", self.is_remote)

    def _without_query(self) -> str:
        return self.text.partition("?")[0] if self.is_remote else self.text

    def _query(self) -> str:
        query = self.text.partition("?")[2] if self.is_remote else ""
        return f"?{query}" if query else ""

    def __str__(self) -> str:
        return self.display
