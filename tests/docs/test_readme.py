"""The README is the package index's long description, an index page for users: it renders
(``readme_renderer``, what ``twine check`` uses), every link in it is absolute, since a relative ``docs/...``
link breaks there, and it stays short (the maintainers' material is on docs/development.md). The project's
URLs (``[project.urls]``) name the same documentation site."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import lightning_shard
from tests.docs.blocks import README, ROOT
from tests.helpers.dev import needs_dev


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.links += [value for name, value in attrs if name in ("href", "src") and value is not None]


def rendered_links(markdown: str) -> list[str]:
    """Every ``href`` / ``src`` of ``markdown`` as the package index renders it."""
    html = needs_dev("readme_renderer.markdown").render(markdown, variant="GFM")
    assert html is not None, "the README does not render as GitHub-flavoured Markdown"
    parser = _Links()
    parser.feed(html)
    return parser.links


def relative_links(markdown: str) -> list[str]:
    """The links that are not absolute, rendered or written (the renderer's heading anchors aside)."""
    written = re.findall(r"\]\(([^)\s]+)", markdown)
    links = dict.fromkeys([*rendered_links(markdown), *written])
    return [link for link in links if not re.match(r"https://|#user-content-", link)]


def test_readme_renders_with_absolute_links_only() -> None:
    links = rendered_links(README.read_text())
    assert len(links) >= 10, links
    assert relative_links(README.read_text()) == []


def test_readme_is_short_and_keeps_the_set_up_commands() -> None:
    text = README.read_text()
    assert len(text.split()) < 900, (
        f"{len(text.split())} words: move maintainer material to docs/development.md"
    )
    # NOTE: CI's `.ci/run` calls `make test`, which the README names as the command that checks a clone.
    assert "make demo   #" in text and "make test   #" in text


def test_a_relative_link_is_found() -> None:
    markdown = "# Top\n\nSee [the guide](docs/guides/resume.md), [home](https://example.org/), [up](#top), ![x](a.png)."
    assert relative_links(markdown) == ["docs/guides/resume.md", "a.png", "#top"]


def test_project_urls_name_the_site_the_readme_links() -> None:
    section = (ROOT / "pyproject.toml").read_text().split("[project.urls]\n", 1)[1].split("\n\n", 1)[0]
    urls = dict(re.findall(r'^(\w+) = "([^"]+)"$', section, re.M))
    assert set(urls) >= {"Documentation", "Source", "Changelog"}
    links = rendered_links(README.read_text())
    assert urls["Documentation"] in links and urls["Source"] in links and urls["Changelog"] in links
    assert urls["Changelog"].startswith(urls["Documentation"])


def test_the_changelog_opens_with_this_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    sections = re.findall(r"^## (.+)$", changelog, re.M)
    assert sections[0] == lightning_shard.__version__, sections[:3]
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", section) for section in sections), sections


def test_the_install_page_names_no_wheel_file() -> None:
    # NOTE: a file name goes stale with each release (it said 0.2.0 while the package was 0.3.0).
    install = (ROOT / "docs" / "install.md").read_text()
    assert not re.search(r"lightning_shard-\d+\.\d+", install), "docs/install.md names a wheel file"
