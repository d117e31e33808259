"""The house's measures, from the import graph (issue 26): repeat them on any checkout.

    python infra/import_graph.py [--shared DIR] [--package sluice]

Prints one JSON line: the package's modules, its import cycles (strongly connected groups of
modules, imports inside functions and under TYPE_CHECKING included, as grimp reads them), and
the number of imports. ``lint-imports`` checks the contracts themselves (pyproject.toml).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import grimp


def cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(root: str) -> None:  # iterative: deep graphs overflow Python's recursion
        nonlocal counter
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & modules)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child) & modules))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[1] / "shared")
    parser.add_argument("--package", default="sluice")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.shared))
    graph = grimp.build_graph(args.package, cache_dir=None)
    modules = set(graph.modules)
    imports = sum(len(graph.find_modules_directly_imported_by(m) & modules) for m in modules)
    found = cycles(graph, modules)
    print(json.dumps({"package": args.package, "modules": len(modules), "imports": imports,
                      "cycles": len(found), "modules_in_cycles": sum(len(c) for c in found),
                      "cycle_members": found}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
