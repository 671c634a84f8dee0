"""Imports point one way. The layers contract (``make lint``, import-linter) forbids imports
against the layers; this test forbids cycles inside a layer too, so no module needs a
function-local import to load."""

from __future__ import annotations

import grimp

PACKAGES = ("resonate_project", "promises", "tasks_app", "schedules", "outbox")


def import_cycles() -> list[list[str]]:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)
    modules = sorted(m for m in graph.modules if ".migrations" not in m)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & set(modules)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for m in modules:
        if m not in index:
            visit(m)
    return cycles


def test_no_module_imports_itself_through_others() -> None:
    assert import_cycles() == []
