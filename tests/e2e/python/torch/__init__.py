"""Stand-in torch (tests only; see ../README.md): eager ops launched on the simulated CANN runtime."""

from . import _npu
from . import amp
from . import optim

init = _npu.init
finalize = _npu.finalize


def forward(step):
    """A forward pass: three ops, their values depending on the step."""
    x = [0.5 + step, -1.0, 2.0, 0.25]
    _npu.launch("GatherV2", [x], [x])
    y = [v * 2.0 for v in x]
    _npu.launch("MatMulV2", [x, x], [y])
    _npu.launch("Add", [y, x], [[a + b for a, b in zip(y, x)]])
