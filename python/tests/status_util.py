"""What the python tests read from salusd's status text."""
import re

_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}


def persistent_bytes(client, name):
    """Session `name`'s persistent bytes as salusd's status counts them, or
    None when no session of that name is listed."""
    for line in client.status().splitlines():
        m = re.match(rf"\s*\d+ {name}\s+\d+\s+-?\d+\s+[\d.]+\s+([\d.]+) (\w+)", line)
        if m:
            return float(m.group(1)) * _UNITS[m.group(2)]
    return None
