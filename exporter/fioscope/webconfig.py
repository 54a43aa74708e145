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
a restart: a reload thread looks at it once a second (inode, size, mtime and ctime: a file
rewritten with its old mtime, ``cp -p`` or ``rsync -a``, is a change) and reads, validates and
bcrypt-checks it there, never on the server's I/O thread, so a costly file (a cost-16 bcrypt
user, a hostile YAML) never stalls a connection. Every value's type is checked (``cert: [1]``,
a ``!!binary`` key, a mapping where text belongs are schema errors), and the one YAML loader
refuses anchors and aliases and deep nesting. It never fails
open: a file that secures nothing (empty, comments only, ``null``) is refused, at start and on
reload; on reload a file that no longer loads (broken, truncated, schema-invalid, unreadable)
or that would turn TLS or basic auth off (or fails in any way at all) is logged in one line naming it, counted
(``fioscope_web_config_reload_failures_total``, ``fioscope_web_config_last_reload_successful``)
and the previous settings stay. Turning TLS or basic auth off takes a restart.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import logging
import re
import ssl
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt

from .config import ConfigError, mapping, read_yaml
from .resultfile import printable

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
# $2a$/$2b$/$2y$, a two-digit cost, 22 characters of salt and 31 of hash in bcrypt's base64
_BCRYPT = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")
# htpasswd -B's ceiling; a higher cost makes every new login take minutes of the auth thread
MAX_BCRYPT_COST = 17


@functools.lru_cache(maxsize=8)
def _dummy_hash(cost: int) -> str:
    """A hash compared against when the user is unknown, of the users' own cost: an unknown user costs as
    much as a wrong password (a cheaper dummy would tell real users from unknown ones by timing)."""
    return bcrypt.hashpw(b"-", bcrypt.gensalt(cost)).decode()


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
    # the files it was read from, with their signatures: a change reloads it
    sources: dict[Path, tuple[int, ...]] = field(default_factory=dict)
    status: ReloadStatus = field(default_factory=ReloadStatus)
    dummy_hash: str = ""  # see _dummy_hash
    _verified: set[tuple[str, bytes]] = field(default_factory=set)
    _failed: set[tuple[str, bytes]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def changed(self) -> bool:
        return any(_signature(path) != signature for path, signature in self.sources.items())

    def reloaded(self) -> WebConfig:
        """This config, or the file's new content if it (or a file it names) changed and loads. Never raises:
        whatever the file holds, a failed reload is one log line and the previous settings."""
        if not self.changed():
            return self
        sources = {path: _signature(path) for path in self.sources}  # taken before reading: a change while read is seen next time
        try:
            fresh = load_web_config(self.path)
            if self.tls is not None and fresh.tls is None:
                raise WebConfigError(f"{self.path}: no tls_server_config: a reload never turns TLS off (restart fioscope for that)")
            if self.users and not fresh.users:
                raise WebConfigError(f"{self.path}: no basic_auth_users: a reload never turns basic auth off (restart fioscope for that)")
        except Exception as exc:  # noqa: BLE001 - ConfigError, or anything a hostile file provokes (RecursionError, MemoryError ...)
            reason = str(exc) if isinstance(exc, ConfigError) else f"{self.path}: cannot load: {type(exc).__name__}: {exc}"
            log.error("%s (keeping the previous web config)", printable(" ".join(line.strip() for line in reason.splitlines()))[:500])
            self.sources = sources  # logged once per change
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
        ok = hmac.compare_digest(_bcrypt(password, hashed or self.dummy_hash), hashed or "-") and hashed is not None
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


def _signature(path: Path) -> tuple[int, ...]:
    """What tells a changed file: inode (renamed over: rsync -a), size, mtime and ctime (rewritten in place with
    its old mtime restored: cp -p; ctime cannot be set back)."""
    try:
        st = path.stat()
    except OSError:
        return (-1,)
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _text(data: dict, key: str, where: str) -> str | None:
    """A text option: None where absent or empty, ``WebConfigError`` for a list, a mapping, a number, bytes ..."""
    value = data.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise WebConfigError(f"{where}.{key}: expected text, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise WebConfigError(f"{where}.{key}: contains a lone surrogate") from None
    return value


def _flag(data: dict, key: str, where: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise WebConfigError(f"{where}.{key}: expected true or false, got {type(value).__name__}")
    return value


def _mapping(value, where: str) -> dict:
    return mapping(value, where, WebConfigError)


def _only(data: dict, allowed: set[str], where: str) -> None:
    for key in data:
        if key in _UNSUPPORTED:
            raise WebConfigError(f"{where}.{key}: {_UNSUPPORTED[key]} are not supported by fioscope; remove it")
        if key not in allowed:
            raise WebConfigError(f"{where}: unknown key {key!r} (allowed: {', '.join(sorted(allowed))})")


def load_web_config(path: str | Path) -> WebConfig:
    """The file's settings; ``WebConfigError`` (one line naming the file) for anything wrong with it."""
    try:
        return _load_web_config(Path(path))
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever a hostile file provokes is a refusal naming it, never a traceback
        raise WebConfigError(f"{path}: cannot load: {type(exc).__name__}: {exc}") from None


def _load_web_config(path: Path) -> WebConfig:
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
    config.sources[path] = _signature(path)
    tls_files = _mapping(data.get("tls_server_config"), f"{src}: tls_server_config")
    for key in ("cert_file", "key_file", "client_ca_file"):
        name = _text(tls_files, key, f"{src}: tls_server_config")
        if name:
            config.sources[base / name] = _signature(base / name)
    if data.get("tls_server_config") is not None:
        config.tls = _tls_context(tls_files, base, f"{src}: tls_server_config")
    http = _mapping(data.get("http_server_config"), f"{src}: http_server_config")
    _only(http, {"http2", "headers"}, f"{src}: http_server_config")
    _flag(http, "http2", f"{src}: http_server_config", True)
    for name, value in _mapping(http.get("headers"), f"{src}: http_server_config.headers").items():
        if name not in _HEADERS:
            raise WebConfigError(f"{src}: http_server_config.headers: {name!r} is not one of {', '.join(sorted(_HEADERS))}")
        text = _text({name: value}, name, f"{src}: http_server_config.headers")
        if text and not text.isprintable():  # a CR/LF would split the response (header injection)
            raise WebConfigError(f"{src}: http_server_config.headers.{name}: control characters are not allowed")
        if text:
            config.headers.append((name, text))
    for user, hashed in _mapping(data.get("basic_auth_users"), f"{src}: basic_auth_users").items():
        if not isinstance(user, (str, int)) or isinstance(user, bool) or not str(user).isprintable() or ":" in str(user):
            raise WebConfigError(f"{src}: basic_auth_users: {ascii(user)[:60]} is not a user name (text without ':' or controls)")
        match = _BCRYPT.fullmatch(hashed) if isinstance(hashed, str) else None
        if match is None:
            raise WebConfigError(f"{src}: basic_auth_users.{user}: not a bcrypt hash ($2y$...)")
        if not 4 <= int(match.group(1)) <= MAX_BCRYPT_COST:
            raise WebConfigError(f"{src}: basic_auth_users.{user}: bcrypt cost {int(match.group(1))} is outside 4 to {MAX_BCRYPT_COST}")
        config.users[str(user)] = hashed
    if config.tls is None and not config.users:
        raise WebConfigError(f"{src}: secures nothing: give tls_server_config and/or basic_auth_users")
    if config.users:
        config.dummy_hash = _dummy_hash(max(int(h[4:6]) for h in config.users.values()))
    return config


def _tls_context(tls: dict, base: Path, where: str) -> ssl.SSLContext:
    _only(tls, {"cert", "key", "cert_file", "key_file", "client_ca", "client_ca_file", "client_auth_type", "min_version",
                "max_version", "prefer_server_cipher_suites"}, where)

    for option in ("cert", "key", "cert_file", "key_file", "client_ca", "client_ca_file", "client_auth_type", "min_version", "max_version"):
        _text(tls, option, where)  # every one is text: cert: [1], key: {a: b}, a !!binary key are refused here
    prefer = _flag(tls, "prefer_server_cipher_suites", where, True)

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
        except (OSError, ssl.SSLError, ValueError) as exc:  # ValueError: a NUL in a path
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
            except (OSError, ssl.SSLError, ValueError) as exc:
                raise WebConfigError(f"{where}: cannot load the client CA: {getattr(exc, 'strerror', None) or exc}") from None
    for key, attr, default in (("min_version", "minimum_version", "TLS12"), ("max_version", "maximum_version", "TLS13")):
        version = str(tls.get(key, default))
        if version not in _TLS_VERSIONS:
            raise WebConfigError(f"{where}.{key}: {version!r} is not one of {', '.join(_TLS_VERSIONS)}")
        setattr(context, attr, _TLS_VERSIONS[version])
    if prefer:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    return context
