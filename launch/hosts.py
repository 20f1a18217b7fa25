"""Host names from -H / --hostfile, checked before any of them reaches a command line.

A host name ends up as an argument of ``ssh`` (relaxrun's --start-timeout check, and Open MPI's
own launcher, which runs ``ssh <host> orted ...``). A name that starts with ``-`` is read by ssh
as an option (``-oProxyCommand=...`` runs a local command), and a hostfile may come from
elsewhere (a scheduler, a shared directory). So every host is checked here, once, for all of
them: an RFC 1123 host name or an IPv4 / IPv6 literal, nothing else.
"""

from __future__ import annotations

import ipaddress
import re

# Used with fullmatch: `$` would also match before a trailing newline ("node1\n").
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
# Open MPI hostfile attributes after the host ("slots=4", "max_slots=8", "max-slots=8").
_ATTRIBUTE = re.compile(r"[A-Za-z_-]+=[0-9]+")


class HostError(ValueError):
    """A host entry that is not a plain host name or address (the message names it)."""


def check_host(name: str, where: str) -> str:
    """Returns ``name`` if it is an RFC 1123 host name or an IPv4 / IPv6 literal; raises
    HostError naming the entry and ``where`` it came from otherwise."""
    try:
        scope = ipaddress.ip_address(name)
        # an IPv6 scope ("fe80::1%eth0") is free text to the ipaddress module: an interface name only
        if re.fullmatch(r"[A-Za-z0-9_.]*", getattr(scope, "scope_id", None) or ""):
            return name
    except ValueError:
        pass
    plain = name[:-1] if name.endswith(".") else name
    if plain and len(plain) <= 253 and all(_LABEL.fullmatch(label) for label in plain.split(".")):
        return name
    raise HostError(f"{where}: {name!r} is not a host name or IP address (host names are letters, digits, "
                    "'-' and '.', and may not start with '-')")


def _split_entry(entry: str) -> tuple[str, str | None]:
    """``host[:slots]`` -> (host, slots); ``[v6]:slots`` and a bare IPv6 literal too."""
    if entry.startswith("["):
        host, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return entry, None
        return host, rest[1:] if rest else None
    if entry.count(":") > 1:
        return entry, None  # an IPv6 literal without slots
    host, colon, slots = entry.partition(":")
    return host, slots if colon else None


def hosts_option(text: str) -> list[str]:
    """The host names of a -H / --hosts value (``node1:2,node2:2``), each checked; raises
    HostError naming the first bad entry (a bad slot count too)."""
    names = []
    for entry in text.split(","):
        if not entry:
            continue
        host, slots = _split_entry(entry)
        check_host(host, f"-H/--hosts entry {entry!r}")
        if slots is not None and not slots.isdigit():
            raise HostError(f"-H/--hosts entry {entry!r}: the slot count {slots!r} is not a number")
        names.append(host)
    if not names:
        raise HostError(f"-H/--hosts {text!r} names no host")
    return names


def hostfile_hosts(path: str) -> list[str]:
    """The host names of an Open MPI hostfile (``host [slots=N] [max_slots=M]`` per line, ``#``
    comments), each checked; raises HostError naming the file, line and entry, or OSError."""
    names = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            where = f"hostfile {path} line {number}"
            names.append(check_host(words[0], where))
            for word in words[1:]:
                if not _ATTRIBUTE.fullmatch(word):
                    raise HostError(f"{where}: {word!r} is not a 'name=number' attribute (e.g. slots=4)")
    if not names:
        raise HostError(f"hostfile {path} names no host")
    return names
