"""moto's DynamoDB update expressions, parsed and checked once per text (local stack and tests only).

moto 5.2 parses an ``UpdateItem``'s ``UpdateExpression`` twice per request (the handler, then the
backend), and validates it by walking the tree once per check, ten checks, twice for an item the
update creates. Three of the checks look at the expression alone: at most one clause of each kind
(``ActionCountValidator``, which walks every subtree again from each node), no path set twice
(``OverlappingPathsValidator``), no key attribute updated (``UpdateHashRangeKeyValidator``). The
jobs table's writes are a few dozen texts sent over and over: in the local stack's moto server,
``UpdateItem`` was three quarters of the server's CPU in ``tests/stack/test_parking_stack.py``, and
of that, the parses and these three checks were about 40% (cProfile).

``install`` keeps each text's tree (``UpdateExpressionParser.make``): every user of the tree reads it
(``find_clauses``) or validates a deep copy of it (``Validator.__init__``), so one tree serves every
request. It runs the three checks once per tree, attribute names and table key: they read nothing
else (no value, no item) and change nothing, so a later request could only pass them again. An
expression that fails to parse or fails a check is never kept: it fails the same way every time.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

_INSTALLED = "_sluice_parsed_once"
BOUND = 4_096  # texts kept; past it the memo starts again (a long-lived server sent made-up texts)


def install() -> None:
    """Memoises update expressions' parses and their checks of the expression alone (idempotent)."""
    from moto.dynamodb.parsing import expressions, validators

    parser: Any = expressions.UpdateExpressionParser  # type: ignore[attr-defined]  # moto's module is untyped
    original = parser.make
    if getattr(original, _INSTALLED, False):
        return
    parsed: dict[str, Any] = {}

    def make(cls: type[Any], expression_str: str) -> Any:
        try:
            return parsed[expression_str]
        except (KeyError, TypeError):
            pass
        tree = original.__func__(cls, expression_str)  # raises as before
        if isinstance(expression_str, str):
            if len(parsed) >= BOUND:
                parsed.clear()
            parsed[expression_str] = tree
        return tree

    setattr(make, _INSTALLED, True)
    make.__wrapped__ = original  # type: ignore[attr-defined]
    parser.make = classmethod(make)
    _check_once(validators)


def structural_checks(validators: Any) -> tuple[type[Any], ...]:
    """The checks of the expression alone, as moto runs them: first, before any that reads a value
    or the item. Empty if this moto's validator does otherwise (then every check runs every time)."""
    alone = (validators.ActionCountValidator, validators.OverlappingPathsValidator,
             validators.UpdateHashRangeKeyValidator)
    table = SimpleNamespace(table_key_attrs=[], attr=[], attribute_keys=[])
    probe = SimpleNamespace(expression_attribute_names={}, expression_attribute_values={}, item=None,
                            table=table)
    kinds = tuple(type(p) for p in validators.UpdateExpressionValidator.get_ast_processors(probe))
    return alone if kinds[:len(alone)] == alone and not set(kinds[len(alone):]) & set(alone) else ()


def _check_once(validators: Any) -> None:
    """``UpdateExpressionValidator`` runs ``structural_checks`` once per (tree, names, table key)."""
    alone = structural_checks(validators)
    if not alone:
        return
    cls = validators.UpdateExpressionValidator
    init, validate = cls.__init__, cls.validate
    passed: dict[tuple[Any, ...], Any] = {}  # key -> its tree, held so that its id is never reused

    def __init__(self: Any, expression: Any, expression_attribute_names: Any,
                 expression_attribute_values: Any, item: Any, table: Any) -> None:
        init(self, expression, expression_attribute_names, expression_attribute_values, item, table)
        try:
            names = tuple(sorted((expression_attribute_names or {}).items()))
            self._sluice_checked = (id(expression), names, tuple(table.table_key_attrs))
            hash(self._sluice_checked)
        except TypeError:  # unhashable names: checked every time, as moto does
            self._sluice_checked = None
        self._sluice_tree = expression

    def checked_validate(self: Any) -> Any:
        key = getattr(self, "_sluice_checked", None)
        if key is None:
            return validate(self)
        done = passed.get(key) is self._sluice_tree
        node = self.node_to_validate
        for processor in self.processors:
            if isinstance(processor, alone):
                if not done:
                    node = processor.traverse(node)
                continue
            if not done:  # every check of the expression alone ran, and none raised
                if len(passed) >= BOUND:
                    passed.clear()
                passed[key] = self._sluice_tree
                done = True
            node = processor.traverse(node)
        return node

    checked_validate.__wrapped__ = validate  # type: ignore[attr-defined]
    __init__.__wrapped__ = init  # type: ignore[attr-defined]
    cls.__init__ = __init__
    cls.validate = checked_validate
