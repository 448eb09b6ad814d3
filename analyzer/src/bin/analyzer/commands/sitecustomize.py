"""accutrace's Python start-up hook, put first on PYTHONPATH by `analyzer record` (docs/COLLECTOR.md, "Steps").

It tells the preloaded collector where each training step ends, by calling its exported
`accutrace_step_end()` through ctypes:
- after every `step()` of a `torch.optim.Optimizer` (each optimizer class's own `step` is wrapped, once);
- with a loss scaler (torch.amp, torch.cuda.amp, torch_npu.npu.amp `GradScaler`), after its `update()`,
  the last call of an iteration: a step that an overflow makes `GradScaler.step(optimizer)` skip still ends,
  and the optimizer step that `GradScaler.step` runs is not counted on its own.
Nothing is imported ahead of the program: the wrapping happens when the program imports those modules.
Then the `sitecustomize` this one shadows, if there is one, runs as it would have without us.
"""

import ctypes
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading


def _step_end_function():
    try:
        function = ctypes.CDLL(None).accutrace_step_end
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_int32
    function.argtypes = []
    return function


_STEP_END = _step_end_function()
_DEPTH = threading.local()


def _counted(step, ends_step=True):
    """`step` that ends a training step when it returns (`ends_step`), unless it runs inside another
    wrapped call; with `ends_step` False it only keeps the calls it makes from ending one."""

    def step_and_count(*args, **kwargs):
        depth = getattr(_DEPTH, "n", 0)
        _DEPTH.n = depth + 1
        try:
            return step(*args, **kwargs)
        finally:
            _DEPTH.n = depth
            if ends_step and depth == 0 and _STEP_END is not None:
                _STEP_END()

    step_and_count.__wrapped__ = step
    step_and_count.__name__ = getattr(step, "__name__", "step")
    step_and_count.__doc__ = getattr(step, "__doc__", None)
    step_and_count._accutrace = True
    return step_and_count


def _wrap_method(cls, name, ends_step=True):
    method = cls.__dict__.get(name)
    if method is not None and not getattr(method, "_accutrace", False):
        setattr(cls, name, _counted(method, ends_step))


def _wrap_step_of(cls):
    _wrap_method(cls, "step")


def _patch_optimizer(module):
    optimizer = getattr(module, "Optimizer", None)
    if optimizer is None or getattr(optimizer.__init__, "_accutrace", False):
        return
    init = optimizer.__init__

    def __init__(self, *args, **kwargs):
        # Every class of the instance's hierarchy that defines its own step, wrapped once (a subclass's step
        # calling super().step() counts once: only the outermost call ends a step).
        for cls in type(self).__mro__:
            _wrap_step_of(cls)
        init(self, *args, **kwargs)

    __init__._accutrace = True
    optimizer.__init__ = __init__


def _patch_grad_scaler(module):
    scaler = getattr(module, "GradScaler", None)
    if scaler is not None:
        # step(optimizer) runs (or skips) the optimizer; update() ends the iteration.
        _wrap_method(scaler, "step", ends_step=False)
        _wrap_method(scaler, "update")


_PATCHES = {
    "torch.optim.optimizer": _patch_optimizer,
    "torch.amp.grad_scaler": _patch_grad_scaler,
    "torch.cuda.amp.grad_scaler": _patch_grad_scaler,
    "torch_npu.npu.amp.grad_scaler": _patch_grad_scaler,
}


class _PatchingLoader(importlib.abc.Loader):
    """Loads a module with the loader that would have, then patches it."""

    def __init__(self, inner, patch):
        self._inner = inner
        self._patch = patch

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        try:
            self._patch(module)
        except Exception as error:  # a patch must never break the program
            print(f"accutrace: cannot hook {module.__name__}: {error}", file=sys.stderr)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        patch = _PATCHES.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


def _install():
    for name, patch in _PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, _Finder())


def _chain():
    """Runs the sitecustomize that this one shadows, as site.py would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        sys.modules["sitecustomize"] = ours
        print(
            "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
            f"{type(error).__name__}: {error}",
            file=sys.stderr,
        )


_install()
_chain()
