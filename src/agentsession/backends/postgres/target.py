"""What a PostgreSQL URL names, and how to speak of it without its password.

:class:`_Target` parses ``postgresql://user:pw@host:port/db?schema=...`` once: the DSN psycopg
gets (without agentsession's own ``schema=``), the schema, and the parts messages may show.
Every message that could carry the URL or a driver's error goes through :meth:`_Target.scrub`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit, urlunsplit

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

    @classmethod
    def parse(cls, url: str, schema: str | None) -> _Target:
        if not isinstance(url, str):
            raise UsageError(f"a PostgreSQL URL must be a string, not {type(url).__name__}")
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("postgresql", "postgres"):
            raise UsageError(f"not a PostgreSQL URL (postgresql://user@host/db): {url!r}")
        kept: list[str] = []
        url_schema: str | None = None
        for item in parts.query.split("&") if parts.query else []:
            name, _, value = item.partition("=")
            if name == "schema":
                url_schema = unquote(value)
            else:
                kept.append(item)
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
        secrets = tuple(s for s in {password, *_secrets(url)} if s)
        if schema is not None and url_schema is None:
            query = "&".join([*kept, f"schema={schema}"])
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
