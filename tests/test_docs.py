"""Every code block in README.md and docs/*.md runs, and shows what it says it shows.

The rules a doc follows (a block breaking one fails here, naming the doc and its line):

- Every fenced block names its language: ``python``, ``bash``, ``console`` or ``text``
  (listings, error messages, layouts: not code).
- A ``python`` block runs in a fresh namespace, statement by statement. A statement's
  trailing comment that starts with a value is the value the statement shows, and is checked:
  ``asd.subgrad(f)(0.0)   # 1.0, for every random direction`` checks ``1.0``;
  ``# (0.0, 1.0): exact ...`` a tuple; ``# 'torch'`` a string (``...`` inside a string matches
  anything); framework reprs (``tensor([1., 1.])``, ``Array(...)``, ``array(...)``,
  ``<tf.Tensor: [1., 1.]>``) are read as their numbers. ``# y.grad == tensor([1.])`` after
  any statement checks ``y.grad``. A comment-only line right after an expression without a
  comment of its own is that expression's value. Comments that start with words are prose.
- A ``python`` block that starts with ``>>>`` is a doctest (ELLIPSIS, NORMALIZE_WHITESPACE).
- A ``bash`` block's lines are ``asd`` commands, run in-process as ``python -m asd`` runs them
  (exit code 0). A ``console`` block is a transcript: ``$ asd ...`` lines run, the lines up to
  the next prompt are the output (``...`` matches anything).
- A block that must not run (an install, a signature, a file the reader has to write) has
  ``<!-- no-run: why -->`` on the line above its fence, so the skip is visible in the doc
  source and justified.

Blocks that import PyTorch, JAX or TensorFlow are skipped where that framework is not
installed (CI installs all three).
"""

from __future__ import annotations

import ast
import doctest
import io
import re
import shlex
import tokenize
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {"python", "bash", "console", "text"}
FRAMEWORKS = ("torch", "jax", "tensorflow", "keras")

_FENCE = re.compile(r"^```(\S*)\s*$")
_NO_RUN = re.compile(r"^<!--\s*no-run:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its code, and why it must not run."""

    doc: str
    line: int                 # the line of the opening fence, 1-based
    lang: str
    code: str
    no_run: str | None

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a markdown file, with the no-run reason above each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    doc = str(path.relative_to(ROOT))
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        above = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        reason = _NO_RUN.match(above.strip())
        out.append(Block(doc, start + 1, m.group(1), "\n".join(lines[start + 1:i]),
                         reason.group(1) if reason else None))
        i += 1
    return out


ALL = [b for path in DOCS for b in blocks(path)]
PYTHON = [b for b in ALL if b.lang == "python"]
SHELL = [b for b in ALL if b.lang in ("bash", "console")]


def test_the_docs_have_blocks_and_every_block_names_its_language():
    assert len(PYTHON) >= 10
    unnamed = [f"{b.name} (```{b.lang})" for b in ALL if b.lang not in LANGUAGES]
    assert not unnamed, f"fenced blocks need one of {sorted(LANGUAGES)}: {unnamed}"


def test_no_run_markers_give_a_reason_and_sit_on_a_block():
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        for k, line in enumerate(lines):
            if "no-run" not in line or not line.lstrip().startswith("<!--"):
                continue
            m = _NO_RUN.match(line.strip())
            assert m and len(m.group(1)) >= 8, f"{path.name}:{k + 1}: say why it must not run"
            nxt = next((x for x in lines[k + 1:] if x.strip()), "")
            assert _FENCE.match(nxt), f"{path.name}:{k + 1}: a no-run marker above no block"


# ----- python blocks -----


def _needs_frameworks(code: str) -> None:
    for name in FRAMEWORKS:
        if re.search(rf"^\s*(import|from)\s+([\w.]+\s*,\s*)*{name}\b", code, re.M):
            pytest.importorskip(name)


def _comments(code: str) -> dict[int, str]:
    """line number -> the text of the comment on it (without '#')."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string[1:].strip()
    return out


_REPRS = [(re.compile(r"<tf\.Tensor:\s*(.*?)>"), r"\1"),
          (re.compile(r"\b(?:tensor|Array|array)\("), "(")]
_AFTER = re.compile(r"\s*$|\s*[,:;]|\s{2,}|\s+\(")
"""What may follow a shown value: nothing, punctuation, two spaces or a parenthesis (so
``1.0, for every ...`` shows 1.0, but ``1 by lexicographic`` is prose)."""


def expected_value(comment: str):
    """``(value,)`` for a comment that starts with a value (see the module docstring), None
    for prose."""
    text = comment
    for pattern, repl in _REPRS:
        text = pattern.sub(repl, text)
    for end in range(len(text), 0, -1):
        candidate = text[:end].rstrip()
        if candidate[-1:] in ("", ",", ":", ";") or not _AFTER.match(text[end:]):
            continue
        try:
            return (ast.literal_eval(candidate),)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def _numbers(value):
    """A framework tensor or nested tuple of them as a float numpy array."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    elif hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    if isinstance(value, tuple | list):
        return np.asarray([_numbers(v) for v in value], dtype=float)
    return np.asarray(value, dtype=float)


def _structured(expected) -> bool:
    return isinstance(expected, tuple | list) and any(
        isinstance(e, str | tuple | list) and (isinstance(e, str) or _structured(e))
        for e in expected)


def matches(value, expected) -> bool:
    """Whether a computed value is the one a doc shows (numbers to 1e-7, strings exactly or
    with ``...`` for any text)."""
    if isinstance(expected, str):
        if not isinstance(value, str):
            return False
        parts = expected.split("...")
        if len(parts) == 1:
            return value == expected
        pattern = ".*".join(re.escape(p) for p in parts)
        return re.fullmatch(pattern, value, re.S) is not None
    if isinstance(expected, bool):
        return isinstance(value, bool | np.bool_) and bool(value) == expected
    if _structured(expected):
        return (isinstance(value, tuple | list) and len(value) == len(expected)
                and all(matches(v, e) for v, e in zip(value, expected, strict=True)))
    try:
        got = _numbers(value)
    except (TypeError, ValueError):
        return False
    want = np.asarray(expected, dtype=float)
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=1e-7, atol=1e-7))


def run_python(block: Block) -> int:
    """Execute a block statement by statement, checking the values its comments show;
    returns how many were checked."""
    code = block.code
    tree = ast.parse(code, filename=block.name)
    comments = _comments(code)
    lines = code.splitlines()
    ns: dict = {"__name__": "__doc__"}
    checked = 0
    for stmt in tree.body:
        filename = f"{block.name}+{stmt.lineno}"
        comment = comments.get(stmt.end_lineno)
        if comment is None and isinstance(stmt, ast.Expr):
            nxt = stmt.end_lineno       # a comment-only line right after: the value
            if nxt < len(lines) and lines[nxt].lstrip().startswith("#"):
                comment = comments.get(nxt + 1)
        claim = _claim(comment, isinstance(stmt, ast.Expr))
        if claim is not None and claim[0] is None:
            value = eval(compile(ast.Expression(stmt.value), filename, "eval"), ns)
        else:
            exec(compile(ast.Module([stmt], []), filename, "exec"), ns)
        if claim is None:
            continue
        lhs, want = claim
        if lhs is not None:
            value = eval(compile(lhs, filename, "eval"), ns)
        assert matches(value, want), (
            f"{filename}: `{ast.get_source_segment(code, stmt)}` shows {want!r} in the doc, "
            f"but gives {value!r}")
        checked += 1
    return checked


def _claim(comment: str | None, is_expression: bool):
    """(None, value) for an expression's shown value, (lhs, value) for ``lhs == value``."""
    if not comment:
        return None
    m = re.match(r"^([A-Za-z_][\w.\[\]]*)\s*==\s*(.+)$", comment)
    if m:
        value = expected_value(m.group(2))
        return None if value is None else (m.group(1), value[0])
    if not is_expression:
        return None
    value = expected_value(comment)
    return None if value is None else (None, value[0])


def run_doctest(block: Block) -> None:
    test = doctest.DocTestParser().get_doctest(block.code, {}, block.name, block.doc,
                                               block.line)
    out = io.StringIO()
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, out=out.write)
    assert runner.failures == 0, out.getvalue()


@pytest.mark.parametrize("block", PYTHON, ids=[b.name for b in PYTHON])
def test_python_block(block: Block, capsys):
    if block.no_run:
        pytest.skip(f"no-run: {block.no_run}")
    _needs_frameworks(block.code)
    if block.code.lstrip().startswith(">>>"):
        run_doctest(block)
    else:
        run_python(block)


# ----- shell blocks -----


def _asd(argv: list[str], where: str) -> str:
    from asd.cli.main import main

    out = io.StringIO()
    with redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as e:          # argparse's --help / errors
            code = e.code
    assert code in (0, None), f"{where}: `asd {shlex.join(argv)}` exited {code}"
    return out.getvalue()


def _command(line: str, where: str) -> list[str]:
    argv = shlex.split(line, comments=True)
    assert argv and argv[0] == "asd", (
        f"{where}: shell blocks run `asd` commands only; mark `{line}` "
        "<!-- no-run: why --> if it must not run here")
    return argv[1:]


@pytest.mark.parametrize("block", SHELL, ids=[b.name for b in SHELL])
def test_shell_block(block: Block):
    if block.no_run:
        pytest.skip(f"no-run: {block.no_run}")
    if block.lang == "bash":
        for k, line in enumerate(block.code.splitlines()):
            if line.strip() and not line.lstrip().startswith("#"):
                _asd(_command(line, f"{block.name}+{k + 1}"), f"{block.name}+{k + 1}")
        return
    command, shown, where = None, [], block.name
    for k, line in enumerate([*block.code.splitlines(), "$"]):
        if line.startswith("$"):
            if command is not None:
                got = _asd(command, where)
                want = doctest.OutputChecker()
                assert want.check_output("\n".join(shown) + "\n", got,
                                         doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE), (
                    f"{where}: shows\n" + "\n".join(shown) + f"\nbut prints\n{got}")
            where = f"{block.name}+{k + 1}"
            command, shown = (_command(line[1:], where) if line[1:].strip() else None), []
        else:
            shown.append(line)


# ----- the checker checks -----


def test_expected_values_are_read_from_comments():
    assert expected_value("1.0, for every random direction") == (1.0,)
    assert expected_value("(0.0, 1.0): exact one-sided derivative") == ((0.0, 1.0),)
    assert expected_value("tensor([1., 1., 1.])") == ([1.0, 1.0, 1.0],)
    assert expected_value("<tf.Tensor: [1., 1., 1.]>  (TensorFlow: 0)") == ([1.0, 1.0, 1.0],)
    assert expected_value("True; `asd prove mine.py:clip01` from the shell") == (True,)
    assert expected_value("g ∈ ∂loss(0) (Clarke)") is None
    assert expected_value("the straight-line program, as a listing") is None
    assert expected_value("1 by lexicographic") is None       # a number starting prose


def test_matches_fails_on_a_wrong_value():
    assert matches(np.array([1.0, 1.0]), [1.0, 1.0])
    assert not matches(np.array([1.0, 0.0]), [1.0, 1.0])
    assert not matches(np.array([1.0]), 1.0)                   # shape counts
    assert matches("numpy (because: x; y)", "numpy (because: ...)")
    assert not matches("torch", "numpy (because: ...)")
    assert matches((np.array([0.0, 1.0]), "limiting"), ([0.0, 1.0], "limiting"))
    assert not matches(np.float64(1.0), True)


def test_a_false_comment_fails_the_block():
    block = Block("x.md", 1, "python", "import numpy as np\nnp.abs(-2.0)   # 3.0", None)
    with pytest.raises(AssertionError, match=r"shows 3\.0"):
        run_python(block)
    ok = Block("x.md", 1, "python",
               "y = [1.0]\ny.append(2.0)   # y == [1.0, 2.0]\ny\n# [1.0, 2.0]", None)
    assert run_python(ok) == 2
