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
Each validation's deep copy of a kept tree is made directly (``clone``, a third of what was left),
for a tree whose deep copy is exactly that (``is_plain``); any other object is deep-copied as before.
A condition expression's tokens (``ConditionExpressionParser._lex_condition_expression``, regular
expressions over the text, about half of its parse) are kept per text too: each parse gets a new
deque of new tokens, equal to the ones lexing makes (a token is a tuple of strings and an empty list).
Each of the ten checks walks the whole tree (``DepthFirstTraverser``), and at every node built the
check's map of node classes to processors again and tested the node against each class (``Node`` is
an ABC: a slow ``isinstance``); that walking was half of an ``UpdateItem``'s CPU in a quiet chaos run
(py-spy). ``traverse`` now builds the map once per walk and picks each node class's processor once:
the same processors, called on the same nodes in the same order.
"""

from __future__ import annotations

import copy
import copyreg
from collections import deque
from types import SimpleNamespace
from typing import Any

_INSTALLED = "_sluice_parsed_once"
BOUND = 4_096  # texts kept; past it the memo starts again (a long-lived server sent made-up texts)


def install() -> None:
    """Memoises update expressions' parses and their checks of the expression alone (idempotent)."""
    from moto.dynamodb.parsing import ast_nodes, expressions, validators

    parser: Any = expressions.UpdateExpressionParser  # type: ignore[attr-defined]  # moto's module is untyped
    node: Any = ast_nodes.Node  # type: ignore[attr-defined]
    original = parser.make
    if getattr(original, _INSTALLED, False):
        return
    parsed: dict[str, Any] = {}
    plain: dict[int, Any] = {}  # id -> a kept tree that ``clone`` copies as deepcopy would

    def make(cls: type[Any], expression_str: str) -> Any:
        try:
            return parsed[expression_str]
        except (KeyError, TypeError):
            pass
        tree = original.__func__(cls, expression_str)  # raises as before
        if isinstance(expression_str, str):
            if len(parsed) >= BOUND:
                parsed.clear()
                plain.clear()
            parsed[expression_str] = tree
            if is_plain(tree, node):
                plain[id(tree)] = tree
        return tree

    setattr(make, _INSTALLED, True)
    make.__wrapped__ = original  # type: ignore[attr-defined]
    parser.make = classmethod(make)
    _check_once(validators)
    _clone_plain(validators, plain)
    _lex_once()
    _traverse_by_class(ast_nodes)


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


_ATOMS = frozenset({str, int, float, bool, type(None)})  # what deepcopy hands back as they are
_STATE = ("type", "children", "parent")  # a parsed Node's attributes, in the order its __init__ sets them
_COPIED_BY_STATE: dict[type[Any], bool] = {}


def _copied_by_state(cls: type[Any]) -> bool:
    """Whether deepcopy copies an instance of ``cls`` as ``cls.__new__`` plus a deep copy of its
    ``__dict__`` (nothing of the class's own: no ``__deepcopy__``, reduce, state hooks or slots)."""
    if cls not in _COPIED_BY_STATE:
        own: Any = cls
        base: Any = object
        _COPIED_BY_STATE[cls] = (
            cls not in copyreg.dispatch_table and getattr(cls, "__deepcopy__", None) is None
            and own.__reduce_ex__ is base.__reduce_ex__ and own.__reduce__ is base.__reduce__
            and own.__getstate__ is base.__getstate__ and not hasattr(cls, "__setstate__")
            and not any("__slots__" in vars(k) for k in cls.__mro__))
    return _COPIED_BY_STATE[cls]


def is_plain(tree: Any, node: type[Any]) -> bool:
    """Whether ``tree`` is a tree of ``node`` objects whose deep copy ``clone`` makes: each node has
    exactly the parser's attributes, is its parent's child (the root has none) and appears once, and
    every other child is an atom (a string, a number, None)."""
    seen: set[int] = set()

    def ok(n: Any, parent: Any) -> bool:
        if not isinstance(n, node) or id(n) in seen or not _copied_by_state(type(n)) \
                or tuple(vars(n)) != _STATE or n.parent is not parent:
            return False
        seen.add(id(n))
        if n.children is None:
            return True
        return type(n.children) is list and all(type(c) in _ATOMS or ok(c, n) for c in n.children)

    return ok(tree, None)


def clone(n: Any, parent: Any = None) -> Any:
    """``copy.deepcopy`` of a tree ``is_plain`` accepts, made directly: the same classes, attributes
    in the same order, children copied, each child's parent its new parent, atoms shared."""
    cls: Any = type(n)
    new = cls.__new__(cls)
    children = n.children
    new.__dict__.update(type=n.type, children=None if children is None else
                        [c if type(c) in _ATOMS else clone(c, new) for c in children], parent=parent)
    return new


def _clone_plain(validators: Any, plain: dict[int, Any]) -> None:
    """The validators' ``deepcopy`` (of the tree each validation works on) clones a kept plain tree
    (``clone``); anything else it deep-copies as before."""
    stock = copy.deepcopy

    def deepcopy(x: Any, memo: dict[int, Any] | None = None) -> Any:
        if memo is None and plain.get(id(x)) is x:
            return clone(x)
        return stock(x, memo)

    deepcopy.__wrapped__ = stock  # type: ignore[attr-defined]
    validators.deepcopy = deepcopy


def _lex_once() -> None:
    """``ConditionExpressionParser`` lexes each text once; a text it cannot lex raises every time."""
    from moto.dynamodb.comparisons import ConditionExpressionParser

    original = ConditionExpressionParser._lex_condition_expression
    lexed: dict[str, tuple[Any, ...]] = {}

    def _lex_condition_expression(self: Any) -> Any:
        text = self.condition_expression
        tokens = lexed.get(text) if isinstance(text, str) else None
        if tokens is None:
            made = original(self)  # raises as before
            if isinstance(text, str) and all(type(t.children) is list and not t.children for t in made):
                if len(lexed) >= BOUND:
                    lexed.clear()
                lexed[text] = tuple(made)
            return made
        return deque(t._replace(children=[]) for t in tokens)

    _lex_condition_expression.__wrapped__ = original  # type: ignore[attr-defined]
    ConditionExpressionParser._lex_condition_expression = _lex_condition_expression  # type: ignore[method-assign]


def _traverse_by_class(ast_nodes: Any) -> None:
    """``DepthFirstTraverser.traverse`` as moto's own walk (``_walk``). A traverser class that
    overrides how a node is matched or walked keeps moto's own walk."""
    cls: Any = ast_nodes.DepthFirstTraverser
    original = cls.traverse
    if getattr(original, _INSTALLED, False):
        return
    node_class: Any = ast_nodes.Node
    stock = (cls.nodes_to_be_processed, cls.process, cls.traverse_node_recursively)
    is_node: dict[type[Any], bool] = {}

    def traverse(self: Any, node: Any) -> Any:
        kind = type(self)
        if (kind.nodes_to_be_processed, kind.process, kind.traverse_node_recursively) != stock:
            return original(self, node)
        return _walk(self, node, node_class, is_node)

    setattr(traverse, _INSTALLED, True)
    traverse.__wrapped__ = original  # type: ignore[attr-defined]
    cls.traverse = traverse


def _walk(traverser: Any, node: Any, node_class: Any, is_node: dict[type[Any], bool]) -> Any:
    """moto's depth-first walk (children first, then the node's processor, whose answer takes the
    node's place in its parent), with the processing map built once and each node class's
    processor (the map's first class it is a subclass of) looked up once."""
    mapping = traverser._processing_map()
    chosen: dict[type[Any], Any] = {}
    pre = traverser.pre_processing_of_child

    def processor(t: type[Any]) -> Any:
        if t not in chosen:
            chosen[t] = next((fn for key, fn in mapping.items() if issubclass(t, key)), None)
        return chosen[t]

    def walk(n: Any, child_id: int) -> Any:
        t = type(n)
        if t not in is_node:
            is_node[t] = isinstance(n, node_class)
        if not is_node[t]:
            return n
        parent = n.parent
        if n.children is not None:
            for i, child in enumerate(n.children):
                pre(n, i)
                walk(child, i)
        fn = processor(t)
        if fn is not None:
            n = fn(n)
            n.parent = parent
            if parent:
                parent.children[child_id] = n
        return n

    return walk(node, -1)
