"""The contract between a frontend process and the core (pbserve/frontends/protocol.py),
checked against the code with ast, as tests/stub/test_protocol_contract.py checks the
stub's: every kind has one constructor, is made on one side only, has exactly one
handler on the other (a handler table `{fp.KIND: self._on_kind}`), and that handler
reads it by unpacking all of it (as many names as the constructor's tuple), or reads
nothing of a kind without fields."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "pbserve" / "frontends"
SIDES = {"link.py": "core", "linked_core.py": "frontend", "direct.py": "frontend"}


def _kinds_and_lengths() -> tuple[dict[str, int], dict[str, str]]:
    """kind -> its tuple's length; kind -> its constructor's name."""
    tree = ast.parse((ROOT / "protocol.py").read_text())
    constants = {t.id for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name) and t.id.isupper()
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int)}
    lengths, makers = {}, {}
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        for ret in ast.walk(fn):
            if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple) \
                    and ret.value.elts and isinstance(ret.value.elts[0], ast.Name) \
                    and ret.value.elts[0].id in constants:
                kind = ret.value.elts[0].id
                assert kind not in makers, f"{kind} has two constructors"
                lengths[kind], makers[kind] = len(ret.value.elts), fn.name
    return lengths, makers


def _sides() -> dict[str, ast.Module]:
    """Each side's files, as one module."""
    sides: dict[str, ast.Module] = {}
    for name, side in SIDES.items():
        module = sides.setdefault(side, ast.Module(body=[], type_ignores=[]))
        module.body += ast.parse((ROOT / name).read_text()).body
    return sides


def _handlers(tree: ast.Module) -> dict[str, str]:
    """kind -> handler method name, from the dict literals keyed by `fp.KIND`."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values):
            if isinstance(key, ast.Attribute) and isinstance(key.value, ast.Name) \
                    and key.value.id == "fp" and isinstance(value, ast.Attribute):
                assert key.attr not in found, f"{key.attr} has two handlers"
                found[key.attr] = value.attr
    return found


def _senders(tree: ast.Module, makers: dict[str, str]) -> set[str]:
    called = {node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
              and node.func.value.id == "fp"}
    return {kind for kind, maker in makers.items() if maker in called}


def _method(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"no method {name}")


def test_every_kind_is_made_on_one_side_and_handled_once_on_the_other():
    lengths, makers = _kinds_and_lengths()
    trees = _sides()
    assert set(lengths) >= {"INFER", "RESPONSE", "CALL", "REPLY"}
    for kind in lengths:
        senders = [side for side, tree in trees.items() if kind in _senders(tree, makers)]
        readers = [side for side, tree in trees.items() if kind in _handlers(tree)]
        assert len(senders) == 1, f"{kind} is made by {senders or 'no side'}"
        assert readers == [s for s in trees if s != senders[0]], \
            f"{kind} (made by the {senders[0]}) is handled by {readers or 'no side'}"


def test_every_handler_reads_its_message_whole():
    lengths, _ = _kinds_and_lengths()
    for tree in _sides().values():
        for kind, name in _handlers(tree).items():
            handler = _method(tree, name)
            param = handler.args.args[1].arg
            unpacks = [node for node in ast.walk(handler) if isinstance(node, ast.Assign)
                       and isinstance(node.value, ast.Name) and node.value.id == param]
            reads = [node for node in ast.walk(handler) if isinstance(node, ast.Name)
                     and node.id == param]
            if lengths[kind] == 1:
                assert not reads, f"{name} reads {kind}, which has no field"
                continue
            assert len(unpacks) == 1 and len(reads) == 1, \
                f"{name} must read {kind} by unpacking it once, whole"
            target = unpacks[0].targets[0]
            assert isinstance(target, ast.Tuple) and len(target.elts) == lengths[kind], \
                f"{name} unpacks {kind} into {len(getattr(target, 'elts', []))} names, " \
                f"its constructor makes {lengths[kind]}"
