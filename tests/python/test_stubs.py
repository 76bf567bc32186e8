"""The type stubs and docstrings match the runtime: every public name of
nexar and every public method of Client/Seed/Request is in
nexar/__init__.pyi with the same parameter names, and has a docstring."""

import ast
import inspect
import os

import nexar


def _stub():
    path = os.path.join(os.path.dirname(nexar.__file__), "__init__.pyi")
    with open(path) as f:
        return ast.parse(f.read())


def _classes(tree):
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _params(fn):
    a = fn.args
    return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]


def test_every_public_name_is_stubbed():
    tree = _stub()
    names = set(_classes(tree))
    for n in tree.body:
        if isinstance(n, ast.FunctionDef):
            names.add(n.name)
        elif isinstance(n, (ast.AnnAssign,)) and isinstance(n.target, ast.Name):
            names.add(n.target.id)
    missing = set(nexar.__all__) - names
    assert not missing, f"not in the stubs: {missing}"


def test_methods_match_and_have_docstrings():
    classes = _classes(_stub())
    for cls in (nexar.Client, nexar.Seed):
        stub = {f.name: f for f in classes[cls.__name__].body if isinstance(f, ast.FunctionDef)}
        for name, obj in vars(cls).items():
            if name.startswith("_"):
                continue
            assert name in stub, f"{cls.__name__}.{name} is not in the stubs"
            fn = obj.fget if isinstance(obj, property) else obj
            assert fn.__doc__ or name in ("close", "closed"), f"{cls.__name__}.{name}: no docstring"
            if not isinstance(obj, property):
                got = list(inspect.signature(obj).parameters)
                assert got == _params(stub[name]), (cls.__name__, name, got, _params(stub[name]))
    for name in ("wait", "test"):
        assert getattr(nexar.Request, name).__doc__


def test_help_names_the_errors():
    doc = inspect.getdoc(nexar.Client.all_reduce)
    assert "MismatchError" in doc and "in place" in doc.lower()
