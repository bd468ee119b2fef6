"""The format markers have one home: `rstar2/format_markers.py`.

No other module of `rstar2/` or `sim/` spells a marker of docs/format.md in a string (its
docstrings and comments may name them), except the Jinja chat template, which renders the
same layout and is checked against the markers here.
"""

from __future__ import annotations

import ast
from pathlib import Path

from rstar2.format_markers import FORMAT_MARKERS, MARKER_FIELDS, RESPONSE_PREFIX, RESPONSE_SUFFIX
from rstar2.model.chat_template import CHAT_TEMPLATE
from rstar2.model.tokenizer import SPECIAL_TOKENS, SpecialTokens

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "rstar2" / "format_markers.py"
TEMPLATE = ROOT / "rstar2" / "model" / "chat_template.py"


def _docstrings(tree: ast.Module) -> set[int]:
    """Ids of the string constants that stand alone as statements (docstrings)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def spelled_markers(path: Path) -> list[str]:
    """`line: marker` for each marker spelled in a string of `path` (docstrings aside)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docs = _docstrings(tree)
    return [
        f"{node.lineno}: {marker}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in docs
        for marker in FORMAT_MARKERS
        if marker in node.value
    ]


def test_no_module_but_the_home_spells_a_format_marker() -> None:
    sources = [*(ROOT / "rstar2").rglob("*.py"), *(ROOT / "sim").rglob("*.py")]
    found = {
        str(path.relative_to(ROOT)): hits
        for path in sources
        if path not in (HOME, TEMPLATE) and (hits := spelled_markers(path))
    }
    assert found == {}, f"format markers spelled outside rstar2/format_markers.py: {found}"


def test_the_home_spells_them_and_the_scan_finds_them() -> None:
    assert len(spelled_markers(HOME)) >= len(FORMAT_MARKERS)


def test_the_tokenizer_and_the_template_use_the_same_markers() -> None:
    assert SPECIAL_TOKENS == FORMAT_MARKERS
    assert set(MARKER_FIELDS) == {f.name for f in SpecialTokens.__dataclass_fields__.values()}
    assert set(MARKER_FIELDS.values()) == set(FORMAT_MARKERS)
    for marker in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"):
        assert marker in CHAT_TEMPLATE
    # the template opens and closes a tool response as the rollout forces it
    assert "'<|im_start|>user'" in CHAT_TEMPLATE and "'\\n<tool_response>\\n'" in CHAT_TEMPLATE
    assert RESPONSE_PREFIX.endswith("<tool_response>\n")
    assert RESPONSE_SUFFIX.startswith("\n</tool_response><|im_end|>")
