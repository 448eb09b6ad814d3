class Optimizer:
    """Base of the optimizers: subclasses define `step`."""

    def __init__(self, params):
        self.params = list(range(params))

    def step(self):
        raise NotImplementedError
