"""The documentation site builds without a warning, and the cheap commands it shows run.

``mkdocs build --strict`` with the validation settings of mkdocs.yml turns every
broken internal link or anchor, every page left out of the nav and every
mkdocstrings object that cannot be found into a failure.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: each API page and objects its rendered reference must name
API_PAGES = {
    "leakattack": ("leakattack.sketch", "get_sketch", "leakattack.attacks", "get_attack", "Channel", "observe"),
    "targets": ("targets.protocols", "get_model", "Victim", "round_seed"),
    "defenses": ("defenses.accounting.analysis", "gaussian_sigma", "build"),
}

#: a documented command is cheap when it only prints: help, version, the registries' names
CHEAP = re.compile(
    r"^(?:leakattack|python -m leakattack)"
    r"(?: --version| --help|(?: [a-z]+)? --help| list| list --model [a-z_0-9]+)$"
)


def _fenced_lines(text: str):
    """Lines inside ``` fences (bash, console or plain blocks), comments stripped."""
    inside = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
            continue
        if inside:
            yield line.split("  #")[0].split(" # ")[0].strip()


def documented_cheap_commands() -> list[str]:
    found = []
    for path in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for line in _fenced_lines(path.read_text(encoding="utf-8")):
            if CHEAP.match(line) and line not in found:
                found.append(line)
    return found


def test_site_builds_strict_with_every_api_page(tmp_path):
    missing = [m for m in ("mkdocs", "material", "mkdocstrings_handlers.python")
               if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing:
        pytest.skip("mkdocs-material and mkdocstrings-python are not installed (pip install -e '.[test]')")
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    log = proc.stdout + proc.stderr
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert proc.returncode == 0 and not warnings, ("mkdocs build --strict failed:\n"
                                                   + "\n".join(warnings or [log[-3000:]]))
    for page, names in API_PAGES.items():
        html_path = site / "api" / page / "index.html"
        assert html_path.is_file(), f"API page {page} was not built"
        html = html_path.read_text(encoding="utf-8")
        assert "doc-object" in html, f"API page {page} has no rendered reference"
        absent = [n for n in names if n not in html]
        assert not absent, f"API page {page} does not document {absent}"
    # every Markdown page of docs/ became a page of the site (the nav check of the strict build covers the rest)
    for md in DOCS.rglob("*.md"):
        rel = md.relative_to(DOCS).with_suffix("")
        built = site / ("index.html" if rel.name == "index" else rel / "index.html")
        assert built.is_file(), f"{md.relative_to(ROOT)} was not built"


def test_figures_the_pages_show_reach_the_site_from_results():
    # the hook serves ../results/... links from the repository's results/ folder: each must exist there
    links = set()
    for md in DOCS.rglob("*.md"):
        links |= set(re.findall(r"\]\((?:\.\./)+(results/[^)\s]+)\)", md.read_text(encoding="utf-8")))
    assert links, "no page shows a figure from results/"
    assert all((ROOT / rel).is_file() for rel in links), sorted(rel for rel in links if not (ROOT / rel).is_file())


def test_cheap_documented_commands_exit_0():
    commands = documented_cheap_commands()
    expected = {"leakattack --version", "leakattack list", "leakattack run --help", "leakattack list --model lenet",
                "python -m leakattack --help"}
    assert expected <= set(commands), f"the docs no longer show {sorted(expected - set(commands))}"
    script = Path(sys.executable).with_name("leakattack")
    for command in commands:
        argv = shlex.split(command)
        if argv[0] == "leakattack":
            argv = [str(script)] + argv[1:] if script.is_file() else [sys.executable, "-m", "leakattack"] + argv[1:]
        else:
            argv = [sys.executable] + argv[1:]
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"`{command}` exited {proc.returncode}: {proc.stderr.strip()[-500:]}"
        assert proc.stdout.strip(), f"`{command}` printed nothing"


def _anchors(markdown: str) -> set[str]:
    """The ids the toc extension gives a page's headings (its default slugify)."""
    ids = set()
    for line in markdown.splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            text = re.sub(r"[^\w\s-]", "", m.group(1).replace("`", "")).strip().lower()
            ids.add(re.sub(r"[-\s]+", "-", text))
    return ids


def test_readme_is_short_and_its_relative_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; the details belong in docs/ (at most 200)"
    # the test command .ci/run executes is the one the README gives
    assert "```bash\npython -m pytest -q -n 2\n```" in text, "README.md no longer gives the test command"
    assert "\npython -m pytest -q -n 2\n" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [link for link in links if not re.match(r"^[a-z][a-z0-9+.-]*:|^#", link)]
    assert relative, "README.md links no documentation page"
    broken = []
    for link in relative:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.exists():
            broken.append(link)
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target.read_text(encoding="utf-8")):
            broken.append(link)
    assert not broken, f"README.md links to missing files or headings: {broken}"
