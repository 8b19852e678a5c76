"""User-facing errors.

Everything a user can get wrong (a config key, a dataset, a loss function) raises a subclass of
`HotloopError` whose message names the field or object and says how to fix it. The CLI prints these
without a traceback and exits with status 2; library users can catch them by type.
"""


class HotloopError(Exception):
    """Base class of the errors hotloop raises for user mistakes."""


class ConfigError(HotloopError, ValueError):
    """A configuration key or value is invalid."""


class DataError(HotloopError, ValueError):
    """The training or validation data cannot be used as given."""


class LossError(HotloopError, TypeError):
    """The loss function (or the model acting as one) returned something unusable."""


class Preempted(HotloopError):
    """Training stopped on a signal after saving a checkpoint; `exit_code` is 128 + the signal number."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code
