"""The small expression language of sweep specs: constraints and derived parameters.

`world_size % (tp * pp) == 0`, `world_size // (tp * pp)`, `min(8, tp * 2)`: integer and float
arithmetic, comparisons, `and`/`or`/`not`, `x if c else y`, and the functions in FUNCTIONS, over
the names a point defines. Parsed with Python's own `ast` and evaluated by walking the tree, so a
spec can never run code.
"""
from __future__ import annotations

import ast
import operator
from typing import Any, Callable


class ExprError(ValueError):
    """An expression that does not parse, or names or does something the language lacks."""


BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
FUNCTIONS: dict[str, Callable] = {"min": min, "max": max, "abs": abs, "int": int}


def parse(text: str) -> ast.Expression:
    """`text` as a checked tree; ExprError names what is not allowed."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"{text!r} is not an expression: {e.msg}") from None
    for node in ast.walk(tree):
        allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp,
                   ast.Name, ast.Constant, ast.Load, ast.Call, ast.Tuple, ast.List, ast.USub,
                   ast.UAdd, ast.Not, ast.And, ast.Or, *BINARY, *COMPARE)
        if not isinstance(node, allowed):
            raise ExprError(f"{text!r}: {type(node).__name__} is not allowed (arithmetic, "
                            f"comparisons, and/or/not, if-else and {', '.join(FUNCTIONS)} are)")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name)
                                               and node.func.id in FUNCTIONS and not node.keywords):
            raise ExprError(f"{text!r}: only {', '.join(FUNCTIONS)} can be called")
    return tree


def names(tree: ast.Expression) -> set[str]:
    """The names an expression reads (function names excluded)."""
    functions = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in functions}


def evaluate(tree: ast.Expression, env: dict[str, Any]) -> Any:
    """The value of a parsed expression with the names in `env`. Arithmetic errors (a division
    by zero) propagate as ArithmeticError; an unknown name is an ExprError."""
    return _eval(tree.body, env)


def _eval(node: ast.AST, env: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ExprError(f"unknown name {node.id!r} (known: {', '.join(sorted(env))})")
        return env[node.id]
    if isinstance(node, ast.BinOp):
        return BINARY[type(node.op)](_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env)
        return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}[type(node.op)](value)
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval(v, env) for v in node.values)
        return any(_eval(v, env) for v in node.values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, right_node in zip(node.ops, node.comparators):
            right = _eval(right_node, env)
            if not COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, env) if _eval(node.test, env) else _eval(node.orelse, env)
    if isinstance(node, ast.Call):
        return FUNCTIONS[node.func.id](*(_eval(a, env) for a in node.args))
    if isinstance(node, (ast.Tuple, ast.List)):
        return [_eval(e, env) for e in node.elts]
    raise ExprError(f"cannot evaluate {type(node).__name__}")  # parse() admits no other node
