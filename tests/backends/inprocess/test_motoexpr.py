"""moto's update expressions parsed and checked once per text (``sluice_dev.local.motoexpr``): every
request, good or hostile, gets the answer moto's own code gives it, and the item the same writes."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb.comparisons import ConditionExpressionParser
from moto.dynamodb.parsing import ast_nodes, validators
from moto.dynamodb.parsing.expressions import UpdateExpressionParser

from sluice_dev.local import motoexpr

pytestmark = pytest.mark.timeout(120)

CLS = validators.UpdateExpressionValidator
LEXER = ConditionExpressionParser._lex_condition_expression
WALK = ast_nodes.DepthFirstTraverser.traverse
# by conftest.py
INSTALLED = (UpdateExpressionParser.__dict__["make"], CLS.__init__, CLS.validate, validators.deepcopy)


def _stock() -> None:
    make, init, validate, deepcopy = INSTALLED
    UpdateExpressionParser.make = classmethod(make.__func__.__wrapped__.__func__)  # type: ignore[method-assign]
    CLS.__init__, CLS.validate = init.__wrapped__, validate.__wrapped__  # type: ignore[method-assign]
    validators.deepcopy = deepcopy.__wrapped__
    ConditionExpressionParser._lex_condition_expression = LEXER.__wrapped__  # type: ignore[attr-defined]
    ast_nodes.DepthFirstTraverser.traverse = WALK.__wrapped__  # type: ignore[attr-defined]


def _restore() -> None:
    UpdateExpressionParser.make, CLS.__init__, CLS.validate, validators.deepcopy = INSTALLED  # type: ignore[method-assign]
    ConditionExpressionParser._lex_condition_expression = LEXER  # type: ignore[method-assign]
    ast_nodes.DepthFirstTraverser.traverse = WALK  # type: ignore[method-assign]


@contextlib.contextmanager
def stock_moto() -> Iterator[None]:
    """moto as it ships, for the block: the answers every patched request must give."""
    _stock()
    try:
        yield
    finally:
        _restore()


@pytest.fixture
def stock() -> Iterator[None]:
    with stock_moto():
        yield


# (update expression, names, values): each sent twice in a row, on the item "j" (created by the first)
REQUESTS: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    ("SET #a = :a, #b = if_not_exists(#b, :b)", {"#a": "a", "#b": "b"}, {":a": {"S": "x"}, ":b": {"N": "1"}}),
    ("set #a = :a", {"#a": "a"}, {":a": {"S": "lower"}}),
    ("SET #a = :a SET #b = :b", {"#a": "a", "#b": "b"}, {":a": {"S": "x"}, ":b": {"S": "y"}}),  # two SETs
    ("ADD #n :one ADD #m :one", {"#n": "n", "#m": "m"}, {":one": {"N": "1"}}),  # two ADDs
    ("SET #a = :a, #a = :b", {"#a": "a"}, {":a": {"S": "x"}, ":b": {"S": "y"}}),  # one path twice
    # the same text, harmless with these names and refused with the next: names are part of the check
    ("SET #p = :a, #q = :b", {"#p": "p", "#q": "q"}, {":a": {"S": "x"}, ":b": {"S": "y"}}),
    ("SET #p = :a, #q = :b", {"#p": "p", "#q": "p"}, {":a": {"S": "x"}, ":b": {"S": "y"}}),
    ("SET #p = :a, #q = :b", {"#p": "p", "#q": "job_id"}, {":a": {"S": "x"}, ":b": {"S": "y"}}),  # the key
    ("SET m.inner = :a, m = :b", {}, {":a": {"S": "x"}, ":b": {"M": {}}}),  # overlapping paths
    ("REMOVE #a, #a", {"#a": "a"}, {}),
    ("SET #a = = :a", {"#a": "a"}, {":a": {"S": "x"}}),  # does not parse
    ("SET #a = :missing", {"#a": "a"}, {":a": {"S": "x"}}),  # a value the request does not give
    # passes the checks of the text, fails on the item: after a pass, later checks still run
    ("SET #z = #z + :one", {"#z": "nothing-here"}, {":one": {"N": "1"}}),
    ("ADD #n :one, #s :s", {"#n": "n", "#s": "s"}, {":one": {"N": "2"}, ":s": {"SS": ["a", "b"]}}),
    ("DELETE #s :s REMOVE #a", {"#s": "s", "#a": "a"}, {":s": {"SS": ["a"]}}),
    ("SET #b = #b - :one, #l = list_append(if_not_exists(#l, :e), :l)", {"#b": "b", "#l": "l"},
     {":one": {"N": "1"}, ":e": {"L": []}, ":l": {"L": [{"S": "v"}]}}),
    ("SET #s = :a", {"#s": "s"}, {":a": {"N": "3"}}),  # a set replaced by a number: allowed
    ("ADD #s :s", {"#s": "s"}, {":s": {"SS": ["a"]}}),  # adding a set to a number: refused
]


def _answers(requests: list[tuple[str, dict[str, str], dict[str, Any]]]) -> list[Any]:
    """What each request got (its attributes, or its error's code and message), then the items."""
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        db.create_table(TableName="t", KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
                        AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}],
                        BillingMode="PAY_PER_REQUEST")
        got: list[Any] = []
        for expression, names, values in requests:
            for _ in range(2):
                kwargs: dict[str, Any] = {"ExpressionAttributeNames": names} if names else {}
                if values:
                    kwargs["ExpressionAttributeValues"] = values
                try:
                    got.append(db.update_item(TableName="t", Key={"job_id": {"S": "j"}},
                                              UpdateExpression=expression, ReturnValues="ALL_NEW",
                                              **kwargs).get("Attributes"))
                except ClientError as exc:
                    got.append((exc.response["Error"]["Code"], exc.response["Error"]["Message"]))
        got.append(db.scan(TableName="t")["Items"])
    return got


def test_every_request_gets_motos_own_answer_and_leaves_the_same_item() -> None:
    with stock_moto():
        stock = _answers(REQUESTS)
    fast = _answers(REQUESTS)
    assert fast == stock
    refused = [a for a in stock[:-1] if isinstance(a, tuple)]
    assert len(refused) >= 20  # the hostile texts were refused (twice each), not quietly applied


def test_a_text_is_parsed_once_and_its_checks_run_once_per_names(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "SET #kept_once = :a, #also_once = :b"
    assert UpdateExpressionParser.make(text) is UpdateExpressionParser.make(text)
    ran: list[str] = []
    for kind in motoexpr.structural_checks(validators):
        traverse = kind.traverse
        monkeypatch.setattr(kind, "traverse", lambda self, node, t=traverse: ran.append(type(self).__name__)
                            or t(self, node))
    values = {":a": {"S": "x"}, ":b": {"S": "y"}}
    requests = [(text, {"#kept_once": "a", "#also_once": "b"}, values)] * 2
    _answers(requests)
    # the first request's two validations (an item it creates, then the item) run the three checks once
    assert ran == ["ActionCountValidator", "OverlappingPathsValidator", "UpdateHashRangeKeyValidator"]
    ran.clear()
    _answers([(text, {"#kept_once": "a", "#also_once": "c"}, values)])  # other names: checked again
    assert len(ran) == 3


def test_a_refused_text_is_refused_every_time_never_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[int] = []
    traverse = validators.ActionCountValidator.traverse
    monkeypatch.setattr(validators.ActionCountValidator, "traverse",
                        lambda self, node: ran.append(1) or traverse(self, node))
    values = {":a": {"S": "x"}, ":b": {"S": "y"}}
    answers = _answers([("SET #a = :a SET #b = :b", {"#a": "a", "#b": "b"}, values)])
    assert [a[0] for a in answers[:2]] == ["ValidationException"] * 2 and len(ran) == 2


def test_stock_moto_checks_every_time(stock: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``install`` changes (this test's counterpart above): stock moto parses and checks again."""
    text = "SET #a = :a"
    assert UpdateExpressionParser.make(text) is not UpdateExpressionParser.make(text)
    ran: list[int] = []
    traverse = validators.ActionCountValidator.traverse
    monkeypatch.setattr(validators.ActionCountValidator, "traverse",
                        lambda self, node: ran.append(1) or traverse(self, node))
    _answers([(text, {"#a": "a"}, {":a": {"S": "x"}})])
    assert len(ran) == 3  # the first request validates twice (the item it creates, then the item)


def test_install_is_idempotent_and_finds_the_checks_of_the_text_alone() -> None:
    motoexpr.install()
    now = (UpdateExpressionParser.__dict__["make"], CLS.__init__, CLS.validate, validators.deepcopy)
    assert now == INSTALLED and ast_nodes.DepthFirstTraverser.traverse is WALK
    assert motoexpr.structural_checks(validators) == (
        validators.ActionCountValidator, validators.OverlappingPathsValidator,
        validators.UpdateHashRangeKeyValidator)


def _shape(tree: Any) -> Any:
    """A tree as nested tuples: each node's class, its attributes in order, its children, and whether
    its parent is the node it hangs from."""
    def walk(n: Any, parent: Any) -> Any:
        if not isinstance(n, ast_nodes.Node):
            return (type(n), n)
        return (type(n), tuple(vars(n)), n.type, n.parent is parent,
                None if n.children is None else tuple(walk(c, n) for c in n.children))
    return walk(tree, None)


TEXTS = [*sorted({r[0] for r in REQUESTS if r[0] != "SET #a = = :a"}), "SET a[1].b.c = :a",
         "REMOVE a[0], b.c[2]", "SET #a = #a + :b", "SET #l = list_append(:l, #l)",
         "DELETE #s :s ADD #n :n SET #x = :x REMOVE #y"]


@pytest.mark.parametrize("text", TEXTS)
def test_a_kept_tree_is_cloned_as_deepcopy_copies_it(text: str) -> None:
    tree = UpdateExpressionParser.make(text)
    assert motoexpr.is_plain(tree, ast_nodes.Node)
    made, copied = motoexpr.clone(tree), copy.deepcopy(tree)
    assert _shape(made) == _shape(copied) == _shape(tree)
    assert made is not tree and all(a is not b for a, b in zip(_nodes(made), _nodes(tree), strict=True))
    assert validators.deepcopy(tree) is not tree and _shape(validators.deepcopy(tree)) == _shape(copied)


def _nodes(tree: Any) -> list[Any]:
    return [tree, *(n for c in tree.children or [] if isinstance(c, ast_nodes.Node) for n in _nodes(c))]


def test_a_tree_clone_would_copy_otherwise_is_deep_copied() -> None:
    tree = copy.deepcopy(UpdateExpressionParser.make("SET #a = :a, #b = :b"))
    set_clause = tree.children[0]
    assert motoexpr.is_plain(tree, ast_nodes.Node)
    stray = set_clause.children[0].parent = ast_nodes.UpdateExpression(children=None)  # a parent elsewhere
    assert not motoexpr.is_plain(tree, ast_nodes.Node)
    copied = validators.deepcopy(tree)  # not a kept tree: the stock deepcopy, the stray parent copied too
    assert copied.children[0].children[0].parent is not copied.children[0]
    assert type(copied.children[0].children[0].parent) is type(stray)
    tree.children[0].children[0].parent = set_clause
    shared = ast_nodes.ExpressionAttributeName("#a")
    twice = ast_nodes.UpdateExpressionPath(children=[shared, shared])  # one node in two places
    assert not motoexpr.is_plain(twice, ast_nodes.Node)
    extra = UpdateExpressionParser.make("SET #e = :e")
    extra_copy = copy.deepcopy(extra)
    extra_copy.note = "an attribute the parser never sets"
    assert not motoexpr.is_plain(extra_copy, ast_nodes.Node)


def test_each_validation_of_a_kept_tree_clones_it(monkeypatch: pytest.MonkeyPatch) -> None:
    cloned: list[Any] = []
    clone = motoexpr.clone

    def counted(tree: Any, parent: Any = None) -> Any:
        if parent is None:
            cloned.append(tree)
        return clone(tree, parent)

    monkeypatch.setattr(motoexpr, "clone", counted)
    text = "SET #cloned = :a"
    _answers([(text, {"#cloned": "a"}, {":a": {"S": "x"}})])
    # a new item's request validates twice, the next request once: each a clone of the kept tree
    assert cloned == [UpdateExpressionParser.make(text)] * 3


# (condition expression, names, values): each tried twice on a put of the item "c", then twice on an
# update of it; good texts, texts that do not parse, a reserved word, an unbalanced parenthesis
CONDITIONS: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    ("attribute_not_exists(#id)", {"#id": "job_id"}, {}),
    ("attribute_exists(#id) AND #st = :s", {"#id": "job_id", "#st": "st"}, {":s": {"S": "new"}}),
    ("#st = :s AND #tok = :t", {"#st": "st", "#tok": "tok"}, {":s": {"S": "new"}, ":t": {"N": "1"}}),
    ("size(#kids) = :n OR attribute_not_exists(#kids)", {"#kids": "kids"}, {":n": {"N": "0"}}),
    ("NOT contains(#e, :x)", {"#e": "e"}, {":x": {"S": "x"}}),
    ("#st IN (:a, :b)", {"#st": "st"}, {":a": {"S": "new"}, ":b": {"S": "old"}}),
    ("#tok BETWEEN :a AND :b", {"#tok": "tok"}, {":a": {"N": "0"}, ":b": {"N": "5"}}),
    ("(#st <> :s) AND (#tok >= :t)", {"#st": "st", "#tok": "tok"}, {":s": {"S": "gone"}, ":t": {"N": "1"}}),
    ("#st = = :s", {"#st": "st"}, {":s": {"S": "new"}}),
    ("#st == :s", {"#st": "st"}, {":s": {"S": "new"}}),
    ("((#st = :s)", {"#st": "st"}, {":s": {"S": "new"}}),
    ("status = :s", {}, {":s": {"S": "new"}}),  # a reserved word as a name
    ("#st = :s", {"#st": "st"}, {":s": {"S": "new"}, ":unused": {"S": "x"}}),
    ("#st = :s ; DROP", {"#st": "st"}, {":s": {"S": "new"}}),
]


def _conditioned(conditions: list[tuple[str, dict[str, str], dict[str, Any]]]) -> list[Any]:
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        db.create_table(TableName="t", KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
                        AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}],
                        BillingMode="PAY_PER_REQUEST")
        got: list[Any] = []

        def attempt(call: Any, **kwargs: Any) -> None:
            try:
                got.append(call(TableName="t", **kwargs).get("Attributes"))
            except ClientError as exc:
                got.append((exc.response["Error"]["Code"], exc.response["Error"]["Message"]))
            except ValueError as exc:  # moto's own failure (size() of a missing attribute), as it is
                got.append(("ValueError", str(exc)))

        for i, (condition, names, values) in enumerate(conditions):
            extra: dict[str, Any] = {"ExpressionAttributeNames": names} if names else {}
            if values:
                extra["ExpressionAttributeValues"] = values
            for _ in range(2):
                item = {"job_id": {"S": "c"}, "st": {"S": "new"}, "tok": {"N": str(i % 3)}}
                attempt(db.put_item, Item=item, ConditionExpression=condition, **extra)
                update_names = {**names, "#tk": "tok"}
                attempt(db.update_item, Key={"job_id": {"S": "c"}}, UpdateExpression="ADD #tk :one",
                        ConditionExpression=condition, ExpressionAttributeNames=update_names,
                        ExpressionAttributeValues={**values, ":one": {"N": "1"}}, ReturnValues="ALL_NEW")
        got.append(db.scan(TableName="t")["Items"])
    return got


def test_every_condition_gets_motos_own_answer() -> None:
    with stock_moto():
        stock = _conditioned(CONDITIONS)
    assert _conditioned(CONDITIONS) == stock
    refused = [a for a in stock[:-1] if isinstance(a, tuple)]
    assert len(refused) >= 20 and len(stock) - 1 - len(refused) >= 10  # both kinds of answer


def test_a_condition_is_lexed_once_per_text(monkeypatch: pytest.MonkeyPatch) -> None:
    lexed: list[str] = []
    text = "#lexed_once = :v AND attribute_exists(#other)"

    def parse() -> Any:
        parser = ConditionExpressionParser(text, {"#lexed_once": "a", "#other": "b"}, {":v": {"S": "x"}})
        return parser._lex_condition_expression()

    original_lex_one = ConditionExpressionParser._lex_one_node
    monkeypatch.setattr(ConditionExpressionParser, "_lex_one_node",
                        lambda self, rest: lexed.append(rest) or original_lex_one(self, rest))
    first, second = parse(), parse()
    assert first == second and first is not second
    assert all(a is not b and a.children is not b.children for a, b in zip(first, second, strict=True))
    assert lexed and lexed[0] == text and lexed.count(text) == 1  # the second parse lexed nothing


def test_a_walk_processes_the_same_nodes_in_the_same_order_and_an_overriding_walker_keeps_moto_s() -> None:
    """Every node class a map names, subclasses first matched by the map's order, each processor's
    answer put in its parent's place; a traverser that overrides ``process`` is walked by moto's own."""
    tree = UpdateExpressionParser.make("SET #a = :a, #b = if_not_exists(#b, :b) REMOVE #c ADD #n :one")

    class Recorder(ast_nodes.DepthFirstTraverser):  # type: ignore[misc]
        def __init__(self) -> None:
            self.seen: list[tuple[str, str]] = []

        def _processing_map(self) -> dict[Any, Any]:
            return {ast_nodes.UpdateExpressionSetAction: self.first, ast_nodes.Node: self.other}

        def first(self, node: Any) -> Any:
            self.seen.append(("set", type(node).__name__))
            return node

        def other(self, node: Any) -> Any:
            self.seen.append(("node", type(node).__name__))
            return copy.copy(node)  # a new node: it must take the old one's place

    class Overriding(Recorder):
        def process(self, node: Any) -> Any:
            self.seen.append(("own", type(node).__name__))
            return node

    def run(kind: type[Recorder], stock: bool) -> tuple[list[tuple[str, str]], Any]:
        walker, copied = kind(), copy.deepcopy(tree)
        walk = WALK.__wrapped__ if stock else WALK  # type: ignore[attr-defined]
        return walker.seen, _shape(walk(walker, copied))

    fast, stock = run(Recorder, stock=False), run(Recorder, stock=True)
    assert fast == stock and ("set", "UpdateExpressionSetAction") in fast[0] and len(fast[0]) > 10
    assert run(Overriding, stock=False) == run(Overriding, stock=True)
    assert run(Overriding, stock=False)[0][0][0] == "own"
