"""The contract between the parent and its stubs (stub/protocol.py), checked against the
code itself (issue 41, item 7): nothing here lists the kinds or the handlers by hand.

What is read, with ast:
- stub/protocol.py: a *kind* is an int constant that a constructor puts first in the tuple
  it returns; the constructor's *length* is that tuple's (the kind included). A function
  returning a plain tuple that starts with no kind makes a *record* (RequestMsg,
  ResponseMsg); one returning a tuple with `*` parts rewrites a record (checked by running
  it, below). Any other public int constant is a *named index*: `<KIND>_<FIELD>` (the
  longest kind that prefixes it) is a field of that kind's message; `<PREFIX>_<FIELD>`
  otherwise is a field of the one record whose fields its family names.
- the product code (pbserve/ is the parent's; stub/ and backend_utils/ the stub's; shm/ is
  transport and uses no kind): each kind constant used outside protocol.py must be
  1. a key of a *handler table* (a dict literal `{p.KIND: self._on_kind, ...}`), whose
     value is resolved to the method (or module function) it names;
  2. a *guard* `if message[0] == p.KIND [or message[0] == p.OTHER]:` or
     `if message[0] == p.KIND and <more>:`, whose body (and <more>) read that message;
  3. a lifecycle *wait* `_expect(p.KIND, ...)` (the parent's Supervisor), whose awaited
     result is unpacked or dropped;
  anything else is reported, so that a new way of reading messages cannot slip past.

The rules:
A. Each kind has exactly one constructor, called in the product code on one side only (the
   sender); the other side receives it.
B. Each kind has exactly one handler on the receiving side: one function among the handler
   tables (the same function in two tables, as LOG_SETTINGS on either queue of the stub,
   is one reader) plus the waits. No table of the sending side names it; no table names a
   key twice.
C. A handler reads its message (its first parameter after self) only by unpacking all of
   it (`_, a, b = message`: as many names as the constructor's length), by index 0 (the
   kind), by a named index of that kind, or by passing it to a method of its own class
   (followed). A handler that reads no field is only allowed for a kind with no field.
   A guard's reads and a wait's unpacking are held to the same rules.
D. A guarded read lies in the class (or module) of the kind's handler: a second reader
   elsewhere is an exception to list.
E. Named indices point at the constructor's field of that name (`REPLY_ERROR` is where
   `reply()` puts `error`; `REQ_ID` matches `request_id`, a field named FIELD or ending
   or starting with `_FIELD`/`FIELD_`); a record's indices name all of its fields.
F. No field of a message is read by number: outside stub/protocol.py, no subscript of a
   message variable has an integer literal index or slice bound, except the plain `[0]`
   (the kind, the one place every message shares). Message variables: names `message`,
   `msg` and `reply` (what this code calls a message or a record), a name bound to
   protocol's `decode(...)`, a handler's message parameter, a guard's variable.
   These, but `reply` (also a call's answer: stub/bls.py), are unpacked only by a handler,
   guard or wait (C), except `msg` elsewhere: a record read whole, as long as a record.

EXCEPTIONS below are the cases that break a rule for a reason; one that no longer
applies fails the test (it is stale: remove it).
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
from dataclasses import dataclass, field
from pathlib import Path

from stub import protocol

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = "stub/protocol.py"
SIDES = {"pbserve": "parent", "stub": "stub", "backend_utils": "stub", "shm": None}
OTHER = {"parent": "stub", "stub": "parent"}
MESSAGE_NAMES = {"message", "msg", "reply"}
# Code of another protocol, which reads no stub message: the frontend processes' (its own
# contract: tests/frontends/test_frontend_protocol.py); and a stub's BLS calls to another
# stub, which speaks to it as a frontend does (EXECUTE, RELEASE; RESPONSES back).
OTHER_PROTOCOLS = ("pbserve/frontends/", "stub/direct_bls.py")

# (rule, kind, detail) -> why
EXCEPTIONS = {
    ("reads no field", "READY", ""):
        "the stub's handshake: the parent only waits for it (Supervisor.launch) and "
        "reads neither its pid nor its pool prefix",
    ("read by another protocol", "ANSWERS", ""):
        "a stub's answers to a frontend process's requests in a batch the parent sent: "
        "read by that frontend (pbserve/frontends/direct.py), not by the parent",
    ("sent by another protocol", "QUEUED", "parent"):
        "a frontend process's request for a stub's own batcher (stub/batcher.py): sent "
        "only by frontends (pbserve/frontends/direct.py), on the parent's side of a stub",
    ("second reader", "REPLY", "stub/direct_replies.py:DirectReplies"):
        "a CALL_DIRECT's answer comes on the main queue, read there by the main thread "
        "while it waits; the other REPLYs come on the control queue (Stub's table)",
}


# -- stub/protocol.py -----------------------------------------------------------------
@dataclass
class Protocol:
    kinds: dict[str, str] = field(default_factory=dict)  # kind -> its constructor
    fields: dict[str, list] = field(default_factory=dict)  # constructor -> element names
    records: set[str] = field(default_factory=set)  # record constructors
    indices: dict[str, int] = field(default_factory=dict)  # named index -> value
    index_of: dict[str, str] = field(default_factory=dict)  # named index -> constructor
    problems: list[str] = field(default_factory=list)

    def length(self, kind: str) -> int:
        return len(self.fields[self.kinds[kind]])


def names_field(element: str | None, name: str) -> bool:
    return element is not None and (element == name or element.startswith(name + "_")
                                    or element.endswith("_" + name))


def read_protocol(tree: ast.Module) -> Protocol:
    proto = Protocol()
    consts: dict[str, int] = {}
    for stmt in tree.body:
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            continue
        target, value = stmt.targets[0], stmt.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) \
                and type(value.value) is int:
            consts[target.id] = value.value
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Call) \
                and isinstance(value.func, ast.Name) and value.func.id == "range":
            values = range(*[ast.literal_eval(a) for a in value.args])
            for name, number in zip([t.id for t in target.elts], values, strict=True):
                consts[name] = number
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        returned = [r.value for r in ast.walk(fn)
                    if isinstance(r, ast.Return) and isinstance(r.value, ast.Tuple)]
        if len(returned) != 1 or any(isinstance(e, ast.Starred) for e in returned[0].elts):
            continue  # encode/decode, or a record's rewrite (test_record_rewrites_...)
        elts = returned[0].elts
        proto.fields[fn.name] = [e.id if isinstance(e, ast.Name) else None for e in elts]
        first = elts[0].id if elts and isinstance(elts[0], ast.Name) else None
        if first in consts:
            if first in proto.kinds:
                proto.problems.append(f"{first} has two constructors: "
                                      f"{proto.kinds[first]}() and {fn.name}()")
            proto.kinds[first] = fn.name
        else:
            proto.records.add(fn.name)
    proto.indices = {n: v for n, v in consts.items()
                     if n not in proto.kinds and not n.startswith("_")}
    _resolve_indices(proto)
    return proto


def _resolve_indices(proto: Protocol) -> None:
    families: dict[str, list[str]] = {}
    for name, value in proto.indices.items():
        kind = max((k for k in proto.kinds if name.startswith(k + "_")), key=len, default=None)
        if kind is None:
            families.setdefault(name.split("_")[0], []).append(name)
            continue
        fields = proto.fields[proto.kinds[kind]]
        wanted = name[len(kind) + 1:].lower()
        if not 0 < value < len(fields) or not names_field(fields[value], wanted):
            proto.problems.append(f"named index {name} = {value}: {proto.kinds[kind]}() "
                                  f"puts no field '{wanted}' there ({fields})")
        proto.index_of[name] = proto.kinds[kind]
    for prefix, names in families.items():
        fits = [r for r in proto.records
                if all(proto.indices[n] < len(proto.fields[r])
                       and names_field(proto.fields[r][proto.indices[n]],
                                       n[len(prefix) + 1:].lower()) for n in names)]
        if len(fits) != 1:
            proto.problems.append(f"{', '.join(names)}: neither a kind (no constructor "
                                  f"puts it first) nor the named indices of one record "
                                  f"(records whose fields they name: {fits})")
            continue
        record = fits[0]
        if sorted(proto.indices[n] for n in names) != list(range(len(proto.fields[record]))):
            proto.problems.append(f"the {prefix}_ indices do not name every field of "
                                  f"{record}() once ({proto.fields[record]})")
        proto.index_of.update(dict.fromkeys(names, record))


# -- the product code ---------------------------------------------------------------
@dataclass
class Module:
    path: str
    tree: ast.Module
    side: str | None
    aliases: set[str] = field(default_factory=set)  # `from stub import protocol as p`
    direct: dict[str, str] = field(default_factory=dict)  # `from stub.protocol import X`
    # (node, its enclosing functions): `name[<int>]`, `a, b = name`, `name = <call>(...)`
    candidates: list[tuple[ast.AST, tuple]] = field(default_factory=list)
    _parents: dict[ast.AST, ast.AST] | None = None

    def __post_init__(self) -> None:
        self._visit(self.tree, ())

    def _visit(self, node: ast.AST, fns: tuple) -> None:
        """One pass: the imports of protocol.py and the candidates of rule F."""
        if isinstance(node, ast.ImportFrom) and node.module == "stub":
            self.aliases |= {a.asname or a.name for a in node.names if a.name == "protocol"}
        elif isinstance(node, ast.ImportFrom) and node.module == "stub.protocol":
            self.direct |= {a.asname or a.name: a.name for a in node.names}
        elif isinstance(node, ast.Import):
            self.aliases |= {a.asname for a in node.names
                             if a.name == "stub.protocol" and a.asname}
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            index = node.slice
            bounds = [index.lower, index.upper, index.step] \
                if isinstance(index, ast.Slice) else [index]
            if any(is_int(b) for b in bounds) and kind_read(node) is None:
                self.candidates.append((node, fns))
        elif isinstance(node, ast.Assign) and (
                isinstance(node.value, ast.Name) and isinstance(node.targets[0], ast.Tuple)
                or isinstance(node.value, ast.Call)):
            self.candidates.append((node, fns))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fns = (*fns, node)
        for child in ast.iter_child_nodes(node):
            self._visit(child, fns)

    @property
    def parents(self) -> dict[ast.AST, ast.AST]:
        if self._parents is None:
            self._parents = {child: node for node in ast.walk(self.tree)
                             for child in ast.iter_child_nodes(node)}
        return self._parents

    def name(self, node: ast.AST) -> str | None:
        """The protocol.py name `node` refers to, if any."""
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in self.aliases:
            return node.attr
        if isinstance(node, ast.Name) and node.id in self.direct:
            return self.direct[node.id]
        return None

    def enclosing(self, node: ast.AST, kinds: tuple) -> ast.AST | None:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, kinds):
                return node
        return None

    def owner(self, node: ast.AST) -> str:
        cls = self.enclosing(node, (ast.ClassDef,))
        return f"{self.path}:{cls.name}" if cls is not None else self.path

    def at(self, node: ast.AST) -> str:
        return f"{self.path}:{node.lineno}"


@functools.cache
def _product() -> tuple[tuple[str, ast.Module], ...]:
    trees = []
    for top in SIDES:
        for file in sorted((ROOT / top).rglob("*.py")):
            path = file.relative_to(ROOT).as_posix()
            if path != PROTOCOL and not path.startswith(OTHER_PROTOCOLS):
                trees.append((path, ast.parse(file.read_text(), path)))
    return tuple(trees)


def read_product() -> dict[str, ast.Module]:
    """The product's modules, parsed once: copy one (copy.deepcopy) to change it."""
    return dict(_product())


_MODULES: dict[int, Module] = {}


def _module(path: str, tree: ast.Module) -> Module:
    """The Module of a tree, made once per tree."""
    module = _MODULES.get(id(tree))
    if module is None or module.tree is not tree:
        module = _MODULES[id(tree)] = Module(path, tree, SIDES[path.split("/")[0]])
    return module


def is_int(node: ast.AST | None) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def kind_read(node: ast.AST) -> str | None:
    """The variable of a `var[0]` (a message's kind), else None."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
            and isinstance(node.slice, ast.Constant) and node.slice.value == 0 \
            and type(node.slice.value) is int:
        return node.value.id
    return None


@dataclass
class Reader:
    """Reads of one message variable, known to be of `kinds`."""
    module: Module
    var: str
    kinds: list[str]
    nodes: list[ast.AST]  # where the reads are
    where: str
    cls: ast.ClassDef | None
    owner: str = ""  # the class (or module) it is in: "path:Class"


class Contract:
    def __init__(self, proto: Protocol, trees: dict[str, ast.Module],
                 exceptions: dict) -> None:
        self.proto = proto
        self.modules = [_module(path, tree) for path, tree in trees.items()]
        self.readers = [m for m in self.modules if m.aliases or m.direct]
        self.exceptions = exceptions
        self.used: set = set()
        self.problems: list[str] = list(proto.problems)
        self.senders: dict[str, set] = {k: set() for k in proto.kinds}
        self.handlers: dict[str, dict[str, Reader]] = {k: {} for k in proto.kinds}
        self.guards: list[tuple[Reader, ast.If]] = []
        self.checked: set[int] = set()  # message reads already judged (ids)
        self.message_vars: dict[int, set[str]] = {}  # function id -> its message names

    def excused(self, key: tuple) -> bool:
        if key in self.exceptions:
            self.used.add(key)
            return True
        return False

    def run(self) -> list[str]:
        for module in self.readers:
            self._find_senders(module)
        for module in self.readers:
            self._scan(module)
        for kind in self.proto.kinds:
            self._judge_kind(kind)
        for reader, _ in self.guards:
            self._judge_guard(reader)
        for module in self.modules:
            self._no_numbered_reads(module)
        self.problems += [f"stale exception {key}: {why}"
                          for key, why in self.exceptions.items() if key not in self.used]
        return self.problems

    # -- finding the senders and the readers ----------------------------------------
    def _find_senders(self, module: Module) -> None:
        constructors = {c: k for k, c in self.proto.kinds.items()}
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Call) and module.name(node.func) in constructors:
                self.senders[constructors[module.name(node.func)]].add(
                    module.side or module.path)

    def _scan(self, module: Module) -> None:
        proto = self.proto
        guards: dict[int, ast.If] = {}
        for node in ast.walk(module.tree):
            kind = module.name(node) if isinstance(node, (ast.Attribute, ast.Name)) else None
            if kind not in proto.kinds:
                continue
            parent = module.parents[node]
            if isinstance(parent, ast.Dict) and node in parent.keys:
                self._table(module, parent)
            elif isinstance(parent, ast.Compare):
                guard = self._guard_if(module, parent)
                if guard is None:
                    self.problems.append(f"{module.at(node)}: {kind} is compared in a way "
                                         "this test does not know as a guard")
                else:
                    guards[id(guard)] = guard
            elif isinstance(parent, ast.Call) and parent.args[:1] == [node] \
                    and getattr(parent.func, "attr", getattr(parent.func, "id", "")) \
                    == "_expect":
                self._wait(module, parent, kind)
            else:
                self.problems.append(f"{module.at(node)}: {kind} used in a way this test "
                                     "does not know (not a handler table, guard or wait)")
        for guard in guards.values():
            self._add_guard(module, guard)

    def _table(self, module: Module, table: ast.Dict) -> None:
        if id(table) in self.checked:
            return  # met again at its next kind key
        self.checked.add(id(table))
        keys = [module.name(k) for k in table.keys]
        for kind in {k for k in keys if keys.count(k) > 1}:
            self.problems.append(f"{module.at(table)}: {kind} twice in one handler table")
        cls = module.enclosing(table, (ast.ClassDef,))
        for key, value in zip(keys, table.values):
            if key not in self.proto.kinds:
                continue
            if module.side != OTHER.get(self._sender(key)):
                self.problems.append(f"{module.at(table)}: a handler table of the "
                                     f"{module.side or module.path} names {key}, which "
                                     f"the {module.side or module.path} sends")
                continue
            fn = self._resolve(module, cls, value)
            if fn is None:
                self.problems.append(f"{module.at(value)}: the handler of {key} "
                                     f"({ast.unparse(value)}) is not a function found here")
                continue
            params = [a.arg for a in fn.args.args]
            params = params[1:] if cls is not None and params[:1] == ["self"] else params
            name = f"{module.owner(fn)}.{fn.name}"
            if params:
                self.message_vars.setdefault(id(fn), set()).add(params[0])
            self.handlers[key][name] = Reader(module, params[0] if params else "", [key],
                                              fn.body, name, cls, module.owner(fn))

    def _sender(self, kind: str) -> str | None:
        senders = self.senders[kind]
        if not senders:  # a kind only another protocol sends: the side it names
            excused = [side for (rule, k, side) in self.exceptions
                       if rule == "sent by another protocol" and k == kind]
            return excused[0] if excused and self.excused((
                "sent by another protocol", kind, excused[0])) else None
        return next(iter(senders)) if len(senders) == 1 else None

    @staticmethod
    def _resolve(module: Module, cls: ast.ClassDef | None, value: ast.AST
                 ) -> ast.FunctionDef | None:
        if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) \
                and value.value.id == "self" and cls is not None:
            scope, name = cls.body, value.attr
        elif isinstance(value, ast.Name):
            scope, name = module.tree.body, value.id
        else:
            return None
        return next((f for f in scope if isinstance(f, ast.FunctionDef) and f.name == name),
                    None)

    def _guard_if(self, module: Module, compare: ast.Compare) -> ast.If | None:
        """The `if` of a guard `var[0] == p.KIND [or ...] [and ...]`, if `compare` is one."""
        node = compare
        if not self._is_kind_test(module, node):
            return None
        parent = module.parents[node]
        if isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.Or):
            if not all(self._is_kind_test(module, v) for v in parent.values):
                return None
            node, parent = parent, module.parents[parent]
        if isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And) \
                and parent.values[0] is node:
            node, parent = parent, module.parents[parent]
        return parent if isinstance(parent, ast.If) and parent.test is node else None

    def _is_kind_test(self, module: Module, node: ast.AST) -> bool:
        return isinstance(node, ast.Compare) and len(node.ops) == 1 \
            and isinstance(node.ops[0], ast.Eq) and kind_read(node.left) is not None \
            and module.name(node.comparators[0]) in self.proto.kinds

    def _add_guard(self, module: Module, guard: ast.If) -> None:
        test = guard.test
        extra: list[ast.AST] = []
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
            test, extra = test.values[0], test.values[1:]
        compares = test.values if isinstance(test, ast.BoolOp) else [test]
        variables = {kind_read(c.left) for c in compares}
        kinds = [module.name(c.comparators[0]) for c in compares]
        if len(variables) != 1:
            self.problems.append(f"{module.at(guard)}: a guard on several variables")
            return
        fn = module.enclosing(guard, (ast.FunctionDef, ast.AsyncFunctionDef))
        reader = Reader(module, variables.pop(), kinds, [*extra, *guard.body],
                        f"the guard at {module.at(guard)}",
                        module.enclosing(guard, (ast.ClassDef,)), module.owner(guard))
        self.guards.append((reader, guard))
        if fn is not None:
            self.message_vars.setdefault(id(fn), set()).add(reader.var)

    def _wait(self, module: Module, call: ast.Call, kind: str) -> None:
        node = module.parents[call]
        node = module.parents[node] if isinstance(node, ast.Await) else node
        name = f"the wait at {module.at(call)}"
        if module.side != OTHER.get(self._sender(kind)):
            self.problems.append(f"{name} waits for {kind}, which its side sends")
        if isinstance(node, ast.Expr):  # dropped: reads no field
            self.handlers[kind][name] = Reader(module, "", [kind], [], name, None,
                                               module.owner(call))
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple):
            self.handlers[kind][name] = Reader(module, "", [kind], [node], name, None,
                                               module.owner(call))
            self._unpacked(node.targets[0], [kind], name)
        else:
            self.problems.append(f"{name}: {kind} is neither unpacked nor dropped")

    # -- judging them ---------------------------------------------------------------
    def _judge_kind(self, kind: str) -> None:
        senders = self.senders[kind] or {self._sender(kind)}
        if len(senders) != 1 or None in senders or next(iter(senders)) not in OTHER:
            self.problems.append(f"{kind} ({self.proto.kinds[kind]}()) must be sent by one "
                                 f"side, the parent or the stub; sent by {sorted(senders)}")
            return
        readers = self.handlers[kind]
        if len(readers) != 1 and not (
                not readers and self.excused(("read by another protocol", kind, ""))):
            self.problems.append(f"{kind} must have one handler on the "
                                 f"{OTHER[next(iter(senders))]}'s side, has {len(readers)}: "
                                 f"{sorted(readers)}")
        for reader in readers.values():
            if reader.var:  # a handler: judge its reads
                fn_reads = self._reads(reader, set())
            else:  # a wait: unpacked (judged by _wait) or dropped
                fn_reads = len(reader.nodes)
            if fn_reads == 0 and self.proto.length(kind) > 1 \
                    and not self.excused(("reads no field", kind, "")):
                self.problems.append(f"{reader.where} reads no field of {kind}, which has "
                                     f"{self.proto.length(kind) - 1}")

    def _judge_guard(self, reader: Reader) -> None:
        for kind in reader.kinds:
            owners = {r.owner for r in self.handlers[kind].values()}
            if reader.module.side != OTHER.get(self._sender(kind)):
                self.problems.append(f"{reader.where} reads {kind} on its sending side")
            if reader.owner not in owners \
                    and not self.excused(("second reader", kind, reader.owner)):
                self.problems.append(f"{reader.where} reads {kind} in {reader.owner}, but "
                                     f"its handler is in {sorted(owners)}")
        self._reads(reader, set())

    def _unpacked(self, target: ast.Tuple, kinds: list[str], where: str) -> None:
        if any(isinstance(e, ast.Starred) for e in target.elts):
            self.problems.append(f"{where} unpacks {kinds} with a starred name")
            return
        for kind in kinds:
            if len(target.elts) != self.proto.length(kind):
                self.problems.append(
                    f"{where} unpacks {len(target.elts)} fields of {kind}, whose "
                    f"constructor {self.proto.kinds[kind]}() makes {self.proto.length(kind)}")

    def _reads(self, reader: Reader, seen: set) -> int:
        """Judge every use of `reader.var` in its nodes; how many read a field."""
        module, var, reads = reader.module, reader.var, 0
        uses = [n for body in reader.nodes for n in ast.walk(body)
                if isinstance(n, ast.Name) and n.id == var and isinstance(n.ctx, ast.Load)]
        for use in uses:
            parent = module.parents[use]
            self.checked.add(id(use))
            if isinstance(parent, ast.Assign) and parent.value is use \
                    and isinstance(parent.targets[0], ast.Tuple):
                self._unpacked(parent.targets[0], reader.kinds, f"{reader.where} "
                               f"({module.at(parent)})")
                reads += 1
            elif isinstance(parent, ast.Subscript) and parent.value is use:
                self.checked.add(id(parent))
                index = module.name(parent.slice)
                if kind_read(parent) is not None:
                    continue
                if index in self.proto.index_of:
                    reads += 1
                    for kind in reader.kinds:
                        if self.proto.index_of[index] != self.proto.kinds[kind]:
                            self.problems.append(f"{module.at(parent)}: {index} is no field "
                                                 f"of {kind}")
                else:
                    self.problems.append(f"{module.at(parent)}: {ast.unparse(parent)} reads "
                                         f"{reader.kinds} not by a named index of protocol.py")
            elif isinstance(parent, ast.Call) and use in parent.args:
                fn = self._resolve(module, reader.cls, parent.func)
                if fn is None or reader.cls is None:
                    self.problems.append(f"{module.at(parent)}: {reader.where} passes its "
                                         f"message to {ast.unparse(parent.func)}, not a "
                                         "method of its class")
                    continue
                param = [a.arg for a in fn.args.args][1 + parent.args.index(use)]
                if (fn.name, param) not in seen:
                    seen.add((fn.name, param))
                    reads += self._reads(Reader(module, param, reader.kinds, fn.body,
                                                f"{reader.where} -> {fn.name}", reader.cls,
                                                reader.owner), seen)
            else:
                self.problems.append(f"{module.at(use)}: {reader.where} uses its message "
                                     f"in a way this test does not know: "
                                     f"{ast.unparse(parent)}")
        return reads

    # -- rule F ---------------------------------------------------------------------
    def _no_numbered_reads(self, module: Module) -> None:
        for node, fns in module.candidates:  # the decode-bound names, per function
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and fns \
                    and (module.name(node.value.func) == "decode"
                         or getattr(node.value.func, "id", "") == "decode"):
                self.message_vars.setdefault(id(fns[-1]), set()).update(
                    t.id for t in node.targets if isinstance(t, ast.Name))
        lengths = {len(self.proto.fields[r]) for r in self.proto.records}
        for node, fns in module.candidates:
            names = set(MESSAGE_NAMES).union(*[self.message_vars.get(id(f), ()) for f in fns])
            if isinstance(node, ast.Subscript) and node.value.id in names \
                    and id(node) not in self.checked:
                self.problems.append(f"{module.at(node)}: {ast.unparse(node)} reads a "
                                     "message by number; name the field in protocol.py")
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) \
                    and node.value.id in names - {"reply"} \
                    and id(node.value) not in self.checked \
                    and (node.value.id != "msg" or len(node.targets[0].elts) not in lengths):
                self.problems.append(
                    f"{module.at(node)}: {ast.unparse(node)[:60]} unpacks a message outside "
                    f"a handler, guard or wait (a record, `msg`, has {sorted(lengths)} "
                    "fields)")


def contract_problems(protocol_tree: ast.Module | None = None,
                      trees: dict[str, ast.Module] | None = None,
                      exceptions: dict | None = None) -> list[str]:
    protocol_tree = protocol_tree or ast.parse((ROOT / PROTOCOL).read_text())
    trees = read_product() if trees is None else trees
    contract = Contract(read_protocol(protocol_tree), trees,
                        EXCEPTIONS if exceptions is None else exceptions)
    return contract.run()


# -- the tests ----------------------------------------------------------------------
def test_every_message_kind_has_one_reader_that_reads_it_as_it_is_made():
    assert contract_problems() == []


def test_the_protocol_is_found():
    """Not vacuous: the kinds, their readers and the records are all found."""
    proto = read_protocol(ast.parse((ROOT / PROTOCOL).read_text()))
    kinds = {n: v for n, v in vars(protocol).items()
             if n.isupper() and not n.startswith("_") and n not in proto.indices}
    assert set(proto.kinds) == set(kinds)  # every public constant is a kind or an index
    assert len(set(kinds.values())) == len(kinds)  # no two kinds share a number
    assert {"request_msg", "response_record"} <= proto.records
    contract = Contract(proto, read_product(), EXCEPTIONS)
    contract.run()
    other = {k for (rule, k, _) in EXCEPTIONS if rule == "read by another protocol"}
    assert all(len(r) == (k not in other) for k, r in contract.handlers.items())
    assert contract.guards  # the parent's _unhandled and the stub's DirectReplies


def test_record_rewrites_keep_the_record():
    """The functions that rebuild a record (`with_inputs`, `in_sequence`: a `*msg[...]`
    tuple) return one as long, with each argument named like a field in that field."""
    proto = read_protocol(ast.parse((ROOT / PROTOCOL).read_text()))
    rewrites = [fn for name, fn in inspect.getmembers(protocol, inspect.isfunction)
                if list(inspect.signature(fn).parameters)[:1] == ["msg"]]
    assert rewrites
    for fn in rewrites:
        used = {n.id for n in ast.walk(ast.parse(inspect.getsource(fn)))
                if isinstance(n, ast.Name) and n.id in proto.index_of}
        [record] = {proto.index_of[n] for n in used}
        make = getattr(protocol, record)
        sample = make(**{p: (f"<{p}>",) for p in inspect.signature(make).parameters})
        params = list(inspect.signature(fn).parameters)[1:]
        got = fn(sample, *[(f"<new {p}>",) for p in params])
        assert len(got) == len(sample), fn.__name__
        for param in params:
            for place, name in enumerate(proto.fields[record]):
                if names_field(name, param):
                    assert got[place] == (f"<new {param}>",), (fn.__name__, param)


# -- the check can fail ---------------------------------------------------------------
def _protocol_tree() -> ast.Module:
    return ast.parse((ROOT / PROTOCOL).read_text())


def test_a_field_added_to_a_constructor_is_caught():
    tree = _protocol_tree()
    proto = read_protocol(tree)
    kind = next(k for k, c in proto.kinds.items() if len(proto.fields[c]) > 1)
    fn = next(f for f in tree.body
              if isinstance(f, ast.FunctionDef) and f.name == proto.kinds[kind])
    next(r for r in ast.walk(fn) if isinstance(r, ast.Return)).value.elts.append(
        ast.Constant(0))
    assert any(f"fields of {kind}," in p for p in contract_problems(tree))


def test_a_missing_or_second_handler_is_caught():
    trees = read_product()
    contract = Contract(read_protocol(_protocol_tree()), trees, EXCEPTIONS)
    contract.run()
    kind, reader = next((k, r) for k, rs in contract.handlers.items() for r in rs.values()
                        if r.var)  # a kind read by a handler table's entry
    path = reader.module.path
    trees[path] = copy.deepcopy(trees[path])  # its tables without that kind
    for table in ast.walk(trees[path]):
        if isinstance(table, ast.Dict):
            keys = [reader.module.name(k) for k in table.keys]
            while kind in keys:
                del table.values[keys.index(kind)], table.keys[keys.index(kind)]
                keys = [reader.module.name(k) for k in table.keys]
    assert any(f"{kind} must have one handler" in p and "has 0" in p
               for p in contract_problems(None, trees))
    side = reader.module.path.split("/")[0]
    extra = ast.parse(f"from stub import protocol as p\nclass Other:\n"
                      f"    def __init__(self):\n        self.t = {{p.{kind}: self.on}}\n"
                      f"    def on(self, message):\n        pass\n")
    problems = contract_problems(None, {**read_product(), f"{side}/_other.py": extra})
    assert any(f"{kind} must have one handler" in p and "has 2" in p for p in problems)


def test_a_read_by_number_and_a_misplaced_index_are_caught():
    probe = ast.parse("from stub import protocol as p\n"
                      "def f(message):\n    return message[1], message[-1], message[2:]\n"
                      "def g(message):\n"
                      "    if message[0] == p.SEND:\n        return message[p.REPLY_ERROR]\n")
    problems = contract_problems(None, {**read_product(), "pbserve/_probe.py": probe})
    assert sum("reads a message by number" in p for p in problems) == 3
    assert any("REPLY_ERROR is no field of SEND" in p for p in problems)
    tree = _protocol_tree()
    for stmt in tree.body:  # REPLY_ERROR and REPLY_VALUE swapped
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Tuple) \
                and [e.id for e in stmt.targets[0].elts][:1] == ["REPLY_CALL_ID"]:
            stmt.targets[0].elts[1:] = stmt.targets[0].elts[:0:-1]
    assert any("named index REPLY_ERROR" in p for p in contract_problems(tree))


def test_a_stale_exception_is_caught():
    stale = {**EXCEPTIONS, ("reads no field", "FINALIZE", ""): "FINALIZE has no field"}
    assert [p for p in contract_problems(exceptions=stale) if "stale" in p] == [
        "stale exception ('reads no field', 'FINALIZE', ''): FINALIZE has no field"]
