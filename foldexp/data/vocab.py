"""Token vocabulary: maps words to dense integer ids for embedding lookups.

Index 0 is always the unknown token; optional special tokens (padding, start marks, ...) follow,
then the corpus words ordered by decreasing count and alphabetically among equal counts, so the
same corpus always gives the same ids. Vocabularies save to and load from a small JSON file, or
go through plain JSON types (``to_dict`` / ``from_dict``) inside a larger one (a run folder's).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from foldexp.data.errors import FormatError
from foldexp.data.trees import Tree

__all__ = ["UNK", "Vocabulary"]

#: Default unknown token.
UNK = "<unk>"

_FORMAT = "foldexp.vocabulary"
_VERSION = 1
_JSON_NAMES = {str: "string", list: "list", dict: "object"}


class Vocabulary:
    """A fixed word -> id mapping with an unknown token at index 0.

    Args:
        words: Corpus words in id order (after the unknown token and the specials).
        unk: The unknown token; words not in the vocabulary map to its id, 0.
        specials: Extra reserved tokens given ids 1..len(specials), e.g. ``("<pad>",)``.
        lowercase: Lower-case words in :meth:`index` (and when building).
        counts: Corpus counts of the words, kept for coverage statistics.

    Raises:
        ValueError: A word occurs twice, or collides with the unknown token or a special.
    """

    def __init__(
        self,
        words: Iterable[str],
        *,
        unk: str = UNK,
        specials: Sequence[str] = (),
        lowercase: bool = False,
        counts: Mapping[str, int] | None = None,
    ) -> None:
        self.unk = unk
        self.specials = tuple(specials)
        self.lowercase = lowercase
        self._words: list[str] = [unk, *self.specials, *words]
        self._index: dict[str, int] = {}
        for i, word in enumerate(self._words):
            if word in self._index:
                raise ValueError(
                    f"vocabulary word {word!r} appears twice (ids {self._index[word]}, {i})"
                )
            self._index[word] = i
        self.counts: dict[str, int] = dict(counts) if counts else {}

    # ------------------------------------------------------------------ building

    @classmethod
    def from_tokens(
        cls,
        tokens: Iterable[str],
        *,
        min_count: int = 1,
        lowercase: bool = False,
        unk: str = UNK,
        specials: Sequence[str] = (),
    ) -> Vocabulary:
        """Build a vocabulary from a stream of tokens.

        Args:
            tokens: Every token occurrence of the training corpus.
            min_count: Keep words seen at least this many times; rarer ones map to ``unk``.
            lowercase: Lower-case tokens before counting (and in :meth:`index`).
            unk: The unknown token.
            specials: Reserved tokens placed right after ``unk``.

        Returns:
            The vocabulary, with ``counts`` holding every counted word (kept or not).
        """
        if min_count < 1:
            raise ValueError(f"min_count must be at least 1, got {min_count}")
        counter = Counter(token.lower() for token in tokens) if lowercase else Counter(tokens)
        reserved = {unk, *specials}
        kept = sorted(
            (w for w, c in counter.items() if c >= min_count and w not in reserved),
            key=lambda w: (-counter[w], w),
        )
        return cls(kept, unk=unk, specials=specials, lowercase=lowercase, counts=counter)

    @classmethod
    def from_trees(cls, trees: Iterable[Tree], **options) -> Vocabulary:
        """Build a vocabulary from the leaf words of ``trees`` (options as :meth:`from_tokens`)."""
        tokens = (leaf.word for tree in trees for leaf in tree.leaves() if leaf.word is not None)
        return cls.from_tokens(tokens, **options)

    # ------------------------------------------------------------------ lookup

    @property
    def unk_index(self) -> int:
        """Id of the unknown token (always 0)."""
        return 0

    @property
    def words(self) -> list[str]:
        """All tokens in id order, starting with ``unk`` and the specials."""
        return list(self._words)

    def index(self, word: str) -> int:
        """Return the id of ``word`` (lower-cased first if the vocabulary is), or 0 if unknown."""
        if self.lowercase:
            word = word.lower()
        return self._index.get(word, 0)

    def encode(self, words: Iterable[str]) -> list[int]:
        """Return the ids of ``words`` (see :meth:`index`)."""
        get = self._index.get
        if self.lowercase:
            return [get(w.lower(), 0) for w in words]
        return [get(w, 0) for w in words]

    def word(self, index: int) -> str:
        """Return the token with id ``index``."""
        return self._words[index]

    def __contains__(self, word: object) -> bool:
        if not isinstance(word, str):
            return False
        return (word.lower() if self.lowercase else word) in self._index

    def __len__(self) -> int:
        return len(self._words)

    def __iter__(self) -> Iterator[str]:
        return iter(self._words)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return (self._words, self.specials, self.lowercase) == (
            other._words,
            other.specials,
            other.lowercase,
        )

    __hash__ = None  # type: ignore[assignment]  # compared by value; not meant as a dict key

    def __repr__(self) -> str:
        case = ", lowercase" if self.lowercase else ""
        return f"Vocabulary({len(self)} tokens, unk={self.unk!r}{case})"

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        """The vocabulary as plain JSON types; :meth:`from_dict` gives back an equal one (same
        ids, specials, case folding and counts), so a run folder can store it in a JSON file."""
        first = 1 + len(self.specials)
        return {
            "format": _FORMAT,
            "version": _VERSION,
            "unk": self.unk,
            "specials": list(self.specials),
            "lowercase": self.lowercase,
            "words": self._words[first:],
            "counts": {word: int(count) for word, count in self.counts.items()},
        }

    @classmethod
    def from_dict(cls, payload: Any, source: str = "vocabulary") -> Vocabulary:
        """The vocabulary :meth:`to_dict` described.

        Args:
            payload: The dict (e.g. read back from JSON; it may come from someone else, so every
                field is checked).
            source: Where it was read from, for error messages.

        Raises:
            FormatError: A field is missing or of the wrong type, or a word appears twice.
        """
        if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
            raise FormatError(f"{source}: expected a JSON object with format {_FORMAT!r}")
        if payload.get("version") != _VERSION:
            raise FormatError(
                f"{source}: expected vocabulary format version {_VERSION}, "
                f"got {payload.get('version')!r}"
            )
        for field, kind in [("unk", str), ("specials", list), ("words", list), ("counts", dict)]:
            if not isinstance(payload.get(field), kind):
                raise FormatError(
                    f"{source}: field {field!r} missing or not a JSON {_JSON_NAMES[kind]}"
                )
        strings = [*payload["specials"], *payload["words"], *payload["counts"]]
        if not all(isinstance(w, str) for w in strings):
            raise FormatError(f"{source}: every word, special and counted word must be a string")
        counts = payload["counts"]
        if not all(isinstance(c, int) and not isinstance(c, bool) for c in counts.values()):
            raise FormatError(f"{source}: field 'counts' must map words to integers")
        try:
            return cls(
                payload["words"],
                unk=payload["unk"],
                specials=payload["specials"],
                lowercase=bool(payload.get("lowercase", False)),
                counts=counts,
            )
        except ValueError as exc:
            raise FormatError(f"{source}: {exc}") from None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the vocabulary as JSON (atomically: a temp file, then a rename)."""
        path = Path(path)
        payload = self.to_dict()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(payload, f, ensure_ascii=False)
            os.chmod(tmp, 0o644)  # mkstemp creates 0600; a cache/vocab is meant to be shared
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Vocabulary:
        """Read a vocabulary written by :meth:`save`.

        Raises:
            FormatError: The file is not valid JSON or lacks a field (named in the message).
        """
        path = Path(path)
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise FormatError(f"{path}: expected a foldexp vocabulary JSON file: {exc}") from None
        return cls.from_dict(payload, str(path))
