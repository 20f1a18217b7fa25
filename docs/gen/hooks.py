"""MkDocs hooks: generated tables in pages, the committed benchmark plots as site files.

A page asks for generated content with an HTML comment on a line of its own,
``<!-- generated: config_table -->`` or ``<!-- generated: collectives collectives_np2 -->``; the
comment is replaced by what docs/gen/results.py or docs/gen/config_table.py renders from the
sources and benchmarks/results/*.json, so no figure in those pages is typed by hand.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

GEN = Path(__file__).resolve().parent
REPO = GEN.parents[1]
sys.path.insert(0, str(GEN))

import config_table  # noqa: E402
import results  # noqa: E402

log = logging.getLogger("mkdocs.hooks.relaxlib")
MARKER = re.compile(r"^<!-- generated: (\w+)((?: [\w.\-]+)*) -->$", re.M)
# Repository files the pages link to (results, plots, example scripts) are published under repo/,
# so a link written for GitHub (``../benchmarks/results/x.json``) also works in the site.
PUBLISHED = ("benchmarks/results/*.json", "benchmarks/results/*.png", "examples/*.py")
SITE_PREFIX = "repo"
LINK = re.compile(r"(\]\()([^)\s#]+)([^)]*\))")


def _existing(nav, docs_dir: Path):
    """The nav without entries whose page is missing (a page another change is still writing)."""
    out = []
    for item in nav:
        if isinstance(item, dict):
            (title, target), = item.items()
            if isinstance(target, list):
                out.append({title: _existing(target, docs_dir)})
            elif "://" in target or (docs_dir / target).exists():
                out.append(item)
            else:
                log.info("nav: %s (%s) is not written yet; left out", title, target)
        elif "://" in str(item) or (docs_dir / item).exists():
            out.append(item)
    return out


def on_config(config):
    """Leaves out nav entries for pages that do not exist yet."""
    config["nav"] = _existing(config["nav"], Path(config["docs_dir"]))
    return config


def on_files(files, config):
    """Publishes the committed results, plots and examples under repo/ in the site."""
    for pattern in PUBLISHED:
        for path in sorted(REPO.glob(pattern)):
            rel = path.relative_to(REPO).as_posix()
            files.append(File.generated(config, f"{SITE_PREFIX}/{rel}", abs_src_path=str(path)))
    return files


def _repo_link(target: str, page_src: str, docs_dir: Path) -> str:
    """A relative link that leaves docs/ for a published repository file, pointed at its copy."""
    if "://" in target or target.startswith(("/", "mailto:")):
        return target
    page_dir = (docs_dir / page_src).parent
    resolved = Path(os.path.normpath(page_dir / target))
    try:
        rel = resolved.relative_to(REPO)
    except ValueError:
        return target
    if resolved.is_relative_to(docs_dir) or not any(rel.match(p) for p in PUBLISHED):
        return target
    return os.path.relpath(docs_dir / SITE_PREFIX / rel, page_dir).replace(os.sep, "/")


def render(kind: str, args: list[str]) -> str:
    """The Markdown a marker stands for."""
    if kind == "config_table":
        return config_table.markdown_table()
    renderer = getattr(results, kind, None)
    if renderer is None or kind.startswith("_"):
        raise ValueError(f"unknown generated block {kind!r}")
    return renderer(*args)


def on_page_markdown(markdown, page, config, files):
    """Replaces each ``<!-- generated: ... -->`` marker with its rendered Markdown and points
    links to repository files at their published copies."""
    markdown = MARKER.sub(lambda m: render(m.group(1), m.group(2).split()), markdown)
    docs_dir = Path(config["docs_dir"])
    return LINK.sub(lambda m: m.group(1) + _repo_link(m.group(2), page.file.src_uri, docs_dir) + m.group(3),
                    markdown)
