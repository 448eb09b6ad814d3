#!/usr/bin/env python3
"""Makes one side of an msprobe dump pair for scripts/bench-msprobe.

    bench-msprobe-gen.py OUT WIDTH DEPTH BATCH {target,bench,bench2}

The model is DEPTH blocks of (Linear WIDTH x WIDTH, LayerNorm, GELU) trained for one SGD step on a
BATCH x WIDTH input, dumped by msprobe's PrecisionDebugger (task "tensor", level "L1": every API call's
inputs, outputs and their gradients as .pt files) into OUT/<side>/step0/proc*/. The bench side runs in fp32;
the target side runs the same model, same seed, under CPU bf16 autocast, so the two dumps hold the same
tensor names with different dtypes and values: a mixed-precision comparison. bench2 is the bench side again
with 1e-3 added to every 997th input element: a second fp32 run that differs from bench in every activation
and gradient (not in the weights it starts from), what `analyzer diff` measures element by element (diff
refuses target against bench: not one configuration). Runs on CPU torch.
Size of the pair (both sides): roughly (4 + 12 * DEPTH) * WIDTH * (BATCH + WIDTH) * 4 bytes
(512 4 128: 62 MB, 1024 8 256: 484 MB, 1024 16 512: 1.27 GB; 6144 1 512, a 144 MiB weight: 1.8 GB).
"""

import sys

import torch
from msprobe.pytorch import PrecisionDebugger


def main() -> None:
    if len(sys.argv) != 6 or sys.argv[5] not in ("target", "bench", "bench2"):
        sys.exit(__doc__)
    out, side = sys.argv[1], sys.argv[5]
    width, depth, batch = (int(a) for a in sys.argv[2:5])

    torch.manual_seed(0)
    blocks = []
    for _ in range(depth):
        blocks.extend([torch.nn.Linear(width, width), torch.nn.LayerNorm(width), torch.nn.GELU()])
    model = torch.nn.Sequential(*blocks)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(batch, width)
    if side == "bench2":
        inputs.view(-1)[::997] += 1e-3

    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=f"{out}/{side}")
    debugger.start(model)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=side == "target"):
        outputs = model(inputs)
    loss = outputs.float().pow(2).mean()
    loss.backward()
    optimizer.step()
    debugger.stop()


if __name__ == "__main__":
    main()
