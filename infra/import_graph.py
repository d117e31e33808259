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
    """The import cycles: strongly connected groups of more than one module (Tarjan's algorithm)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & modules) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:  # a package's graph is a few hundred modules: recursion is fine
        index[node] = low[node] = len(index)
        stack.append(node)
        for child in edges[node]:
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            group = stack[stack.index(node):]
            del stack[stack.index(node):]
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
