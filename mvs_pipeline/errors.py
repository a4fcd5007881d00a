"""Exceptions that the CLI turns into a one-line message and a non-zero exit code."""


class MVSError(Exception):
    """Bad input or an impossible request; the message names the file, key or image."""


class ConfigError(MVSError):
    """One or more problems in a config file or override; the message lists all of them."""


class BackendUnavailable(MVSError):
    """An explicitly requested backend (e.g. `cuda`) cannot run here; the message says why."""


class Interrupted(KeyboardInterrupt):
    """A termination signal (SIGTERM) turned into an exception, so that a run stops the way Ctrl-C
    stops it: atomic writes leave no partial file, and the CLI exits 128 + `signum` with one line."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
