"""The one exception type users see.

A `DearError` carries a single line that names the file or key at fault and
what to do about it. The CLI prints it without a traceback and exits 1; any
other exception is a bug and keeps its traceback.
"""


class DearError(Exception):
    """Bad input or environment, explained in one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class Problems(DearError):
    """Several problems found at once (`dear check`); the CLI prints one `error:` line each."""

    def __init__(self, lines: list[str]):
        super().__init__("; ".join(lines))
        self.lines = [" ".join(str(line).split()) for line in lines]


def from_workers(batches):
    """Iterate a DataLoader keeping a worker's `DearError` one line.

    torch re-raises an exception of a loader worker with the worker's
    traceback prepended to its message; only our own line is kept.
    """
    try:
        yield from batches
    except DearError as err:
        raise DearError(str(err).rpartition("DearError: ")[2]) from None
