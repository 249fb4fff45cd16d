"""__main__.py reads as the five boxes and one line per option: it decides nothing itself (every condition lives in
the option's module of ray_llm_eks/program/, where it can be read and removed alone)."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

DECISIONS = (ast.If, ast.IfExp, ast.For, ast.While, ast.Try, ast.Match, ast.comprehension, ast.BoolOp)


def test_the_program_s_entry_point_has_no_condition_loop_or_handler():
    tree = ast.parse((ROOT / "__main__.py").read_text())
    found = [f"line {node.lineno}: {type(node).__name__}" for node in ast.walk(tree) if isinstance(node, DECISIONS)
             if hasattr(node, "lineno")]  # fmt: skip
    assert found == []
    # one statement per box or option, besides the imports and the docstring
    statements = [node for node in tree.body if not isinstance(node, ast.Import | ast.ImportFrom | ast.Expr)]
    calls = [node for node in tree.body if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)]
    assert all(isinstance(node, ast.Assign) for node in statements) and len(statements) + len(calls) <= 20
