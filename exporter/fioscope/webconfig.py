"""``--web.config.file``: TLS and basic auth in the Prometheus exporter-toolkit format.

The same file node_exporter takes secures both (see the exporter-toolkit's
docs/web-configuration.md)::

    tls_server_config:
      cert_file: server.crt        # relative paths: to this file's directory
      key_file: server.key
    basic_auth_users:
      prometheus: $2y$10$...       # bcrypt (htpasswd -nBC 10 "" | tr -d ':\\n')

Supported: ``cert_file``/``key_file`` (or inline ``cert``/``key``), ``client_auth_type``
``NoClientCert``/``VerifyClientCertIfGiven``/``RequireAndVerifyClientCert`` with
``client_ca_file``/``client_ca``, ``min_version``/``max_version``,
``prefer_server_cipher_suites``, ``http_server_config.headers`` (``http2`` is accepted,
fioscope speaks HTTP/1.1). Options named in the format that fioscope cannot honour
(Go cipher and curve names, SAN pinning, rate limits) are an error, never silently ignored.
As in exporter-toolkit, a changed file (or certificate, key or CA file) takes effect without
a restart: it is read again at most once a second, on the next connection. It never fails
open: a file that secures nothing (empty, comments only, ``null``) is refused, at start and on
reload; on reload a file that no longer loads (broken, truncated, schema-invalid, unreadable)
or that would turn TLS or basic auth off is logged in one line naming it, counted
(``fioscope_web_config_reload_failures_total``, ``fioscope_web_config_last_reload_successful``)
and the previous settings stay. Turning TLS or basic auth off takes a restart.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import ssl
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt

from .config import ConfigError, mapping, read_yaml

log = logging.getLogger("fioscope.web")


class WebConfigError(ConfigError):
    """The web config file is unreadable, has an unknown key or a value fioscope cannot honour."""


_TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1, "TLS12": ssl.TLSVersion.TLSv1_2,
                 "TLS13": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_HEADERS = {"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options", "X-XSS-Protection", "Strict-Transport-Security"}
_UNSUPPORTED = {"cipher_suites": "Go cipher suite names", "curve_preferences": "Go curve names",
                "client_allowed_sans": "client SAN pinning"}
_BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")
# compared against when the user is unknown, so an unknown user costs as much as a wrong password
_DUMMY_HASH = "$2b$10$aqXdxx9smPfUePgGFMzgBOcRW74ROTUalT1ZRJZJS.MgHuYZp0n0W"


def _bcrypt(password: str, hashed: str) -> str:
    """bcrypt of ``password`` with the salt and cost of ``hashed``; "" if ``hashed`` is not a bcrypt hash.

    The ``bcrypt`` package, not the ``crypt`` module (gone in Python 3.13). As libxcrypt did, a
    password counts up to 72 bytes (bcrypt >= 5 refuses longer ones instead of cutting them).
    """
    try:
        return bcrypt.hashpw(password.encode("utf-8", "surrogatepass")[:72], hashed.encode()).decode()
    except (ValueError, UnicodeEncodeError):
        return ""


@dataclass
class ReloadStatus:
    """Outcome of the hot reloads, shared by every successive WebConfig (for the health metrics)."""

    failures: int = 0
    last_successful: bool = True


@dataclass
class WebConfig:
    path: Path
    tls: ssl.SSLContext | None = None
    users: dict[str, str] = field(default_factory=dict)
    headers: list[tuple[str, str]] = field(default_factory=list)
    # the files it was read from, with their mtimes: a change reloads it
    sources: dict[Path, int] = field(default_factory=dict)
    status: ReloadStatus = field(default_factory=ReloadStatus)
    _verified: set[tuple[str, bytes]] = field(default_factory=set)
    _failed: set[tuple[str, bytes]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def changed(self) -> bool:
        return any(_mtime(path) != mtime for path, mtime in self.sources.items())

    def reloaded(self) -> WebConfig:
        """This config, or the file's new content if it (or a file it names) changed and loads."""
        if not self.changed():
            return self
        try:
            fresh = load_web_config(self.path)
            if self.tls is not None and fresh.tls is None:
                raise WebConfigError(f"{self.path}: no tls_server_config: a reload never turns TLS off (restart fioscope for that)")
            if self.users and not fresh.users:
                raise WebConfigError(f"{self.path}: no basic_auth_users: a reload never turns basic auth off (restart fioscope for that)")
        except ConfigError as exc:
            log.error("%s (keeping the previous web config)", " ".join(line.strip() for line in str(exc).splitlines()))
            self.sources = {path: _mtime(path) for path in self.sources}  # logged once per change
            self.status.failures += 1
            self.status.last_successful = False
            return self
        log.info("%s: reloaded", self.path)
        fresh.keep_verified(self)
        fresh.status = self.status
        fresh.status.last_successful = True
        return fresh

    def cached_verdict(self, authorization: str | None) -> bool | None:
        """Whether an ``Authorization`` header lets the request in, where that costs no bcrypt; None where it does.

        True without users or for a (user, password) verified before; False for a malformed header
        (not ``Basic``, not base64 or UTF-8, no colon, a NUL) or a
        (user, password) that failed recently.
        """
        if not self.users:
            return True
        basic = _basic(authorization)
        if basic is None:
            return False
        credentials = _key(*basic)
        with self._lock:
            if credentials in self._verified:
                return True
            if credentials in self._failed:
                return False
        return None

    def authorized(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header lets the request in (always, without users); may cost a bcrypt."""
        verdict = self.cached_verdict(authorization)
        if verdict is not None:
            return verdict
        user, password = _basic(authorization) or ("", "")
        credentials = _key(user, password)
        hashed = self.users.get(user)
        ok = hmac.compare_digest(_bcrypt(password, hashed or _DUMMY_HASH), hashed or "-") and hashed is not None
        with self._lock:
            remembered = self._verified if ok else self._failed
            if len(remembered) >= MAX_REMEMBERED:  # bounded: random wrong passwords cannot grow it
                remembered.clear()
            remembered.add(credentials)
        return ok

    def keep_verified(self, previous: WebConfig) -> None:
        """Logins verified under ``previous`` stay verified where the user's hash did not change (no bcrypt after a reload)."""
        with previous._lock:
            kept = {c for c in previous._verified if self.users.get(c[0]) == previous.users.get(c[0])}
        with self._lock:
            self._verified |= kept


# verified and failed (user, sha256(password)) pairs remembered, each
MAX_REMEMBERED = 4096


def _basic(authorization: str | None) -> tuple[str, str] | None:
    """(user, password) of a well-formed ``Basic`` header: base64 of UTF-8 ``user:password``, no NUL."""
    scheme, _, encoded = (authorization or "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if sep != ":" or "\x00" in user + password:  # no colon: no password at all; a NUL ends a C string (bcrypt)
        return None
    return user, password


def _key(user: str, password: str) -> tuple[str, bytes]:
    """What a login is remembered by: the user and a sha256 of the password (never the password itself)."""
    return user, hashlib.sha256(password.encode()).digest()


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return -1


def _mapping(value, where: str) -> dict:
    return mapping(value, where, WebConfigError)


def _only(data: dict, allowed: set[str], where: str) -> None:
    for key in data:
        if key in _UNSUPPORTED:
            raise WebConfigError(f"{where}.{key}: {_UNSUPPORTED[key]} are not supported by fioscope; remove it")
        if key not in allowed:
            raise WebConfigError(f"{where}: unknown key {key!r} (allowed: {', '.join(sorted(allowed))})")


def load_web_config(path: str | Path) -> WebConfig:
    path = Path(path)
    src = str(path)
    raw = read_yaml(path, WebConfigError)
    if raw is None:  # empty, blank, comments only or `null`: securing nothing is never what a given file means
        raise WebConfigError(f"{src}: empty: give tls_server_config and/or basic_auth_users")
    data = _mapping(raw, src)
    _only(data, {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"}, src)
    if data.get("rate_limit"):
        raise WebConfigError(f"{src}: rate_limit is not supported by fioscope; remove it")
    config = WebConfig(path=path)
    base = path.resolve().parent
    config.sources[path] = _mtime(path)
    tls_files = _mapping(data.get("tls_server_config"), f"{src}: tls_server_config")
    for key in ("cert_file", "key_file", "client_ca_file"):
        if tls_files.get(key):
            config.sources[base / str(tls_files[key])] = _mtime(base / str(tls_files[key]))
    if data.get("tls_server_config") is not None:
        config.tls = _tls_context(_mapping(data["tls_server_config"], f"{src}: tls_server_config"), base, f"{src}: tls_server_config")
    http = _mapping(data.get("http_server_config"), f"{src}: http_server_config")
    _only(http, {"http2", "headers"}, f"{src}: http_server_config")
    for name, value in _mapping(http.get("headers"), f"{src}: http_server_config.headers").items():
        if name not in _HEADERS:
            raise WebConfigError(f"{src}: http_server_config.headers: {name!r} is not one of {', '.join(sorted(_HEADERS))}")
        if value:
            config.headers.append((name, str(value)))
    for user, hashed in _mapping(data.get("basic_auth_users"), f"{src}: basic_auth_users").items():
        if not isinstance(hashed, str) or not hashed.startswith(_BCRYPT_PREFIXES) or not _bcrypt("", hashed).startswith("$2"):
            raise WebConfigError(f"{src}: basic_auth_users.{user}: not a bcrypt hash ($2y$...)")
        config.users[str(user)] = hashed
    if config.tls is None and not config.users:
        raise WebConfigError(f"{src}: secures nothing: give tls_server_config and/or basic_auth_users")
    return config


def _tls_context(tls: dict, base: Path, where: str) -> ssl.SSLContext:
    _only(tls, {"cert", "key", "cert_file", "key_file", "client_ca", "client_ca_file", "client_auth_type", "min_version",
                "max_version", "prefer_server_cipher_suites"}, where)

    def source(inline: str, file_key: str) -> str | None:
        if tls.get(inline) and tls.get(file_key):
            raise WebConfigError(f"{where}: give {inline} or {file_key}, not both")
        return tls.get(inline) or None

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert, key = source("cert", "cert_file"), source("key", "key_file")
    if not (cert or tls.get("cert_file")) or not (key or tls.get("key_file")):
        raise WebConfigError(f"{where}: a certificate (cert_file) and a key (key_file) are required")
    with tempfile.TemporaryDirectory() as scratch:  # ssl loads PEM from files only; inline PEM goes through 0600 files
        def pem(inline: str | None, file_key: str, name: str) -> str:
            if inline is None:
                return str(base / str(tls[file_key]))
            out = Path(scratch, name)
            out.touch(mode=0o600)
            out.write_text(inline)
            return str(out)

        try:
            context.load_cert_chain(pem(cert, "cert_file", "cert.pem"), pem(key, "key_file", "key.pem"))
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError(f"{where}: cannot load the certificate and key: {getattr(exc, 'strerror', None) or exc}") from None
        auth = str(tls.get("client_auth_type", "NoClientCert"))
        if auth not in _CLIENT_AUTH:
            raise WebConfigError(f"{where}.client_auth_type: {auth!r} is not supported (use one of {', '.join(_CLIENT_AUTH)})")
        context.verify_mode = _CLIENT_AUTH[auth]
        ca = source("client_ca", "client_ca_file")
        if context.verify_mode != ssl.CERT_NONE:
            if not (ca or tls.get("client_ca_file")):
                raise WebConfigError(f"{where}: client_auth_type {auth} needs client_ca_file")
            try:
                context.load_verify_locations(cafile=pem(ca, "client_ca_file", "ca.pem"))
            except (OSError, ssl.SSLError) as exc:
                raise WebConfigError(f"{where}: cannot load the client CA: {getattr(exc, 'strerror', None) or exc}") from None
    for key, attr, default in (("min_version", "minimum_version", "TLS12"), ("max_version", "maximum_version", "TLS13")):
        version = str(tls.get(key, default))
        if version not in _TLS_VERSIONS:
            raise WebConfigError(f"{where}.{key}: {version!r} is not one of {', '.join(_TLS_VERSIONS)}")
        setattr(context, attr, _TLS_VERSIONS[version])
    if tls.get("prefer_server_cipher_suites", True):
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    return context
