"""The layout's rules, checked on the source: station order, no import cycles, few deferred imports, clean words.

Module-level imports are read from the syntax tree of every module of the three
import packages.  ``from X import name`` counts as an import of ``X.name`` when
that is a module, else of ``X``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("leakattack", "targets", "defenses")

#: the stations in flow order; a module may import only its own station or earlier ones
STATIONS = [
    ["leakattack.errors", "leakattack.registry", "leakattack.seeds", "leakattack.sketch", "leakattack.constraints",
     "leakattack.progress", "leakattack.jsonable", "leakattack.rebuilt", "leakattack.plugins",
     "leakattack.torchfile"],  # leaves
    ["defenses"],
    ["leakattack.data"],
    ["targets"],
    ["leakattack.channel"],
    ["leakattack.observation"],
    ["leakattack.attacks"],
    ["leakattack.metrics"],
    ["leakattack.results"],
    ["leakattack.figures"],
    ["leakattack.config"],
    ["leakattack.training"],
    ["leakattack.cases", "leakattack.utility"],
    ["leakattack.experiment"],
    ["leakattack.sweep"],
    ["leakattack.theory"],
    ["leakattack.cli", "leakattack.__main__", "leakattack.script"],  # the command line, `python -m leakattack`,
    # and the entry point of the repository's scripts and benchmarks
    ["leakattack.integrations"],  # optional framework integrations: nothing of the core imports them
]
#: the package root holds only the version and lazy re-exports of the entry points
ROOT_MODULE = "leakattack"


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(module: str, path: Path, node: ast.ImportFrom | ast.Import) -> list[str]:
    """Our modules an import statement names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".")
            if path.name != "__init__.py":
                base = base[:-1]
            base = base[: len(base) - node.level + 1]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in MODULES else prefix for a in node.names]
    return [n for n in names if n.split(".")[0] in PACKAGES and n in MODULES]


def _imports(deferred: bool) -> dict[str, set[str]]:
    """Module -> our modules it imports at module level (or, with ``deferred``, inside functions)."""
    out = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        found = set()
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            inside = any(isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)) for p in _parents(tree, node))
            if inside == deferred:
                found.update(_resolve(module, path, node))
        out[module] = found - {module}
    return out


def _parents(tree, target):
    stack = [(tree, [])]
    while stack:
        node, chain = stack.pop()
        if node is target:
            return chain
        for child in ast.iter_child_nodes(node):
            stack.append((child, chain + [node]))
    return []


def _station(module: str) -> int:
    best, index = -1, None
    for i, names in enumerate(STATIONS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, index = len(name), i
    return index


def test_every_module_belongs_to_a_station():
    missing = [m for m in MODULES if m != ROOT_MODULE and _station(m) is None]
    assert not missing, missing


def test_stations_import_only_their_own_or_earlier_stations():
    wrong = []
    for module, deps in _imports(deferred=False).items():
        if module == ROOT_MODULE:
            continue
        for dep in deps:
            if dep != ROOT_MODULE and _station(dep) > _station(module):
                wrong.append(f"{module} -> {dep}")
    assert not wrong, wrong


def test_nothing_imports_the_command_line():
    users = [m for m, deps in _imports(deferred=False).items() if not m.startswith("leakattack.cli")
             and m != "leakattack.__main__" and any(d.startswith("leakattack.cli") for d in deps)]
    assert not users, users


def test_there_are_no_import_cycles():
    graph = _imports(deferred=False)
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_at_most_five_deferred_imports_of_our_own_modules():
    deferred = {m: deps for m, deps in _imports(deferred=True).items() if deps}
    assert sum(len(d) for d in deferred.values()) <= 5, deferred


@pytest.mark.parametrize("folder", ["leakattack", "targets", "defenses", "tests", "scripts", "benchmarks", "examples"])
def test_code_speaks_of_the_software_not_of_work_items(folder):
    pattern = re.compile(r"\b(issue|ticket)s? #?\d+", re.IGNORECASE)
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".toml", ".sh")
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


# -- capabilities, not names ------------------------------------------------------------------
#: where registered names may be spelt out: the registries, the command line (which checks the names a user typed
#: against them), the copies of the names the flags show, and the figures, which read the sketch kinds run folders
#: store and import no station that ran them
NAME_HOMES = ("leakattack.registry", "leakattack.attacks", "leakattack.sketch", "targets.models", "targets.protocols",
              "defenses", "leakattack.data", "leakattack.cli", "leakattack.config.names", "leakattack.figures")
#: modules of a registry package that are not its registry: they ask capabilities like everyone else
NOT_HOMES = ("leakattack.attacks.seed_search", "leakattack.attacks.gradient_matching", "targets.protocols.sketched")


def _registered() -> dict[str, set[str]]:
    """What each kind of registered thing is called by, and the names it holds."""
    import targets
    from leakattack.attacks import list_attacks
    from leakattack.sketch import list_sketches
    from targets.protocols import list_protocols

    return {"attack": set(list_attacks()), "sketch": set(list_sketches()), "model": set(targets.list_models()),
            "protocol": set(list_protocols())}


def _strings(node) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def name_dispatch(source: str, registered: dict[str, set[str]]) -> list[str]:
    """The places in ``source`` that decide by a registered name: a comparison of an attack, sketch, model or
    protocol with one of their names (``cfg.attack == "analytic"``, ``sketch.kind != "none"``), a test of one
    against a list kept aside (``cfg.attack in CLOSED_FORM``), and a module-level list of attack names."""
    tree, hits = ast.parse(source), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for noun, names in registered.items():
                named = any(set(_strings(s)) & names for s in sides)
                about = any(noun in ast.unparse(s).lower() for s in sides if not _strings(s))
                kept_aside = any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
                    isinstance(s, ast.Name) and s.id.isupper() for s in node.comparators)
                if about and (named or kept_aside):
                    hits.append(f"{node.lineno}: {ast.unparse(node)}")
                    break
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            found = _strings(node.value)
            if len(found) >= 2 and set(found) <= registered["attack"]:
                hits.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return hits


def _home(module: str) -> bool:
    return not module.startswith(NOT_HOMES) and any(module == h or module.startswith(h + ".") for h in NAME_HOMES)


def test_library_code_asks_capabilities_instead_of_testing_registered_names():
    registered = _registered()
    hits = [f"{MODULES[m].relative_to(ROOT)}:{hit}" for m in sorted(MODULES) if not _home(m)
            for hit in name_dispatch(MODULES[m].read_text(), registered)]
    assert not hits, "decide by the attack's, sketch's or model's capabilities, not its name: " + "; ".join(hits)


@pytest.mark.parametrize("line", [
    'if cfg.attack == "analytic":\n    pass',
    'closed = cfg.attack in CLOSED_FORM_ATTACKS',
    'CLOSED_FORM_ATTACKS = ("analytic", "rgap", "april")',
    'tag = "" if sketch.kind == "none" else sketch.kind',
    'b = d if self.sketch != "none" else 1',
    'deep = cfg.model in ("resnet18", "vit_b_16")',
])
def test_the_name_dispatch_check_finds_each_kind_of_name_test(line):
    assert name_dispatch(line, _registered())


def test_the_name_dispatch_check_passes_capability_questions():
    assert not name_dispatch('if cfg.attack_class.closed_form and sketch.identity and cfg.dummy_init == "uniform":\n'
                             '    pass', _registered())
