#!/usr/bin/env python3
"""Which code and data of a running binary are resident, by crate and by ELF section.

A Rust binary's file-backed RSS is mostly its own pages: the kernel maps the file's pages in
as they are executed or read, and with them up to 64 KiB around each (fault-around), and they
stay. This script reads `/proc/<pid>/pagemap` for every mapping of the process's executable,
attributes each resident page to the symbol at the middle of the page (`nm -C`, so crate names
are approximate: a generic function counts for the crate that defines it, and a page shared by
several functions counts once, for one of them), and prints per crate and per non-code section
how many KiB are resident of how many mapped. Pages of `.data.rel.ro` and `.got` are written
by the loader's relocations, so they are anonymous memory, not file-backed.

    hack/rss-by-crate.py <pid>                # the table
    hack/rss-by-crate.py <pid> serde_saphyr   # and that crate's resident functions

Needs root (pagemap), `nm` and `readelf` (binutils).
"""

import bisect
import collections
import os
import re
import struct
import subprocess
import sys


def run(*args):
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def crate_of(name):
    """The first path segment of a demangled name (`<tokio::…>::poll` → `tokio`)."""
    n = re.sub(r"^[<&*( ]+", "", name)
    n = re.sub(r"^(dyn |impl |mut |const )+", "", n)
    m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", n)
    return m.group(0) if m else "?"


def main():
    pid = int(sys.argv[1])
    detail_crate = sys.argv[2] if len(sys.argv) > 2 else None
    exe = os.readlink(f"/proc/{pid}/exe")

    mappings = []  # (start, end, file offset, permissions)
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            f = line.split()
            if len(f) >= 6 and f[5] == exe:
                lo, hi = (int(x, 16) for x in f[0].split("-"))
                mappings.append((lo, hi, int(f[2], 16), f[1]))

    loads = []  # (file offset, virtual address, file size) of the LOAD segments
    for line in run("readelf", "-lW", exe).splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            loads.append((int(f[1], 16), int(f[2], 16), int(f[4], 16)))

    sections = []  # (name, address, size) of the allocated sections
    for line in run("readelf", "-SW", exe).splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", line)
        if m and int(m.group(2), 16):
            sections.append((m.group(1), int(m.group(2), 16), int(m.group(3), 16)))

    symbols = []  # (address, name) of the code symbols
    for line in run("nm", "-C", "--defined-only", exe).splitlines():
        f = line.split(" ", 2)
        if len(f) == 3 and f[1] in "tTwW":
            symbols.append((int(f[0], 16), f[2]))
    symbols.sort()
    addresses = [s[0] for s in symbols]

    resident = collections.Counter()
    mapped = collections.Counter()
    functions = collections.Counter()
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for lo, hi, offset, perms in mappings:
            for page in range(lo, hi, 4096):
                pagemap.seek(page // 4096 * 8)
                present = struct.unpack("<Q", pagemap.read(8))[0] >> 63
                file_offset = page - lo + offset
                address = next(
                    (file_offset - o + v for o, v, size in loads if o <= file_offset < o + size),
                    None,
                )
                if address is None:
                    key = f"({perms} beyond the file)"
                elif "x" in perms:
                    i = bisect.bisect_right(addresses, address + 2048) - 1
                    key = crate_of(symbols[i][1]) if i >= 0 else "?"
                    if present and key == detail_crate:
                        functions[symbols[i][1][:150]] += 1
                else:
                    key = next(
                        (f"section {n}" for n, a, s in sections if a <= address < a + s),
                        f"({perms} between sections)",
                    )
                mapped[key] += 1
                resident[key] += present

    print(f"{'crate or section':40} {'resident KiB':>12} {'mapped KiB':>10}")
    for key, pages in resident.most_common():
        if pages:
            print(f"{key:40} {pages * 4:12} {mapped[key] * 4:10}")
    print(f"{'total':40} {sum(resident.values()) * 4:12} {sum(mapped.values()) * 4:10}")
    if detail_crate:
        print(f"\nresident functions of {detail_crate} (KiB):")
        for name, pages in functions.most_common(40):
            print(f"{pages * 4:6} {name}")


if __name__ == "__main__":
    main()
