from .. import _npu


class GradScaler:
    """Skips the optimizer step when the gradients overflowed; updates the loss scale every step."""

    def __init__(self):
        self.scale = 1024.0
        self.found_inf = False

    def step(self, optimizer):
        if self.found_inf:
            return None
        return optimizer.step()

    def update(self):
        new = self.scale / 2 if self.found_inf else self.scale
        _npu.launch("AmpUpdateScale", [[float(self.found_inf)], [self.scale]], [[new]])
        self.scale = new
