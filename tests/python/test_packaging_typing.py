"""The public API is typed (the package ships py.typed): every public function and module constructor
annotates all its parameters and its return, and the annotations resolve to real types."""

import inspect
import types
import typing

import pytest
import torch
import torch.distributed

import attnkit
from attnkit import functional, nn, tuner

# Names the TYPE_CHECKING-only imports of the modules stand for.
_TYPE_CHECKING_NAMES = {"torch": torch, "ProcessGroup": getattr(torch.distributed, "ProcessGroup", object)}


def _public_callables():
    """(qualified name, function) for every function of the public namespaces, and the constructor and
    forward of every public class that defines them in attnkit."""
    seen = set()
    for module in (attnkit, functional, nn, tuner):
        for name in module.__all__:
            obj = getattr(module, name)
            qualified = f"{module.__name__}.{name}"
            if inspect.isfunction(obj):
                if obj not in seen:
                    seen.add(obj)
                    yield qualified, obj
            elif inspect.isclass(obj) and obj.__module__.startswith("attnkit"):
                for method in ("__init__", "forward"):
                    function = getattr(obj, method, None)
                    if inspect.isfunction(function) and function.__module__.startswith("attnkit"):
                        if function not in seen:
                            seen.add(function)
                            yield f"{qualified}.{method}", function


PUBLIC = sorted(_public_callables(), key=lambda item: item[0])


def test_the_checked_functions_include_the_documented_api():
    functions = {function for _, function in PUBLIC}
    documented = [getattr(functional, n) for n in ("attention", "na1d", "na2d", "na3d", "sparse_attention",
                                                    "retention", "gemm", "merge_attentions")]
    documented += [getattr(tuner, n) for n in ("configure", "settings", "use_autotuner", "disable_autotuner", "sync",
                                               "unsync", "forward_config")]
    # The three modules share _NeighborhoodAttention's constructor and forward.
    documented += [nn.NeighborhoodAttention2D.__init__, nn.NeighborhoodAttention3D.forward]
    assert not [f.__name__ for f in documented if f not in functions]


@pytest.mark.parametrize("name,function", PUBLIC, ids=[name for name, _ in PUBLIC])
def test_every_parameter_and_the_return_are_annotated(name, function):
    signature = inspect.signature(function)  # follows functools.wraps to the real signature
    missing = [p.name for p in signature.parameters.values()
               if p.name != "self" and p.annotation is inspect.Parameter.empty]
    assert not missing, f"{name}: parameters without a type annotation: {missing}"
    # PEP 484: a constructor with annotated parameters may leave out its return (None).
    if not name.endswith(".__init__"):
        assert signature.return_annotation is not inspect.Signature.empty, f"{name}: no return annotation"


@pytest.mark.parametrize("name,function", PUBLIC, ids=[name for name, _ in PUBLIC])
def test_annotations_resolve(name, function):
    target = inspect.unwrap(function)
    namespace = {**_TYPE_CHECKING_NAMES, **target.__globals__}
    hints = typing.get_type_hints(target, globalns=namespace)
    assert "return" in hints or name.endswith(".__init__")


def _overloads(function):
    get_overloads = getattr(typing, "get_overloads", None)
    if get_overloads is None:
        pytest.skip("typing.get_overloads needs Python 3.11")
    return get_overloads(function)


# The overloads of _NeighborhoodFunction.__call__ (a protocol has no implementation to look them up by:
# get_overloads finds them by module and qualified name).
_NEIGHBORHOOD_CALL = types.SimpleNamespace(__module__=functional.__name__,
                                           __qualname__="_NeighborhoodFunction.__call__")


def _lse_returns(overloads):
    return {inspect.signature(o).parameters["return_lse"].annotation: inspect.signature(o).return_annotation
            for o in overloads}


def test_return_lse_selects_the_return_type_for_type_checkers():
    for function in (functional.attention, functional.sparse_attention, _NEIGHBORHOOD_CALL):
        returns = _lse_returns(_overloads(function))
        assert returns == {"Literal[False]": "torch.Tensor", "Literal[True]": "_OutLse",
                           "bool": "Union[torch.Tensor, _OutLse]"}


@pytest.mark.parametrize("function", [functional.na1d, functional.na2d, functional.na3d])
def test_the_neighborhood_overloads_list_the_parameters_of_the_functions(function):
    """Type checkers see na1d/na2d/na3d through _NeighborhoodFunction's overloads: a parameter added to the
    functions must be added there too."""
    expected = [(p.name, p.kind, p.annotation) for p in inspect.signature(function).parameters.values()
                if p.name != "return_lse"]
    for overload in _overloads(_NEIGHBORHOOD_CALL):
        parameters = list(inspect.signature(overload).parameters.values())[1:]  # without self
        assert [(p.name, p.kind, p.annotation) for p in parameters if p.name != "return_lse"] == expected
