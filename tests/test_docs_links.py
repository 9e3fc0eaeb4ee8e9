"""The documentation holds together: every relative link of README.md and docs/*.md reaches a
file that exists and, when it names one, an anchor that page has; and docs/settings.md names
every environment variable the settings read.

Links are found by markdown-it-py (the parser rich already brings), so a link inside a code
block is not a link and one inside a table is. Anchors are the ids GitHub gives headings, plus
explicit `<a id="...">` tags.
"""
from __future__ import annotations

import re
from collections import Counter
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Pages another branch of issue 26 is writing: a link to one is checked once the page exists.
PENDING: set = set()
EXPLICIT_ANCHOR = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")


def github_slug(text: str) -> str:
    """Return the id GitHub gives a heading whose rendered text is `text`.

    GitHub lower-cases the text, drops every character that is not a letter, a digit, a space,
    a hyphen or an underscore, and turns each space into a hyphen (so `Two  words` keeps two
    hyphens). A repeated id gets `-1`, `-2`, ... in order; `anchors` applies that part.
    """
    kept = "".join(c for c in text.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


def _inline_text(token) -> str:
    """The text of an inline token as rendered: code spans and link texts kept, markup dropped."""
    return "".join(child.content for child in token.children or []
                   if child.type in ("text", "code_inline", "html_inline"))


@cache
def anchors(page: Path) -> frozenset[str]:
    """Return every anchor `page` has: its headings' GitHub ids and its explicit `<a id>`s."""
    source = page.read_text(encoding="utf-8")
    tokens = _parser().parse(source)
    seen: Counter[str] = Counter()
    found = set(EXPLICIT_ANCHOR.findall(source))
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            slug = github_slug(_inline_text(tokens[i + 1]))
            found.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
            seen[slug] += 1
    return frozenset(found)


def links(page: Path) -> list[str]:
    """Return the target of every Markdown link and image of `page`, in order."""
    out: list[str] = []
    for token in _parser().parse(page.read_text(encoding="utf-8")):
        for child in token.children or []:
            if child.type == "link_open":
                out.append(child.attrs["href"])
            elif child.type == "image":
                out.append(child.attrs["src"])
    return out


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Return a line per relative link of `page` whose file or anchor does not exist.

    Args:
        page: the Markdown file.
        root: the repository root, which the lines name files relative to.
    """
    problems = []
    for href in links(page):
        parts = urlsplit(href)
        if parts.scheme or parts.netloc or href.startswith("mailto:"):
            continue  # another site: not checked offline
        target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if target in PENDING and not target.exists():
            continue
        if not target.exists():
            problems.append(f"{href}: no file {target.relative_to(root)}")
        elif parts.fragment:
            if target.suffix != ".md":
                problems.append(f"{href}: an anchor into a file that is not Markdown")
            elif unquote(parts.fragment) not in anchors(target):
                problems.append(f"{href}: {target.relative_to(root)} has no heading or "
                                f"<a id> '{parts.fragment}'")
    return problems


def test_github_slug_follows_githubs_rule():
    assert github_slug("CB-1: cluster job names are deterministic DNS labels") == \
        "cb-1-cluster-job-names-are-deterministic-dns-labels"
    assert github_slug("What a user's code can reach") == "what-a-users-code-can-reach"
    assert github_slug("Settings, output formats and exit codes") == \
        "settings-output-formats-and-exit-codes"
    assert github_slug("Clone happens in the CLI: get, edit, create with cloned_from") == \
        "clone-happens-in-the-cli-get-edit-create-with-cloned_from"


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A page\n\n## Second part\n\n<a id=\"dec-x\"></a>\n", "utf-8")
    page = docs / "b.md"
    page.write_text(
        "# B\n\n[ok](a.md#second-part) [ok](a.md#dec-x) [ok](#b) [ok](https://example.com/x)\n"
        "[gone](nope.md) [no anchor](a.md#third-part) [no local anchor](#nothing)\n\n"
        "```\n[in a code block](missing.md)\n```\n\n| col |\n| --- |\n| [in a table](gone.md) |\n",
        "utf-8")
    problems = broken_links(page, root=tmp_path)
    assert [p.split(":")[0] for p in problems] == [
        "nope.md", "a.md#third-part", "#nothing", "gone.md"], problems


def test_a_repeated_heading_gets_a_numbered_anchor(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Logs\n\n## Logs\n\n## `exp logs` and more\n", "utf-8")
    assert anchors(page) >= {"logs", "logs-1", "exp-logs-and-more"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_the_front_page_links_the_three_answers_a_reviewer_looks_for():
    hrefs = links(ROOT / "README.md")
    for href in ("docs/deploying.md", "docs/plugins.md#writing-a-plugin",
                 "docs/auth.md#what-a-users-code-can-reach", "docs/README.md"):
        assert href in hrefs, href


def test_the_settings_page_names_every_variable_the_settings_read():
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    shown = set(re.findall(r"(?:FALCON|DJANGO)_[A-Z0-9_]+", page))
    read = set()
    for module in [*(ROOT / "falcon_site" / "settings").glob("*.py"), ROOT / "cli" / "env.py",
                   ROOT / "controllers" / "runner.py", ROOT / "controllers" / "metrics.py"]:
        read |= set(re.findall(r"""["']((?:FALCON|DJANGO)_[A-Z0-9_]+)["']""",
                               module.read_text(encoding="utf-8")))
    # Django's own, set by manage.py and wsgi.py: not a Falcon setting.
    read -= {"DJANGO_SETTINGS_MODULE"}
    assert read and not read - shown, sorted(read - shown)
