#!/usr/bin/env python3
"""Where dockershim's CRI calls spend their time, from its own log at `--log-level trace`.

At trace level the standalone `dockershim` logs the end of three kinds of spans with their time
(`close time.busy=… time.idle=…`): `cri{method=…}` for each CRI call, and inside it
`docker{op=…}` for each Docker Engine call and `cni{plugin=… command=…}` for each CNI plugin
run. This script adds them up per CRI method: calls, mean wall time of the call, and the mean
time per call spent in each kind of Docker call and plugin run. What is left ("shim") is
dockershim's own work plus waiting that is neither (gRPC, files, locks). Work done side by side
inside one call (StopPodSandbox's CNI DEL and pause stop) counts for each, so the parts can add
up to more than the whole there.

    dockershim --log-level trace ... 2> shim.log
    hack/span-times.py shim.log
"""

import re
import sys
from collections import defaultdict

UNITS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}
CLOSE = re.compile(r"\bclose time\.busy=([\d.]+)(ns|µs|us|ms|s) time\.idle=([\d.]+)(ns|µs|us|ms|s)")
CRI = re.compile(r"\bcri\{method=(\w+)\}")
DOCKER = re.compile(r'\bdocker\{op="?(\w+)"?')
CNI = re.compile(r'\bcni\{plugin=([\w.-]+) command="?(\w+)"?')


def millis(value, unit):
    return float(value) * UNITS[unit]


def main(path):
    calls = defaultdict(lambda: [0, 0.0])  # method -> [count, total ms]
    parts = defaultdict(lambda: defaultdict(float))  # method -> part -> total ms
    with open(path, encoding="utf-8", errors="replace") as log:
        for line in log:
            m = CLOSE.search(line)
            c = CRI.search(line)
            if not m or not c:
                continue
            wall = millis(m.group(1), m.group(2)) + millis(m.group(3), m.group(4))
            # The span that closed is the last one named before the message.
            head = line[: m.start()]
            d = DOCKER.search(head)
            n = CNI.search(head)
            method = c.group(1)
            if n:
                parts[method]["cni " + n.group(1) + " " + n.group(2)] += wall
            elif d:
                parts[method]["docker " + d.group(1)] += wall
            else:
                calls[method][0] += 1
                calls[method][1] += wall
    print("| CRI call | calls | mean ms | part | mean ms per call |")
    print("|---|---:|---:|---|---:|")
    for method in sorted(calls, key=lambda k: -calls[k][1] / calls[k][0]):
        count, total = calls[method]
        mean = total / count
        rows = sorted(parts[method].items(), key=lambda kv: -kv[1])
        known = sum(v for _, v in rows) / count
        print(f"| {method} | {count} | {mean:.2f} | | |")
        for part, t in rows:
            print(f"| | | | {part} | {t / count:.2f} |")
        print(f"| | | | shim (the rest) | {mean - known:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: span-times.py DOCKERSHIM_TRACE_LOG")
    main(sys.argv[1])
