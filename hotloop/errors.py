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


class Preempted(SystemExit):
    """Training stopped on a signal after saving a checkpoint.

    A `SystemExit` whose code is 128 + the signal number (143 for SIGTERM), the shell's convention, so
    a script that does not catch it exits with that code and no traceback; schedulers read it as
    "preempted, relaunch". The message is printed to stderr before it is raised.
    """

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(exit_code)
        self.message = message
