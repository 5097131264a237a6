"""How to reach the coordinator: the address, the user's token and the TLS CA,
resolved as the ``trainctl`` CLI resolves them (client/cli.h, Connection;
client/cli_common.cc, ResolveConnection), and the gRPC channel made from them
(client/auth_channel.cc).

First found wins:
  address  argument, $TRAINCTL_COORDINATOR, ``coordinator`` in the config
           file, "127.0.0.1:50051";
  token    argument, $TRAINCTL_AUTH_TOKEN, ``token`` in the config file;
           none by default ($TRAINCTL_TOKEN is a task's per-attempt
           rendezvous token and is never sent as a user's token);
  CA       argument, $TRAINCTL_TLS_CA, ``ca_cert`` in the config file;
           none: plaintext.
The config file is ``$XDG_CONFIG_HOME/trainctl/config`` (default
``~/.config/trainctl/config``): ``key = "value"`` lines, ``#`` comments, no
sections; the keys are coordinator, token and ca_cert.
"""

import os
import socket
import stat
import warnings
from typing import Dict, List, Optional, Tuple, Union

from trainctl.errors import InvalidArgument, Unavailable

DEFAULT_COORDINATOR = "127.0.0.1:50051"
CONFIG_KEYS = ("coordinator", "token", "ca_cert")


class Connection:
    """A resolved connection: ``address`` (str, "host:port" or a
    comma-separated list of a leader and its standbys), ``token`` (str, ""
    for none) and ``ca_pem`` (bytes, b"" for plaintext)."""

    def __init__(self, address: str, token: str = "", ca_pem: bytes = b""):
        self.address = address
        self.token = token
        self.ca_pem = ca_pem

    def __repr__(self) -> str:
        return "Connection(address=%r, token=%s, tls=%s)" % (
            self.address, "set" if self.token else "none", bool(self.ca_pem))


def config_path(environ=None) -> str:
    """The default config file path, or "" when neither $XDG_CONFIG_HOME nor
    $HOME is set."""
    env = os.environ if environ is None else environ
    if env.get("XDG_CONFIG_HOME"):
        return os.path.join(env["XDG_CONFIG_HOME"], "trainctl", "config")
    if env.get("HOME"):
        return os.path.join(env["HOME"], ".config", "trainctl", "config")
    return ""


def _unquote(path: str, key: str, raw: str) -> str:
    v = raw.strip()
    if v.startswith("["):
        raise InvalidArgument('%s: %s: expected one value, e.g. %s = "..."' % (path, key, key))
    if len(v) >= 2 and v[0] == v[-1] and v[0] in ("'", '"'):
        v = v[1:-1]
        if raw.strip()[0] == '"':
            v = v.replace('\\"', '"').replace("\\\\", "\\")
    return v


def read_config_file(path: str) -> Dict[str, str]:
    """Reads the ``key = "value"`` lines of the config file (the subset of
    TOML the CLI reads with CLI11).

    Raises InvalidArgument naming the file and the key for an unknown key, a
    section, a list value or a line that is not ``key = value``.
    """
    out: Dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = line.strip()
            if not text or text.startswith("#") or text.startswith(";"):
                continue
            if text.startswith("["):
                raise InvalidArgument(
                    '%s: unknown key "%s"; the keys are coordinator, token and ca_cert '
                    "(no sections)" % (path, text))
            key, sep, value = text.partition("=")
            key = key.strip()
            if not sep or not key:
                raise InvalidArgument('%s:%d: expected key = "value"' % (path, number))
            if key not in CONFIG_KEYS:
                raise InvalidArgument(
                    '%s: unknown key "%s"; the keys are coordinator, token and ca_cert '
                    "(no sections)" % (path, key))
            # A '#' after a closing quote (or after an unquoted value) starts
            # a comment.
            value = value.strip()
            if value[:1] in ("'", '"'):
                end = value.find(value[0], 1)
                while end > 0 and value[0] == '"' and value[end - 1] == "\\":
                    end = value.find('"', end + 1)
                if end > 0:
                    value = value[:end + 1]
            else:
                value = value.split("#", 1)[0]
            out[key] = _unquote(path, key, value)
    return out


def _is_loopback(address: str) -> bool:
    return (address.startswith("127.") or address.startswith("localhost:")
            or address.startswith("[::1]"))


def resolve(address: Optional[str] = None, token: Optional[str] = None,
            ca_cert: Union[str, bytes, None] = None, config_file: Optional[str] = None,
            environ=None) -> Connection:
    """Resolves a Connection from the arguments, the environment and the
    config file (module docstring). ``ca_cert`` is a path to a PEM file, or
    the PEM bytes themselves. ``config_file`` overrides the default path; an
    explicit file must exist.

    Warns (``warnings.warn``) about a token in a config file others can read,
    and about a token sent without TLS to a host that is not loopback.
    Raises InvalidArgument for a missing explicit config file, a bad config
    file, an unreadable CA file or a token gRPC cannot send.
    """
    env = os.environ if environ is None else environ
    path = config_file if config_file else config_path(env)
    config: Dict[str, str] = {}
    if path and os.path.isfile(path):
        config = read_config_file(path)
        mode = os.stat(path).st_mode
        if "token" in config and mode & (stat.S_IRGRP | stat.S_IROTH):
            warnings.warn("%s holds a token and others can read it; run chmod 600 %s"
                          % (path, path), stacklevel=3)
    elif config_file:
        raise InvalidArgument("config file %s: no such file" % config_file)

    def pick(arg, var, key):
        if arg:
            return arg
        if env.get(var):
            return env[var]
        return config.get(key, "")

    addr = pick(address, "TRAINCTL_COORDINATOR", "coordinator") or DEFAULT_COORDINATOR
    tok = pick(token, "TRAINCTL_AUTH_TOKEN", "token")
    if any(not (33 <= ord(c) <= 126) for c in tok):
        raise InvalidArgument("token: must be printable ASCII without spaces (check "
                              "token=, $TRAINCTL_AUTH_TOKEN and the config file)")
    ca = ca_cert if isinstance(ca_cert, (bytes, bytearray)) else pick(
        ca_cert, "TRAINCTL_TLS_CA", "ca_cert")
    ca_pem = b""
    if isinstance(ca, (bytes, bytearray)):
        ca_pem = bytes(ca)
        where = "ca_cert"
    elif ca:
        where = "ca_cert %s" % ca
        try:
            with open(ca, "rb") as f:
                ca_pem = f.read()
        except OSError:
            ca_pem = b""
    if ca and b"-----BEGIN " not in ca_pem:
        raise InvalidArgument("%s: cannot read a PEM certificate there" % where)
    if tok and not ca_pem and not _is_loopback(addr):
        warnings.warn("sending the token to %s without TLS; pass ca_cert= (or set "
                      "TRAINCTL_TLS_CA, or ca_cert in the config file)" % addr, stacklevel=3)
    return Connection(addr, tok, ca_pem)


def _split_host_port(entry: str) -> Tuple[str, str]:
    host, sep, port = entry.rpartition(":")
    if not sep or not port:
        raise InvalidArgument('coordinator address "%s": expected host:port' % entry)
    if not port.isdigit() or not 0 < int(port) <= 65535:
        raise InvalidArgument('coordinator address "%s": port must be 1..65535' % entry)
    if host.startswith("["):
        if not host.endswith("]"):
            raise InvalidArgument('coordinator address "%s": unbalanced [ in IPv6 address'
                                  % entry)
        host = host[1:-1]
    if not host:
        raise InvalidArgument('coordinator address "%s": empty host' % entry)
    return host, port


def grpc_target(addresses: str) -> str:
    """The gRPC target of an address list, as common/grpc_target.h
    GrpcTargetFor: one "host:port" unchanged; several ("head-a:50051,
    head-b:50051", a leader and its standbys) resolved now into one static
    list "ipv4:10.0.0.1:50051,10.0.0.2:50051" that gRPC's pick_first tries
    in order. Raises InvalidArgument for a malformed list, Unavailable for a
    name that does not resolve."""
    entries = [e.strip() for e in addresses.split(",") if e.strip()]
    if not entries:
        raise InvalidArgument("coordinator address list is empty")
    if "," not in addresses:
        _split_host_port(entries[0])
        return entries[0]
    v4: List[str] = []
    v6: List[str] = []
    for entry in entries:
        host, port = _split_host_port(entry)
        try:
            info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            raise Unavailable('coordinator address "%s": cannot resolve: %s' % (entry, e))
        family, _, _, _, sockaddr = info[0]
        if family == socket.AF_INET:
            v4.append("%s:%s" % (sockaddr[0], port))
        else:
            v6.append("[%s]:%s" % (sockaddr[0], port))
    if v4 and v6:
        raise InvalidArgument("coordinator addresses mix IPv4 and IPv6; give all of one family")
    return "ipv4:" + ",".join(v4) if v4 else "ipv6:" + ",".join(v6)


def first_host(addresses: str) -> str:
    """The host of the first entry ("head-a" of "head-a:50051,head-b:50051"):
    with TLS over a list, the name every coordinator's certificate is checked
    against."""
    entries = [e.strip() for e in addresses.split(",") if e.strip()]
    try:
        return _split_host_port(entries[0])[0] if entries else ""
    except InvalidArgument:
        return ""


def make_channel(connection: Connection):
    """A ``grpc.Channel`` to the coordinator: server TLS verified against
    ``connection.ca_pem`` when set, else plaintext. (The bearer token is sent
    per call as ``authorization`` metadata by the Client, so it also goes over
    plaintext loopback, where gRPC drops call credentials.)"""
    import grpc

    target = grpc_target(connection.address)
    options = []
    if connection.ca_pem:
        if "," in connection.address:
            options.append(("grpc.ssl_target_name_override", first_host(connection.address)))
        return grpc.secure_channel(
            target, grpc.ssl_channel_credentials(root_certificates=connection.ca_pem), options)
    return grpc.insecure_channel(target, options)
