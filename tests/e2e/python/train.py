"""A training loop as a PyTorch user writes it: forward, then GradScaler.step(optimizer) and update().
Step `--skip` overflows: the scaler skips the optimizer, the step still ends. Prints each step's ops."""

import sys

import torch
from torch.amp import GradScaler

skip = int(sys.argv[sys.argv.index("--skip") + 1]) if "--skip" in sys.argv else -1
steps = int(sys.argv[sys.argv.index("--steps") + 1])

torch.init()
optimizer = torch.optim.SGD(params=2)
scaler = GradScaler()
for step in range(steps):
    torch.forward(step)
    scaler.found_inf = step == skip
    scaler.step(optimizer)
    scaler.update()
# A last step without the scaler: the optimizer's own step ends it.
torch.forward(steps)
optimizer.step()
torch.finalize()
print("trained", steps + 1, "steps")
