"""What a PostgreSQL URL names, and how to speak of it without its password.

:class:`_Target` parses ``postgresql://user:pw@host:port/db?schema=...`` once: the DSN psycopg
gets (without agentsession's own query parameters), the schema, the read replicas, and the
parts messages may show. Every message that could carry the URL or a driver's error goes
through :meth:`_Target.scrub`.

agentsession's own query parameters: ``schema=NAME``; ``read_url=URL`` (percent-encoded, once
per replica, in order) and ``replica_wait=SECONDS``, the URL forms of the store's options of
those names, so that :attr:`_Target.url` (a store's ``url``) reopens a store with its replicas.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ...errors import UsageError

__all__ = ["DEFAULT_SCHEMA"]

DEFAULT_SCHEMA = "agentsession"
"""The schema a store uses when neither the URL's ``?schema=`` nor the option names one."""

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")


@dataclass(frozen=True)
class _Target:
    """What a URL names: the DSN for psycopg, the schema, and how to describe it safely."""

    url: str
    """What reopens the store (the given URL, with ``schema=`` when it came as an option)."""
    conninfo: str
    """The URL without agentsession's own query parameters."""
    schema: str
    host: str
    port: str
    dbname: str
    user: str
    secrets: tuple[str, ...] = field(default=())
    read_urls: tuple[str, ...] = ()
    """The read replicas' URLs (the URL's ``read_url=`` parameters or the options)."""
    replica_wait: float | None = None
    """The URL's ``replica_wait=`` or the option (None: neither named one)."""

    @classmethod
    def parse(
        cls,
        url: str,
        schema: str | None,
        read_urls: Sequence[str] = (),
        replica_wait: float | None = None,
    ) -> _Target:
        """Parse ``url``; ``schema``, ``read_urls`` and ``replica_wait`` are the store's
        options of those names, which must agree with the URL's parameters when both name
        one (:class:`UsageError` otherwise)."""
        if not isinstance(url, str):
            raise UsageError(f"a PostgreSQL URL must be a string, not {type(url).__name__}")
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("postgresql", "postgres"):
            raise UsageError(f"not a PostgreSQL URL (postgresql://user@host/db): {url!r}")
        kept: list[str] = []
        url_schema: str | None = None
        url_replicas: list[str] = []
        url_wait: float | None = None
        for item in parts.query.split("&") if parts.query else []:
            name, _, value = item.partition("=")
            if name == "schema":
                url_schema = unquote(value)
            elif name == "read_url":
                url_replicas.append(unquote(value))
            elif name == "replica_wait":
                url_wait = _seconds(unquote(value))
            else:
                kept.append(item)
        if read_urls and url_replicas and list(read_urls) != url_replicas:
            raise UsageError(
                "the URL names read replicas (read_url=) and the read_url/read_urls options "
                "name others: give them in one place"
            )
        if replica_wait is not None and url_wait is not None and replica_wait != url_wait:
            raise UsageError(
                f"the URL says replica_wait={url_wait} but the replica_wait option says "
                f"{replica_wait}"
            )
        if schema is not None and url_schema is not None and schema != url_schema:
            raise UsageError(
                f"the URL names schema {url_schema!r} but the schema option says {schema!r}"
            )
        chosen = schema if schema is not None else url_schema
        if chosen is not None and not _SCHEMA_NAME.match(chosen):
            raise UsageError(
                f"schema name {chosen!r} must be 1-63 letters, digits or underscores, "
                "not starting with a digit"
            )
        conninfo = urlunsplit(parts._replace(query="&".join(kept)))
        try:
            params = conninfo_to_dict(conninfo)
        except psycopg.Error as exc:
            raise UsageError(f"invalid PostgreSQL URL: {_scrub(str(exc), _secrets(url))}") from None
        password = str(params.get("password") or "")
        replicas = tuple(read_urls) or tuple(url_replicas)
        replica_secrets = [s for r in replicas for s in _secrets(r)]
        secrets = tuple(s for s in {password, *_secrets(url), *replica_secrets} if s)
        # What the options added that the URL lacks goes into the URL that reopens the store.
        added: list[str] = []
        if schema is not None and url_schema is None:
            added.append(f"schema={schema}")
        if read_urls and not url_replicas:
            added.extend(f"read_url={quote(r, safe='')}" for r in read_urls)
        if replica_wait is not None and url_wait is None:
            added.append(f"replica_wait={replica_wait!r}")
        if added:
            query = "&".join([*(parts.query.split("&") if parts.query else []), *added])
            url = urlunsplit(parts._replace(query=query))
        return cls(
            url=url,
            conninfo=conninfo,
            schema=chosen or DEFAULT_SCHEMA,
            host=str(params.get("host") or params.get("hostaddr") or "localhost"),
            port=str(params.get("port") or "5432"),
            dbname=str(params.get("dbname") or params.get("user") or "(default)"),
            user=str(params.get("user") or ""),
            secrets=secrets,
            read_urls=replicas,
            replica_wait=replica_wait if replica_wait is not None else url_wait,
        )

    @property
    def where(self) -> str:
        """Host, port and database for messages (never the password)."""
        return f"PostgreSQL at {self.host}:{self.port}, database {self.dbname!r}"

    @property
    def location(self) -> str:
        """A password-free URL for people."""
        user = f"{self.user}@" if self.user else ""
        return f"postgresql://{user}{self.host}:{self.port}/{self.dbname}?schema={self.schema}"

    def scrub(self, message: str) -> str:
        """``message`` with any secret of the URL masked."""
        return _scrub(message, self.secrets)


def _seconds(text: str) -> float:
    """A ``replica_wait=`` parameter's seconds (:class:`UsageError` for anything else)."""
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"replica_wait= in the URL must be seconds, not {text!r}") from None


def _secrets(url: str) -> tuple[str, ...]:
    """The password part of a URL's netloc, raw and as given (before percent-decoding)."""
    netloc = urlsplit(url).netloc if "://" in url else ""
    userinfo, at, _ = netloc.rpartition("@")
    if not at:
        return ()
    _, colon, password = userinfo.partition(":")
    return (password,) if colon and password else ()


def _scrub(message: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            message = message.replace(secret, "***")
    return message
