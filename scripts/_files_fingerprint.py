"""Which commit a copy of the repository without ``.git`` holds, from its files alone::

    files_fingerprint(root)            -> "3f2a9c81d0e4..."  the files git would track under root
    commit_fingerprint(repo, commit)   -> the same for a commit's tree (git ls-tree; no file is read)
    find_commit(repo, fingerprint)     -> the newest commit of HEAD's history with those files, or None

The fingerprint is the SHA-1 of the sorted lines ``<git blob id> <path>``, one per file: git's own blob
ids (``sha1("blob <size>\\0" + content)``; a symbolic link's content is its target), with no file modes,
so a copy that lost its executable bits still matches. "Files git would track" leaves out ``.git`` and
what the ``.gitignore`` files of the copy ignore: the first GPU call runs on such a copy (its tracked
and untracked-not-ignored files), and what it writes there is ignored (``__pycache__``, caches).

The ``.gitignore`` rules read: comments and blank lines, a trailing ``/`` (folders only), a ``/`` at
the start or inside (relative to the ``.gitignore``'s folder, else any level), and ``*``, ``?`` and
``[...]`` within one path component. A rule this does not read (``!``, ``**``) is a ValueError
naming it, rather than a fingerprint that matches nothing.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["files_fingerprint", "commit_fingerprint", "find_commit"]


@dataclass(frozen=True)
class _Rule:
    """One ``.gitignore`` line, as the components it matches."""

    base: tuple[str, ...]      # the components of the .gitignore's folder, relative to the root
    parts: tuple[str, ...]     # the pattern's components
    anchored: bool             # matched against the path below ``base``; else against the last component
    folders_only: bool

    def ignores(self, path: tuple[str, ...], is_folder: bool) -> bool:
        if (self.folders_only and not is_folder) or path[:len(self.base)] != self.base:
            return False
        below = path[len(self.base):]
        if not self.anchored:
            return fnmatch.fnmatchcase(below[-1], self.parts[0])
        return len(below) == len(self.parts) and all(map(fnmatch.fnmatchcase, below, self.parts))


def _rules(gitignore: Path, base: tuple[str, ...]) -> list[_Rule]:
    rules = []
    for line in gitignore.read_text().splitlines():
        pattern = line.rstrip()
        if not pattern or pattern.startswith("#"):
            continue
        if pattern.startswith("!") or "**" in pattern or "\\" in pattern:
            raise ValueError(f"{gitignore}: the rule {line!r} is one this fingerprint does not read")
        folders_only = pattern.endswith("/")
        pattern = pattern.rstrip("/")
        anchored = "/" in pattern
        rules.append(_Rule(base, tuple(pattern.lstrip("/").split("/")), anchored, folders_only))
    return rules


def _blob_id(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def _fingerprint(entries: list[tuple[str, str]]) -> str:
    """SHA-1 of the sorted ``<blob id> <path>`` lines of ``entries`` ((blob id, path) pairs)."""
    text = "".join(f"{blob} {path}\n" for blob, path in sorted(entries, key=lambda entry: entry[1]))
    return hashlib.sha1(text.encode()).hexdigest()


def files_fingerprint(root: Path) -> str:
    """The fingerprint of the files under ``root`` that git would track (see the module docstring)."""
    entries: list[tuple[str, str]] = []
    rules: list[_Rule] = []
    for folder, folders, _ in os.walk(root):
        here = tuple(Path(folder).relative_to(root).parts)
        if os.path.isfile(os.path.join(folder, ".gitignore")):
            rules += _rules(Path(folder) / ".gitignore", here)
        kept = [entry for entry in os.scandir(folder) if entry.name != ".git"
                and not any(rule.ignores(here + (entry.name,), entry.is_dir(follow_symlinks=False)) for rule in rules)]
        folders[:] = sorted(entry.name for entry in kept if entry.is_dir(follow_symlinks=False))
        for entry in kept:
            if entry.is_symlink() or entry.is_file():  # a link's content is its target, as git stores it
                content = os.readlink(entry.path).encode() if entry.is_symlink() else Path(entry.path).read_bytes()
                entries.append((_blob_id(content), "/".join(here + (entry.name,))))
    return _fingerprint(entries)


def commit_fingerprint(repo: Path, commit: str) -> str:
    """The fingerprint of ``commit``'s tree in the repository at ``repo``, from its blob ids."""
    listing = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "-z", "--full-tree", commit],
                             capture_output=True, check=True).stdout.decode()
    entries = []
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        _, kind, blob = meta.split()
        if kind == "blob":
            entries.append((blob, path))
    return _fingerprint(entries)


def find_commit(repo: Path, fingerprint: str) -> str | None:
    """The newest commit of HEAD's history whose files have ``fingerprint`` (or its leading digits), else None."""
    commits = subprocess.run(["git", "-C", str(repo), "rev-list", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.split()
    return next((commit for commit in commits if commit_fingerprint(repo, commit).startswith(fingerprint)), None)
