"""Random (version 4) UUIDs in bulk.

A pipeline of a thousand tasks needs a thousand ids; `uuid.uuid4()` reads the system's random
source once per id (a system call that also hands the interpreter lock to another thread).
`uuid4_strings(n)` reads it once for all of them and formats the same canonical strings.
"""

from __future__ import annotations

import os


def uuid4_strings(n: int) -> list[str]:
    """`n` random version-4 UUIDs in canonical form (`str(uuid.uuid4())`)."""
    raw = bytearray(os.urandom(16 * n))
    out = []
    for i in range(0, 16 * n, 16):
        raw[i + 6] = (raw[i + 6] & 0x0F) | 0x40  # version 4
        raw[i + 8] = (raw[i + 8] & 0x3F) | 0x80  # RFC 4122 variant
        h = raw[i : i + 16].hex()
        out.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    return out
