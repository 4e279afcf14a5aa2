#!/usr/bin/env python3
"""Fail on an import cycle between the top-level modules of a crate.

Scans the crate's sources for every reference to `crate::<module>` — `use` declarations,
grouped `use crate::{a::X, b}` and paths written inline in function bodies alike — and folds
every module into its top-level module (`kubelet::kuberuntime::manager::image` counts as
`kuberuntime`), as a Go package holds its files: a folder may use itself freely, but the
folders and files at the crate's top must form a DAG, so that imports only point down. The
binary's `main.rs` and `bin/` are the top and not scanned. Prints each cycle with the files that
close it and exits 1; prints the layers (longest path from the bottom) otherwise.

usage: module_cycles.py CRATE SRC_DIR
"""

import re
import sys
from collections import defaultdict

import os

PATH = re.compile(r"\bcrate::(\w+)")
GROUP = re.compile(r"\bcrate::\{")
COMMENT = re.compile(r"//.*?$|/\*.*?\*/", re.S | re.M)


def module_of(rel: str) -> str:
    """The top-level module a source file belongs to (`a.rs`, `a/mod.rs`, `a/b/c.rs` -> `a`)."""
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def references(text: str) -> set[str]:
    """The top-level modules `text` names through `crate::`."""
    text = COMMENT.sub("", text)
    found = set(PATH.findall(text))
    for m in GROUP.finditer(text):
        depth, i, start = 1, m.end(), m.end()
        names = []
        while i < len(text) and depth:
            c = text[i]
            if c == "{":
                if depth == 1:
                    names.append(text[start:i])
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 1:
                    start = i + 1
                elif depth == 0:
                    names.append(text[start:i])
            elif c == "," and depth == 1:
                names.append(text[start:i])
                start = i + 1
            i += 1
        for n in names:
            head = re.match(r"\s*(\w+)", n)
            if head and head.group(1) != "self":
                found.add(head.group(1))
    return found


def shortest_cycle(graph: dict[str, set[str]], members: set[str]) -> list[str]:
    """The shortest cycle inside one strongly connected component."""
    best: list[str] = []
    for start in sorted(members):
        prev = {start: ""}
        queue = [start]
        found = None
        while queue and found is None:
            nxt = []
            for v in queue:
                for w in sorted(graph[v] & members):
                    if w == start:
                        found = v
                        break
                    if w not in prev:
                        prev[w] = v
                        nxt.append(w)
                if found is not None:
                    break
            queue = nxt
        if found is None:
            continue
        path = [found]
        while path[-1] != start:
            path.append(prev[path[-1]])
        path = list(reversed(path)) + [start]
        if not best or len(path) < len(best):
            best = path
    return best


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    crate, src = sys.argv[1], sys.argv[2]
    graph: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], list[str]] = defaultdict(list)
    nodes: set[str] = set()
    for root, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)
            if rel in ("main.rs", "lib.rs") or rel.startswith("bin" + os.sep):
                continue
            a = module_of(rel)
            nodes.add(a)
            with open(path, encoding="utf-8") as fh:
                for b in references(fh.read()):
                    nodes.add(b)
                    if a != b:
                        graph[a].add(b)
                        why[(a, b)].append(rel)
    if not nodes:
        print(f"module_cycles: no Rust sources under {src}", file=sys.stderr)
        return 2
    # Only the crate's own modules count (not macros such as `crate::ensure!` or re-exported
    # crates such as `crate::duration`).
    modules = {module_of(os.path.relpath(os.path.join(src, e), src)) for e in os.listdir(src)}
    nodes &= modules
    graph = defaultdict(set, {a: bs & modules for a, bs in graph.items() if a in modules})

    # Tarjan's strongly connected components.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    sccs: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)

    cycles = [sorted(c) for c in sccs if len(c) > 1]
    if cycles:
        for comp in cycles:
            members = set(comp)
            print(f"{crate}: import cycle among {len(comp)} modules: {', '.join(comp)}")
            print(f"  shortest: {' -> '.join(shortest_cycle(graph, members))}")
            for a in comp:
                for b in sorted(graph[a] & members):
                    print(f"    {a} -> {b}   (in {', '.join(sorted(set(why[(a, b)]))[:3])})")
        return 1

    # Layers: 0 for modules that use nothing, else 1 + the highest layer used.
    layer: dict[str, int] = {}

    def depth(v: str) -> int:
        if v not in layer:
            layer[v] = 1 + max((depth(w) for w in graph[v]), default=-1)
        return layer[v]

    for v in nodes:
        depth(v)
    print(f"{crate}: {len(nodes)} top-level modules, no import cycle")
    for n in range(max(layer.values()) + 1):
        print(f"  layer {n}: {' '.join(sorted(v for v in nodes if layer[v] == n))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
