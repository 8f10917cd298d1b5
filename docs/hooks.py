"""MkDocs hook: the figures the pages show live under results/, outside docs/.

A page links a figure the way a reader of the repository follows it, relative to
the page (``../results/sweeps/x/figures/y.png`` from ``docs/sweeps.md``).  The
hook adds each such file to the site under ``results/...`` and rewrites the link
to it, so the same Markdown works on GitHub and in the built site; a link to a
file that does not exist is left alone, and the strict build reports it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

_LINK = re.compile(r"\]\(((?:\.\./)+)(results/[^)\s]+)\)")


def _targets(config):
    docs = Path(config["docs_dir"])
    root = docs.parent
    for md in docs.rglob("*.md"):
        depth = len(md.relative_to(docs).parts) - 1
        for ups, rel in _LINK.findall(md.read_text(encoding="utf-8")):
            if ups.count("../") == depth + 1 and (root / rel).is_file():
                yield rel


def on_files(files, config):
    root = Path(config["docs_dir"]).parent
    for rel in sorted(set(_targets(config))):
        if files.get_file_from_path(rel) is None:
            files.append(File(rel, str(root), config["site_dir"], config["use_directory_urls"]))
    return files


def on_page_markdown(markdown, page, config, files):
    depth = page.file.src_uri.count("/")

    def repl(m):
        ups, rel = m.group(1), m.group(2)
        if ups.count("../") != depth + 1 or files.get_file_from_path(rel) is None:
            return m.group(0)
        return "](" + posixpath.relpath(rel, posixpath.dirname(page.file.src_uri) or ".") + ")"

    return _LINK.sub(repl, markdown)
