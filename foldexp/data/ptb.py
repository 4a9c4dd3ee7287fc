"""Parser for PTB-style bracketed trees, one tree per line (the SST file format).

Grammar (``WS`` is space, tab, CR or LF)::

    line  := WS* node WS*
    node  := '(' WS* LABEL ( WS+ WORD | (WS* node)+ ) WS* ')'
    LABEL := an optional sign and ASCII digits, e.g. 3 or -1
    WORD  := everything up to the closing ')', without surrounding WS; never '(' or ')'

A leaf's word is *everything* up to its closing parenthesis, so SST leaves that contain a space
(``(2 8 1\\/2)``) keep it. With ``internal_words=True`` a node may have a word *and* children,
``(label word child ...)``, which is how calculator trees are written.

The parser is a hand-written stack machine over three kinds of token -- ``(`` with the text that
follows it, ``)``, and stray text -- so every error knows its exact column. Errors are
:class:`TreeParseError` with a ``path:line:col: expected ... got ...`` message.
"""

from __future__ import annotations

import re
from os import PathLike
from pathlib import Path

from foldexp.data.errors import TextFileError, TreeParseError
from foldexp.data.textfile import read_text
from foldexp.data.trees import Tree, gc_paused

__all__ = ["PTB_ESCAPES", "parse_tree", "read_numbered_ptb_file", "read_ptb_file", "unescape_word"]

# A token is an opening '(' with the text up to the next parenthesis (label and maybe word) and,
# for a leaf, its closing ')'; or a ')' closing an internal node; or stray text. Leading
# whitespace is folded into the parenthesis tokens, so a well-formed line costs one token per leaf
# and two per internal node (SST train has 318k nodes; this keeps loading well under a second).
_TOKEN = re.compile(r"[ \t\r\n]*(?:(\()([^()]*)(\))?|(\)))|[^()]+")
_WS_CHAR = re.compile(r"[ \t\r\n]")
_LABEL = re.compile(r"[+-]?[0-9]+")
_WS = " \t\r\n"
# Fast path for the labels that make up nearly all real data; anything else goes through _LABEL.
_COMMON_LABELS = {str(i): i for i in range(10)}

#: PTB escape sequences and what they stand for (used when ``unescape=True``).
PTB_ESCAPES: dict[str, str] = {
    "-LRB-": "(",
    "-RRB-": ")",
    "-LCB-": "{",
    "-RCB-": "}",
    "-LSB-": "[",
    "-RSB-": "]",
    "\\/": "/",
    "\\*": "*",
}


def unescape_word(word: str) -> str:
    """Undo the PTB escapes in one token: ``-LRB-`` -> ``(``, ``\\/`` -> ``/``, ``\\*`` -> ``*``."""
    if "-" in word or "\\" in word:
        for escaped, plain in PTB_ESCAPES.items():
            if escaped in word:
                word = word.replace(escaped, plain)
    return word


def _show(text: str) -> str:
    """Quote a token for an error message, shortened so one bad line can't flood the terminal."""
    return repr(text if len(text) <= 24 else text[:21] + "...")


def _slow_label(body: str, offset: int, fail, text: str) -> tuple[int, str]:
    """Split ``body`` (the text after a '(') into its label and the rest, off the fast path.

    Handles whitespace before the label, tabs after it, multi-digit and signed labels, and
    reports a missing or malformed label. ``offset`` is where ``body`` starts in ``text``.
    """
    label_body = body.lstrip(_WS)
    pos = offset + len(body) - len(label_body)
    if not label_body:
        got = repr(text[pos]) if pos < len(text) else "end of line"
        raise fail(pos, f"expected a label after '(', got {got}")
    cut = _WS_CHAR.search(label_body)
    cut_at = cut.start() if cut else len(label_body)
    label_text = label_body[:cut_at]
    if _LABEL.fullmatch(label_text) is None:
        raise fail(pos, f"expected an integer label after '(', got {_show(label_text)}")
    return int(label_text), label_body[cut_at:]


def parse_tree(
    text: str,
    *,
    path: str | PathLike[str] = "<string>",
    line: int = 1,
    label_range: tuple[int, int] | None = None,
    internal_words: bool = False,
    unescape: bool = False,
) -> Tree:
    """Parse one PTB-style tree.

    Args:
        text: The tree text (one line of a tree file).
        path: File name used in error messages.
        line: Line number used in error messages.
        label_range: Inclusive ``(low, high)`` bounds every label must lie in, or ``None``.
        internal_words: Allow ``(label word child ...)`` nodes (calculator trees).
        unescape: Replace PTB escapes in words (see :data:`PTB_ESCAPES`).

    Returns:
        The parsed tree.

    Raises:
        TreeParseError: The text is not exactly one well-formed tree; the message gives
            ``path:line:col`` and what was expected.
    """

    def fail(offset: int, message: str) -> TreeParseError:
        return TreeParseError(path, line, offset + 1, message)

    make, common = Tree._make, _COMMON_LABELS
    low, high = label_range if label_range is not None else (None, None)
    # One frame per open internal node: [label, word, children, offset of its '(']
    stack: list[list] = []
    root: Tree | None = None

    for match in _TOKEN.finditer(text):
        opened, body, leaf_closed, closed = match.groups()
        if opened:
            if (stack and stack[-1][1] is not None and not internal_words) or (
                not stack and root is not None
            ):
                raise _misplaced_open(match, stack, fail)
            # Fast path: "2 word" or "2 " -- a one-digit label followed by a plain space.
            label_text, _, rest = body.partition(" ")
            label = common.get(label_text)
            if label is None:
                label, rest = _slow_label(body, match.start(2), fail, text)
            if low is not None and not low <= label <= high:
                raise _out_of_range(match, body, label, low, high, fail)
            word = rest.strip(_WS) or None
            if word is not None and unescape:
                word = unescape_word(word)
            if leaf_closed:
                if word is None:
                    raise _empty_node(fail, match.start(3), label)
                node = make(label, word, ())
                if stack:
                    stack[-1][2].append(node)
                else:
                    root = node
            else:
                stack.append([label, word, [], match.start(1)])
        elif closed:
            if not stack:
                raise fail(match.start(4), "expected '(' or end of line, got unbalanced ')'")
            label, word, children, _ = stack.pop()
            if word is None and not children:
                raise _empty_node(fail, match.start(4), label)
            node = make(label, word, tuple(children))
            if stack:
                stack[-1][2].append(node)
            else:
                root = node
        elif match.group().strip(_WS):  # text outside a node's '(' (whitespace is fine)
            raise _stray_text(match, stack, root, fail)

    if stack or root is None:
        raise _unfinished(text, stack, fail)
    return root


def _misplaced_open(match: re.Match[str], stack: list[list], fail) -> TreeParseError:
    """The error for a '(' inside a leaf (without ``internal_words``) or after the tree."""
    if stack:
        return fail(match.start(1), f"expected ')' to close leaf {_show(stack[-1][1])}, got '('")
    return fail(match.start(1), "expected end of line after the tree, got '('")


def _out_of_range(
    match: re.Match[str], body: str, label: int, low: int, high: int, fail
) -> TreeParseError:
    pos = match.start(2) + len(body) - len(body.lstrip(_WS))
    return fail(pos, f"expected a label in {low}..{high}, got {label}")


def _empty_node(fail, offset: int, label: int) -> TreeParseError:
    return fail(offset, f"expected a word or a child '(' after label {label}, got ')'")


def _stray_text(match: re.Match[str], stack: list[list], root: Tree | None, fail) -> TreeParseError:
    """The error for text that is neither a node nor whitespace, by where it stands."""
    tok = match.group()
    junk = tok.lstrip(_WS)
    pos = match.start() + len(tok) - len(junk)
    shown = _show(junk.rstrip(_WS))
    if stack:
        return fail(pos, f"expected '(' or ')' after a child node, got {shown}")
    if root is None:
        return fail(pos, f"expected '(' to start a tree, got {shown}")
    return fail(pos, f"expected end of line after the tree, got {shown}")


def _unfinished(text: str, stack: list[list], fail) -> TreeParseError:
    """The error for a line that ends inside a node, or holds no tree at all."""
    end = len(text.rstrip(_WS))
    if stack:
        col = stack[-1][3] + 1
        return fail(end, f"expected ')' to close the '(' at column {col}, got end of line")
    return fail(end, "expected a tree '(label ...)', got an empty line")


def read_ptb_file(
    path: str | PathLike[str],
    *,
    label_range: tuple[int, int] | None = None,
    internal_words: bool = False,
    unescape: bool = False,
) -> list[Tree]:
    """Read a file with one PTB-style tree per line: :func:`read_numbered_ptb_file` without the
    line numbers."""
    numbered = read_numbered_ptb_file(
        path, label_range=label_range, internal_words=internal_words, unescape=unescape
    )
    return [tree for _, tree in numbered]


def read_numbered_ptb_file(
    path: str | PathLike[str],
    *,
    label_range: tuple[int, int] | None = None,
    internal_words: bool = False,
    unescape: bool = False,
) -> list[tuple[int, Tree]]:
    """Read a file with one PTB-style tree per line, each with its line number.

    Blank lines carry no tree and are ignored; every other line must hold exactly one tree.

    Args:
        path: The UTF-8 text file to read, gzipped or not (``foldexp.data.textfile``).
        label_range: Inclusive bounds for every label, or ``None``.
        internal_words: Allow ``(label word child ...)`` nodes.
        unescape: Replace PTB escapes in words.

    Returns:
        ``(line number, tree)`` in file order, lines counted from 1.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        TreeParseError: The file is empty, is not UTF-8, or has a malformed line.
        TextFileError: The file is a damaged gzip file.
    """
    path = Path(path)
    try:
        text = read_text(path)
    except TextFileError as exc:
        if exc.line is None:  # a damaged gzip stream: no line to name
            raise
        raise TreeParseError(exc.path, exc.line, exc.column, exc.message) from None
    with gc_paused():
        trees = [
            (
                number,
                parse_tree(
                    line,
                    path=path,
                    line=number,
                    label_range=label_range,
                    internal_words=internal_words,
                    unescape=unescape,
                ),
            )
            for number, line in enumerate(text.split("\n"), start=1)
            if line.strip(_WS)
        ]
    if not trees:
        raise TreeParseError(path, 1, 1, "expected one PTB tree per line, got an empty file")
    return trees
