"""The docs' links hold: every relative Markdown link in README.md and docs/*.md names a file or directory of the
repository (not one git ignores), no link climbs out of the repository, and a link's `#anchor` into a Markdown
file names one of its headings, slugged as GitHub slugs them. Every page under docs/ is reachable from the README.

Needs no server: it reads the files."""

import os
import re
import subprocess
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest
from conftest import REPO_ROOT

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]

# Links that leave for the web are not checked here; any other scheme (file:, …) is refused as leaving the repo.
WEB = re.compile(r"^(https?|mailto):", re.I)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)[\s\S]*?(?<!`)\1(?!`)")
# [text](target "title") and ![alt](target), the text holding at most one level of brackets.
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"  # the text
    r"\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"  # the target, balanced parentheses allowed
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)"  # a title
)
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:name|id)=\"([^\"]+)\"", re.I)


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
        elif fence is not None and opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
            fence = None
        elif fence is None:
            yield number, line


def links(text: str):
    """(line number, target) of every link outside code. Code spans may run over a line's end, never past a
    blank line, so each paragraph is searched whole, its code spans blanked out first."""
    kept = dict(prose_lines(text))
    lines = [kept.get(number, "") for number in range(1, len(text.splitlines()) + 1)]
    start = 0
    while start < len(lines):
        end = start
        while end < len(lines) and lines[end].strip():
            end += 1
        block = "\n".join(lines[start:end])
        block = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), block)
        found = [
            (start + 1 + block.count("\n", 0, match.start()), match.group(1).strip("<>"))
            for match in INLINE_LINK.finditer(block)
        ]
        for offset, line in enumerate(block.split("\n")):
            reference = REFERENCE.match(line)
            if reference:
                found.append((start + 1 + offset, reference.group(1).strip("<>")))
        yield from sorted(found, key=lambda link: link[0])
        start = end + 1


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: the rendered text lowercased, punctuation dropped (letters, digits,
    `_`, `-` and spaces stay), each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    # Emphasis marks go (`*`, and `_` at a word's edge, not in snake_case); a code span's text stays as it is.
    parts = re.split(r"(`+[^`]*`+)", text)
    text = "".join(
        part.strip("`") if part.startswith("`") else re.sub(r"(?<!\w)_+|_+(?!\w)", "", part.replace("*", ""))
        for part in parts
    )
    kept = "".join(c for c in text.lower() if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file: its headings' slugs (a repeated one gets -1, -2, …) and any
    explicit `<a name=…>` or `id=…`."""
    found, seen = set(), {}
    previous = ""
    text = path.read_text()
    for _, line in prose_lines(text):
        heading = None
        atx = ATX.match(line)
        if atx:
            heading = atx.group(2) or ""
        elif SETEXT.match(line) and previous.strip() and not ATX.match(previous) and "|" not in previous:
            heading = previous.strip()
        if heading is not None:
            base = slug(heading)
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(HTML_ANCHOR.findall(line))
        previous = line
    return found


def ignored_by_git(path: Path) -> bool:
    """Whether git ignores the path (a build output such as target/ exists here but is not in the repository)."""
    if not (REPO_ROOT / ".git").exists():
        return False
    done = subprocess.run(["git", "-C", str(REPO_ROOT), "check-ignore", "-q", str(path)], capture_output=True)
    return done.returncode == 0


def problem(doc: Path, target: str) -> str | None:
    """What is wrong with one link of `doc`, or None."""
    if WEB.match(target):
        return None
    if SCHEME.match(target) or target.startswith("//"):
        return "points outside the repository"
    path_part, _, fragment = target.partition("#")
    path_part = unquote(path_part.partition("?")[0])
    if not path_part:
        resolved = doc
    elif path_part.startswith("/"):
        resolved = Path(os.path.normpath(REPO_ROOT / path_part.lstrip("/")))
    else:
        resolved = Path(os.path.normpath(doc.parent / path_part))
    if os.path.relpath(resolved, REPO_ROOT).split(os.sep)[0] == "..":
        return "climbs out of the repository"
    if not resolved.exists():
        return f"names {os.path.relpath(resolved, REPO_ROOT)}, which does not exist"
    if ignored_by_git(resolved):
        return f"names {os.path.relpath(resolved, REPO_ROOT)}, which git ignores: it is not in the repository"
    if fragment and resolved.is_file() and resolved.suffix == ".md" and unquote(fragment) not in anchors(resolved):
        return f"names #{fragment}, which is no heading of {os.path.relpath(resolved, REPO_ROOT)}"
    return None


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: os.path.relpath(d, REPO_ROOT))
def test_every_link_stays_in_the_repository_and_finds_its_target(doc):
    problems = [
        f"{os.path.relpath(doc, REPO_ROOT)}:{number}: ({target}) {said}"
        for number, target in links(doc.read_text())
        if (said := problem(doc, target))
    ]
    assert not problems, "\n".join(problems)


def test_every_page_under_docs_is_linked_from_the_readme():
    readme = REPO_ROOT / "README.md"
    linked = {Path(os.path.normpath(REPO_ROOT / unquote(t.partition("#")[0]))) for _, t in links(readme.read_text())}
    missing = [os.path.relpath(d, REPO_ROOT) for d in DOCS[1:] if d not in linked]
    assert not missing, f"README.md's links leave out: {', '.join(missing)}"


@pytest.mark.parametrize(
    "heading, anchor",
    [
        ("The model at `/repository`", "the-model-at-repository"),
        ("The store: SQLite, or PostgreSQL", "the-store-sqlite-or-postgresql"),
        (
            "Sign-in for apps: the OAuth 2.0 / OpenID Connect provider",
            "sign-in-for-apps-the-oauth-20--openid-connect-provider",
        ),
        ("Adoption, shutdown and restarts", "adoption-shutdown-and-restarts"),
        ("The proxy's modules (the layout being put in place)", "the-proxys-modules-the-layout-being-put-in-place"),
        ("`proxy.own_path` and snake_case", "proxyown_path-and-snake_case"),
        ("`__init__` and *emphasis* and _more_", "__init__-and-emphasis-and-more"),
    ],
)
def test_headings_are_slugged_as_github_slugs_them(heading, anchor):
    assert slug(heading) == anchor


def test_the_checker_sees_what_it_must():
    """Links in code are not links; a link that climbs out, or names a missing file or heading, is caught."""
    text = "[a](x.md) `[b](y.md)`\n```sh\n[c](z.md)\n```\n![d](e.png \"t\")\n[r]: ref.md\n`a\nb` [f](f.md)\n"
    assert list(links(text)) == [(1, "x.md"), (5, "e.png"), (6, "ref.md"), (8, "f.md")]
    readme = REPO_ROOT / "README.md"
    assert problem(readme, "../shared/x.md") == "climbs out of the repository"
    assert problem(readme, "file:///etc/passwd") == "points outside the repository"
    assert problem(readme, "docs/nothing-here.md") is not None
    assert problem(readme, "docs/operations.md#no-such-heading") is not None
    assert problem(readme, "docs/operations.md#upgrade") is None
    assert problem(readme, "#read-on") is None
    assert problem(readme, "https://example.com/x") is None
