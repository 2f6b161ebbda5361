"""A :class:`~storage.coordinator.metadata_image.MetadataImage` as the tree of names
``kafka-metadata-shell`` shows under ``/image`` (Kafka 4.1.1's ``org.apache.kafka.image.node``
classes), each file's text what the shell's ``cat`` prints for it::

    provenance                                  offset <o>, epoch <e>, time <ISO, UTC>
    features/metadataVersion                    Optional[4.1-IV1]
    features/finalized_<feature>                its level
    cluster/brokers/<id>                        BrokerRegistration(id=1, epoch=...)
    cluster/controllers/<id>                    ControllerRegistration(id=1, ...)
    topics/byName/<topic>/{name,id,<N>}         the name, the id, PartitionRegistration(...)
    topics/byId/<topic id>/{name,id,<N>}
    configs/<TYPE>[:<resource>]/<key>           the value
    producerIds/nextProducerId
    acls/byId/<acl id>                          StandardAcl(...)
    scram/<mechanism>/<user>                    ScramCredentialData(...)
    clientQuotas/<entity>/<key>                 the quota (a Java double)
    delegationToken/<token id>                  DelegationTokenData...

Secrets are redacted as a broker's ``MetadataNodeRedactionCriteria.Normal`` redacts them:
SCRAM credentials, delegation tokens and password configs read ``[redacted]`` (the shell
itself prints them). ``features/zkMigrationState``, which 4.1.1's shell lists but cannot
open, is not listed.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable
from typing import Any

from storage.coordinator.dumplog import java_json
from storage.coordinator.metadata_image import Broker, Controller, MetadataImage, Partition
from storage.coordinator.schema import uuid_bytes

__all__ = ["node", "ROOT_NAMES"]

REDACTED = "[redacted]"
ROOT_NAMES = ("acls", "clientQuotas", "cluster", "configs", "delegationToken", "features",
              "producerIds", "provenance", "scram", "topics")

# MetadataVersion's feature levels (server-common's MetadataVersion enum)
METADATA_VERSIONS = {
    7: "3.3-IV3", 8: "3.4-IV0", 9: "3.5-IV0", 10: "3.5-IV1", 11: "3.5-IV2", 12: "3.6-IV0",
    13: "3.6-IV1", 14: "3.6-IV2", 15: "3.7-IV0", 16: "3.7-IV1", 17: "3.7-IV2", 18: "3.7-IV3",
    19: "3.7-IV4", 20: "3.8-IV0", 21: "3.9-IV0", 22: "4.0-IV0", 23: "4.0-IV1", 24: "4.0-IV2",
    25: "4.0-IV3", 26: "4.1-IV0", 27: "4.1-IV1", 28: "4.2-IV0", 29: "4.2-IV1"}
SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}
CONFIG_RESOURCE_TYPES = {2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS",
                         32: "GROUP"}
SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
RESOURCE_TYPES = ("UNKNOWN", "ANY", "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID",
                  "DELEGATION_TOKEN", "USER")
PATTERN_TYPES = ("UNKNOWN", "ANY", "MATCH", "LITERAL", "PREFIXED")
ACL_OPERATIONS = ("UNKNOWN", "ANY", "ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER",
                  "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                  "IDEMPOTENT_WRITE", "CREATE_TOKENS", "DESCRIBE_TOKENS", "TWO_PHASE_COMMIT")
PERMISSION_TYPES = ("UNKNOWN", "ANY", "DENY", "ALLOW")
# config names whose values are passwords (ConfigDef.Type.PASSWORD) by Kafka's naming
_PASSWORD_SUFFIXES = (".password", ".jaas.config", ".secret", "secret.key", ".keystore.key",
                      ".certificate.chain", ".truststore.certificates")


def node(image: MetadataImage, path: tuple[str, ...]) -> list[str] | str:
    """The node at ``path`` below ``/image`` (``()`` is ``/image`` itself): a directory's
    child names, or a file's text (one line, no newline). Raises FileNotFoundError for a
    path the image does not have, NotADirectoryError for a path through a file."""
    current: Any = _root
    for depth, name in enumerate(path):
        if not callable(current):
            raise NotADirectoryError("/".join(path[:depth]))
        current = current(image, name)
        if current is None:
            raise FileNotFoundError("/".join(path[:depth + 1]))
    return current(image, None) if callable(current) else current


# A directory is a function (image, child name) -> the child (a function or text, None when
# absent); asked for child None, it returns its child names.
Directory = Callable[[MetadataImage, "str | None"], Any]


def _root(image: MetadataImage, name: str | None) -> Any:
    if name is None:
        return list(ROOT_NAMES)
    return {"acls": _acls, "clientQuotas": _client_quotas, "cluster": _cluster,
            "configs": _configs, "delegationToken": _tokens, "features": _features,
            "producerIds": _producer_ids, "scram": _scram, "topics": _topics,
            "provenance": _provenance(image)}.get(name)


def _provenance(image: MetadataImage) -> str:
    """``ProvenanceNode``: the last batch applied (Java's ISO_ZONED_DATE_TIME in UTC)."""
    offset, epoch, time_ms = image.provenance or (-1, -1, -1)
    return f"offset {offset}, epoch {epoch}, time {java_zoned_time(time_ms)}"


def java_zoned_time(time_ms: int) -> str:
    """Epoch ms as ``DateTimeFormatter.ISO_ZONED_DATE_TIME`` prints it at ``ZoneId.of("UTC")``:
    the fraction with as few digits as it needs (none for a whole second)."""
    when = datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=time_ms)
    fraction = f".{when.microsecond // 1000:03d}".rstrip("0") if when.microsecond else ""
    return when.strftime("%Y-%m-%dT%H:%M:%S") + fraction.rstrip(".") + "Z[UTC]"


def _features(image: MetadataImage, name: str | None) -> Any:
    if name is None:
        return ["metadataVersion", *(f"finalized_{f}" for f in image.finalized)]
    if name == "metadataVersion":
        level = image.metadata_version
        if level is None:
            return "Optional.empty"
        return f"Optional[{METADATA_VERSIONS.get(level, f'unknown feature level {level}')}]"
    if name.startswith("finalized_"):
        return str(image.finalized.get(name[len("finalized_"):], 0))
    return None


def _cluster(image: MetadataImage, name: str | None) -> Any:
    if name is None:
        return ["brokers", "controllers"]
    if name == "brokers":
        return _keyed(image.brokers, _broker_text, _java_int)
    if name == "controllers":
        return _keyed(image.controllers, _controller_text, _java_int)
    return None


def _java_int(name: str) -> int | None:
    """``Integer.parseInt``: an optional sign and decimal digits only."""
    body = name[1:] if name[:1] in "+-" else name
    return int(name) if body.isascii() and body.isdigit() else None


def _topics(image: MetadataImage, name: str | None) -> Any:
    if name is None:
        return ["byName", "byId"]
    if name == "byName":
        by_name = {t.name: t for t in image.topics.values()}
        return _keyed(by_name, _topic)
    if name == "byId":
        return _keyed(image.topics, _topic)
    return None


def _keyed(items: dict[Any, Any], child: Callable[[Any], Any],
           key: Callable[[str], Any] = str) -> Directory:
    """A directory of ``items``, each named ``str(its key)`` (a name read back by ``key``),
    its node ``child(item)``."""
    def directory(image: MetadataImage, name: str | None) -> Any:
        if name is None:
            return [str(k) for k in items]
        item = items.get(key(name))
        return None if item is None else child(item)
    return directory


def _topic(topic) -> Directory:
    def directory(image: MetadataImage, name: str | None) -> Any:
        if name is None:
            return ["name", "id", *(str(p) for p in topic.partitions)]
        if name == "name":
            return topic.name
        if name == "id":
            return topic.topic_id
        partition = topic.partitions.get(_java_int(name))
        return None if partition is None else partition_text(partition)
    return directory


def _configs(image: MetadataImage, name: str | None) -> Any:
    names = {_resource_name(t, r): (t, r) for t, r in image.configs}
    if name is None:
        return list(names)
    key = names.get(name)
    if key is None:
        return None
    values = image.configs[key]
    return _keyed({k: REDACTED if is_password_config(k) else v for k, v in values.items()},
                  lambda text: text)


def _resource_name(resource_type: int, resource: str) -> str:
    type_name = CONFIG_RESOURCE_TYPES.get(resource_type, "UNKNOWN")
    return type_name if resource == "" else f"{type_name}:{resource}"


def is_password_config(name: str) -> bool:
    """Whether a config's value is a password (Kafka's PASSWORD-typed configs, also when
    prefixed by ``listener.name.<listener>.``)."""
    return name.endswith(_PASSWORD_SUFFIXES)


def _producer_ids(image: MetadataImage, name: str | None) -> Any:
    if name is None:
        return ["nextProducerId"]
    return str(image.next_producer_id) if name == "nextProducerId" else None


def _acls(image: MetadataImage, name: str | None) -> Any:
    if name is None:
        return ["byId"]
    return _keyed(image.acls, acl_text) if name == "byId" else None


def _scram(image: MetadataImage, name: str | None) -> Any:
    mechanisms = {v: k for k, v in SCRAM_MECHANISMS.items()}
    if name is None:
        return list(mechanisms)
    if name not in mechanisms:
        return None
    return _keyed(image.scram.get(mechanisms[name], {}),
                  lambda _: "ScramCredentialData(salt=[redacted], storedKey=[redacted], "
                            "serverKey=[redacted], iterations=[redacted])")


def _client_quotas(image: MetadataImage, name: str | None) -> Any:
    entities = {client_quota_entity_name(e): q for e, q in image.client_quotas.items()}
    if name is None:
        return list(entities)
    quotas = entities.get(name)
    if quotas is None:
        return None
    return _keyed({k: java_json(float(v)) for k, v in quotas.items()}, lambda text: text)


def client_quota_entity_name(entity: tuple[tuple[str, str | None], ...]) -> str:
    """``ClientQuotasImageNode.clientQuotaEntityToString``: ``clientId(..)``, ``ip(..)``,
    ``user(..)`` joined by ``_``, with ``\\``, ``(`` and ``)`` escaped (a default entity's
    null name as the empty string)."""
    names = dict(entity)
    parts = []
    for entity_type, label in (("client-id", "clientId"), ("ip", "ip"), ("user", "user")):
        if entity_type in names:
            value = (names[entity_type] or "").replace("\\", "\\\\")
            value = value.replace("(", "\\(").replace(")", "\\)")
            parts.append(f"{label}({value})")
    return "_".join(parts)


def _tokens(image: MetadataImage, name: str | None) -> Any:
    if name is None:
        return list(image.delegation_tokens)
    if name not in image.delegation_tokens:
        return None
    return ("DelegationTokenDatatokenId=[redacted](owner=[redacted](tokenRequester=[redacted]"
            "(renewers=[redacted], issueTimestamp=[redacted], maxTimestamp=[redacted]), "
            "expiryTimestamp=[redacted]")


# -- the toString()s of Kafka's registrations --------------------------------------------------


def _ints(values: list[int]) -> str:
    """``Arrays.toString(int[])`` (also a Java List's toString)."""
    return "[" + ", ".join(str(v) for v in values) + "]"


def partition_text(p: Partition) -> str:
    """``PartitionRegistration.toString``."""
    recovery = "RECOVERING" if p.leader_recovery_state == 1 else "RECOVERED"
    return (f"PartitionRegistration(replicas={_ints(p.replicas)}, "
            f"directories=[{', '.join(p.directories)}], isr={_ints(p.isr)}, "
            f"removingReplicas={_ints(p.removing_replicas)}, "
            f"addingReplicas={_ints(p.adding_replicas)}, elr={_ints(p.elr)}, "
            f"lastKnownElr={_ints(p.last_known_elr)}, leader={p.leader}, "
            f"leaderRecoveryState={recovery}, leaderEpoch={p.leader_epoch}, "
            f"partitionEpoch={p.partition_epoch})")


def _listeners(endpoints: list[dict[str, Any]]) -> str:
    """Each ``Endpoint.toString``, sorted by listener name."""
    return ", ".join(
        f"Endpoint(listenerName='{e['name']}', "
        f"securityProtocol={SECURITY_PROTOCOLS.get(e['securityProtocol'], 'UNKNOWN')}, "
        f"host='{e['host']}', port={e['port']})"
        for e in sorted(endpoints, key=lambda e: e["name"]))


def _supported(features: list[dict[str, Any]]) -> str:
    """``name: VersionRange`` sorted by name (``3``, ``0-1``, ``5+`` up to Short.MAX_VALUE)."""
    def version_range(low: int, high: int) -> str:
        return str(low) if low == high else f"{low}+" if high == 32767 else f"{low}-{high}"
    return ", ".join(
        f"{f['name']}: {version_range(f['minSupportedVersion'], f['maxSupportedVersion'])}"
        for f in sorted(features, key=lambda f: f["name"]))


def _uuid_order(uuid: str) -> tuple[int, int]:
    """``Uuid.compareTo``: the two halves as signed longs."""
    return struct.unpack(">qq", uuid_bytes(uuid))


def _broker_text(b: Broker) -> str:
    """``BrokerRegistration.toString``."""
    rack = "Optional.empty" if b.rack is None else f"Optional[{b.rack}]"
    directories = ", ".join(sorted(b.directories, key=_uuid_order))
    return (f"BrokerRegistration(id={b.broker_id}, epoch={b.epoch}, "
            f"incarnationId={b.incarnation_id}, listeners=[{_listeners(b.endpoints)}], "
            f"supportedFeatures={{{_supported(b.features)}}}, rack={rack}, "
            f"fenced={_bool(b.fenced)}, inControlledShutdown={_bool(b.in_controlled_shutdown)}, "
            f"isMigratingZkBroker={_bool(b.is_migrating_zk_broker)}, "
            f"directories=[{directories}])")


def _controller_text(c: Controller) -> str:
    """``ControllerRegistration.toString``."""
    return (f"ControllerRegistration(id={c.controller_id}, incarnationId={c.incarnation_id}, "
            f"zkMigrationReady={_bool(c.zk_migration_ready)}, "
            f"listeners=[{_listeners(c.endpoints)}], "
            f"supportedFeatures={{{_supported(c.features)}}})")


def acl_text(d: dict[str, Any]) -> str:
    """``StandardAcl.toString``."""
    def name(names: tuple[str, ...], code: int) -> str:
        return names[code] if 0 <= code < len(names) else "UNKNOWN"
    return (f"StandardAcl(resourceType={name(RESOURCE_TYPES, d['resourceType'])}, "
            f"resourceName={d['resourceName']}, "
            f"patternType={name(PATTERN_TYPES, d['patternType'])}, "
            f"principal={d['principal']}, host={d['host']}, "
            f"operation={name(ACL_OPERATIONS, d['operation'])}, "
            f"permissionType={name(PERMISSION_TYPES, d['permissionType'])})")


def _bool(value: bool) -> str:
    return "true" if value else "false"
