"""The one exception type kformer shows to users as a one-line message."""


class KformerError(Exception):
    """A problem the user can fix (bad input, missing file, wrong flag).

    The CLI prints ``kformer: error: <message>`` and exits with status 2, never a traceback.
    The message should say what is wrong and what to do about it.
    """
