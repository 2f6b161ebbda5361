"""Kafka's JSON message schemas, read as data, and a reader for messages of any version they
define.

The schema files are in the format of Kafka's message generator (``common/message/*.json``:
``name``, ``validVersions``, ``flexibleVersions``, ``fields`` with ``name``, ``type``,
``versions``, ``nullableVersions``, ``taggedVersions``, ``tag``, ``default`` and nested
``fields``, ``commonStructs``; ``//`` comment lines allowed). :meth:`Message.read` decodes the
bytes of one version the way the generated ``<Message>.read(Readable, version)`` does and
returns what the generated ``<Message>JsonConverter.write(message, version)`` makes of it:

* lowerCamelCase field names, only the fields that exist in that version, in schema order;
* a tagged field only when its value differs from its default;
* ``bytes`` as standard base64 with padding, ``uuid`` as Kafka's ``Uuid.toString`` (base64url,
  no padding), strings decoded as UTF-8 (malformed bytes replaced, as ``new String`` does),
  null as ``None``.

Flexible versions use compact encodings (unsigned-varint lengths plus one, 0 = null) and end
every struct with a tagged-field section; other versions use int16 string lengths and int32
bytes/array lengths (-1 = null). A nullable struct field is preceded by an int8 (negative =
null), or in a tagged field by an unsigned varint (0 = null).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import struct
from pathlib import Path
from typing import Any, Callable

__all__ = ["Message", "MessageFormatError", "SchemaError", "UnknownVersionError", "Versions",
           "load_message", "uuid_string"]

PRIMITIVES = frozenset({"bool", "int8", "int16", "uint16", "int32", "uint32", "int64",
                        "float64", "string", "uuid", "bytes", "records"})
_FIXED = {"bool": struct.Struct(">?"), "int8": struct.Struct(">b"), "int16": struct.Struct(">h"),
          "uint16": struct.Struct(">H"), "int32": struct.Struct(">i"), "uint32": struct.Struct(">I"),
          "int64": struct.Struct(">q"), "float64": struct.Struct(">d")}
_INTEGERS = frozenset({"int8", "int16", "uint16", "int32", "uint32", "int64"})
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID.toString()


class SchemaError(ValueError):
    """A schema file that is not a valid message schema."""


class MessageFormatError(ValueError):
    """Bytes that do not hold a message of the version asked for: truncated, a negative or
    oversized length, null in a non-nullable field, an overlong varint."""


class UnknownVersionError(MessageFormatError):
    """A version outside the schema's ``validVersions``."""


def uuid_string(raw: bytes) -> str:
    """Kafka's ``Uuid.toString()`` of 16 bytes: base64url without padding."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def uuid_bytes(text: str) -> bytes:
    """The 16 bytes of a Uuid spelled as ``Uuid.toString()`` (``Uuid.fromString``)."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# -- versions -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Versions:
    """A version range of the schema format: ``"0+"``, ``"1-3"``, ``"2"``, ``"none"``."""

    low: int
    high: int | None  # None: open-ended

    @classmethod
    def parse(cls, text: str | int | None, default: "Versions | None" = None) -> "Versions":
        if text is None:
            if default is None:
                raise SchemaError("a version range is missing")
            return default
        text = str(text).strip()
        try:
            if text == "none":
                return NONE
            if text.endswith("+"):
                return cls(int(text[:-1]), None)
            if "-" in text:
                low, high = text.split("-", 1)
                return cls(int(low), int(high))
            return cls(int(text), int(text))
        except ValueError:
            raise SchemaError(f"not a version range: {text!r}") from None

    def __contains__(self, version: int) -> bool:
        return self.low <= version and (self.high is None or version <= self.high)

    def __str__(self) -> str:
        if self == NONE:
            return "none"
        if self.high is None:
            return f"{self.low}+"
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


NONE = Versions(1, 0)  # contains nothing


# -- the schema ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Field:
    """One field: ``json_name`` is the converter's lowerCamelCase name; ``element`` is the
    element type of an array (``None`` otherwise); ``struct`` the struct of a struct or
    struct-array field; ``default_text`` the schema's ``default`` as text ("" when absent)."""

    name: str
    type: str
    element: str | None
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default_text: str
    struct: "Struct | None"

    @functools.cached_property
    def json_name(self) -> str:
        # MessageGenerator's camelCaseName: the first letter lower-cased
        return self.name[:1].lower() + self.name[1:]


@dataclasses.dataclass(frozen=True, eq=False)
class Struct:
    name: str
    fields: tuple[Field, ...]


def _read_json(path: Path) -> dict:
    # Kafka reads its schemas with comments allowed; only whole-line // comments occur
    lines = [line for line in path.read_text(encoding="utf-8").splitlines()
             if not line.lstrip().startswith("//")]
    try:
        return json.loads("\n".join(lines))
    except json.JSONDecodeError as e:
        raise SchemaError(f"{path.name}: {e}") from None


def _default_text(value: Any) -> str:
    # Kafka takes "default" as a string; a JSON null is no default at all
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class _StructParser:
    """Builds the Struct tree of one schema, resolving ``commonStructs`` by name."""

    def __init__(self, spec: dict, where: str) -> None:
        self.where = where
        self.common = {s["name"]: s for s in spec.get("commonStructs", [])}
        self.built: dict[str, Struct] = {}

    def struct(self, name: str, fields: list[dict]) -> Struct:
        return Struct(name, tuple(self.field(f) for f in fields))

    def field(self, spec: dict) -> Field:
        try:
            name, type_ = spec["name"], spec["type"]
        except KeyError as e:
            raise SchemaError(f"{self.where}: a field without {e}") from None
        element = type_[2:] if type_.startswith("[]") else None
        base = element if element is not None else type_
        tagged = Versions.parse(spec.get("taggedVersions"), NONE)
        versions = Versions.parse(spec.get("versions"), tagged if tagged != NONE else None)
        if tagged != NONE and spec.get("tag") is None:
            raise SchemaError(f"{self.where}: tagged field {name} has no tag")
        sub = None
        if base not in PRIMITIVES:
            sub = self._struct_of(base, spec.get("fields"))
        return Field(name, type_, element, versions, Versions.parse(spec.get("nullableVersions"), NONE),
                     tagged, spec.get("tag"), _default_text(spec.get("default")), sub)

    def _struct_of(self, name: str, fields: list[dict] | None) -> Struct:
        if fields is not None:
            return self.struct(name, fields)
        if name in self.built:
            return self.built[name]
        if name not in self.common:
            raise SchemaError(f"{self.where}: unknown type {name}")
        built = self.built[name] = self.struct(name, self.common[name]["fields"])
        return built


def load_message(path: str | Path) -> "Message":
    """Parse one schema file. Raises SchemaError for a file that is not a message schema."""
    path = Path(path)
    spec = _read_json(path)
    try:
        name = spec["name"]
        valid = Versions.parse(spec["validVersions"])
    except KeyError as e:
        raise SchemaError(f"{path.name}: no {e}") from None
    flexible = Versions.parse(spec.get("flexibleVersions"), NONE)
    body = _StructParser(spec, path.name).struct(name, spec.get("fields", []))
    api_key = spec.get("apiKey")
    if api_key is not None and not isinstance(api_key, int):
        raise SchemaError(f"{path.name}: apiKey {api_key!r} is not an integer")
    return Message(name, valid, flexible, body, api_key)


# -- reading ------------------------------------------------------------------------------


class _Reader:
    """A cursor over the bytes of one message (Kafka's ``ByteBufferAccessor``)."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, pos: int = 0, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def take(self, n: int) -> bytes:
        if n > self.end - self.pos:
            raise MessageFormatError(f"truncated: {n} bytes needed at byte {self.pos}, "
                                     f"{self.end - self.pos} left")
        start = self.pos
        self.pos += n
        return bytes(self.buf[start:self.pos])

    def fixed(self, s: struct.Struct):
        pos = self.pos
        if s.size > self.end - pos:
            self.take(s.size)  # raises
        self.pos = pos + s.size
        return s.unpack_from(self.buf, pos)[0]

    def uvarint(self) -> int:
        """``ByteUtils.readUnsignedVarint``: at most 5 bytes, into a Java int (so values of
        2**31 and more come out negative, as in Kafka)."""
        value = 0
        for i in range(5):
            b = self.take(1)[0]
            value |= (b & 0x7F) << (7 * i)
            if b < 0x80:
                value &= 0xFFFFFFFF
                return value - (1 << 32) if value >= 1 << 31 else value
        raise MessageFormatError(f"unsigned varint longer than 5 bytes before byte {self.pos}")

    def remaining(self) -> int:
        return self.end - self.pos


def _length(r: _Reader, flexible: bool, short: bool) -> int:
    """A length prefix: compact (varint + 1) in flexible versions, else int16/int32."""
    if flexible:
        return r.uvarint() - 1
    return r.fixed(_FIXED["int16"] if short else _FIXED["int32"])


Read = Callable[[_Reader], Any]


@dataclasses.dataclass(frozen=True)
class _Plan:
    """How one struct reads at one version: the fields present, in order; the readers of the
    untagged ones; the tagged ones by tag; and each tagged field's default (JSON shape)."""

    present: tuple[Field, ...]
    untagged: tuple[tuple[str, Read], ...]
    tagged: dict[int, tuple[str, Read]]
    defaults: dict[str, Any]
    flexible: bool


class Message:
    """One message schema: ``name``, ``valid_versions``, ``flexible_versions``, its fields and
    its ``apiKey`` (``api_key``, None when the schema has none): the record type of a metadata
    record or of a ``coordinator-key``.

    Readers are compiled per version on first use and cached."""

    def __init__(self, name: str, valid_versions: Versions, flexible_versions: Versions,
                 body: Struct, api_key: int | None = None) -> None:
        self.name = name
        self.api_key = api_key
        self.valid_versions = valid_versions
        self.flexible_versions = flexible_versions
        self.body = body
        self._plans: dict[tuple[int, int], _Plan] = {}

    def __repr__(self) -> str:
        return f"Message({self.name}, versions {self.valid_versions})"

    def read(self, data, version: int, pos: int = 0) -> dict[str, Any]:
        """Decode ``data[pos:]`` as this message at ``version``; bytes after the message are
        ignored, as Kafka's readers ignore them. Raises UnknownVersionError for a version
        outside ``validVersions``, MessageFormatError for bytes that do not fit."""
        return self.read_with_end(data, version, pos)[0]

    def read_with_end(self, data, version: int, pos: int = 0) -> tuple[dict[str, Any], int]:
        """:meth:`read`, and the position right after the message (for serdes that refuse
        bytes after it, as Kafka's ``AbstractApiMessageSerde`` does)."""
        if version not in self.valid_versions:
            raise UnknownVersionError(f"{self.name} has no version {version} "
                                      f"(valid versions: {self.valid_versions})")
        reader = _Reader(data, pos)
        return self._read_struct(self.body, version, reader), reader.pos

    # -- compiling -------------------------------------------------------------------------

    def _plan(self, body: Struct, version: int) -> _Plan:
        key = (id(body), version)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._compile(body, version)
        return plan

    def _compile(self, body: Struct, version: int) -> _Plan:
        flexible = version in self.flexible_versions
        present = tuple(f for f in body.fields if version in f.versions)
        untagged, tagged, defaults = [], {}, {}
        for f in present:
            is_tagged = flexible and version in f.tagged
            reader = self._field_reader(f, version, flexible, is_tagged)
            if is_tagged:
                tagged[f.tag] = (f.json_name, reader)
                defaults[f.json_name] = self.field_default(f, version)
            else:
                untagged.append((f.json_name, reader))
        return _Plan(present, tuple(untagged), tagged, defaults, flexible)

    def _field_reader(self, f: Field, version: int, flexible: bool, tagged: bool) -> Read:
        nullable = version in f.nullable
        if f.element is None:
            return self._value_reader(f, f.type, version, flexible, nullable, tagged)
        element = self._value_reader(f, f.element, version, flexible, False, False)

        def read_array(r: _Reader):
            n = _length(r, flexible, short=False)
            if n < 0:
                return _null(f, nullable)
            if n > r.remaining():  # Kafka refuses to allocate more elements than bytes left
                raise MessageFormatError(f"{f.name}: array of {n} elements, only "
                                         f"{r.remaining()} bytes left")
            return [element(r) for _ in range(n)]
        return read_array

    def _value_reader(self, f: Field, type_: str, version: int, flexible: bool,
                      nullable: bool, tagged: bool) -> Read:
        if type_ in _FIXED:
            s = _FIXED[type_]
            return lambda r: r.fixed(s)
        if type_ == "uuid":
            return lambda r: uuid_string(r.take(16))
        if type_ == "string":
            return lambda r: _read_string(r, f, flexible, nullable)
        if type_ in ("bytes", "records"):
            return lambda r: _read_bytes(r, f, flexible, nullable)
        sub = f.struct
        if nullable:
            # the null marker: an int8 (< 0 = null), or in a tagged field a varint (0 = null)
            def read_nullable_struct(r: _Reader):
                present = r.uvarint() > 0 if tagged else r.fixed(_FIXED["int8"]) >= 0
                return self._read_struct(sub, version, r) if present else None
            return read_nullable_struct
        return lambda r: self._read_struct(sub, version, r)

    def field_default(self, f: Field, version: int) -> Any:
        """The field's default in JSON shape (``FieldSpec.fieldDefault``)."""
        text = f.default_text
        if text == "null":
            return None
        if f.element is not None:
            return []
        if f.type in _INTEGERS:
            return _int_default(text)
        if f.type == "bool":
            return text == "true"
        if f.type == "float64":
            return float(text) if text else 0.0
        if f.type == "string":
            return text
        if f.type == "uuid":
            return text or ZERO_UUID
        if f.type in ("bytes", "records"):
            return ""
        return self._default_struct(f.struct, version)

    def _default_struct(self, body: Struct, version: int) -> dict[str, Any]:
        plan = self._plan(body, version)
        return {f.json_name: self.field_default(f, version)
                for f in plan.present if f.json_name not in plan.defaults}

    # -- reading ---------------------------------------------------------------------------

    def _read_struct(self, body: Struct, version: int, r: _Reader) -> dict[str, Any]:
        plan = self._plan(body, version)
        values = {name: read(r) for name, read in plan.untagged}
        if not plan.flexible:
            return values  # every field present is untagged, in order
        tagged = self._read_tagged(plan, r)
        if not plan.defaults:
            return values
        out = {}
        for f in plan.present:
            name = f.json_name
            if name in plan.defaults:
                # the converter writes a tagged field only when it is not its default
                value = tagged.get(name, plan.defaults[name])
                if value != plan.defaults[name]:
                    out[name] = value
            else:
                out[name] = values[name]
        return out

    @staticmethod
    def _read_tagged(plan: _Plan, r: _Reader) -> dict[str, Any]:
        values = {}
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            if not 0 <= size <= r.remaining():
                raise MessageFormatError(f"tagged field {tag}: {size} bytes declared, "
                                         f"{r.remaining()} left")
            end = r.pos + size
            known = plan.tagged.get(tag)
            if known is not None:  # unknown tags are skipped, as Kafka keeps them opaque
                name, read = known
                values[name] = read(_Reader(r.buf, r.pos, end))
            r.pos = end
        return values


def _int_default(text: str) -> int:
    if not text:
        return 0
    if text.lower().startswith("0x"):
        return int(text, 16)
    return int(text)


def _null(f: Field, nullable: bool) -> None:
    if not nullable:
        raise MessageFormatError(f"non-nullable field {f.name} was serialized as null")
    return None


def _read_string(r: _Reader, f: Field, flexible: bool, nullable: bool) -> str | None:
    n = _length(r, flexible, short=True)
    if n < 0:
        return _null(f, nullable)
    return r.take(n).decode("utf-8", "replace")


def _read_bytes(r: _Reader, f: Field, flexible: bool, nullable: bool) -> str | None:
    n = _length(r, flexible, short=False)
    if n < 0:
        return _null(f, nullable)
    return base64.b64encode(r.take(n)).decode("ascii")
