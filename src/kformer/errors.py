"""The errors kformer shows to users: one line that says what to fix, never a traceback.

Every error is a :class:`KformerError`. Its subclasses say what kind of problem it is, and
:data:`ERROR_TABLE` maps each kind to the CLI's exit status and the REST service's HTTP status
(docs/errors.md shows it as a table; a test keeps the two the same).

An error may name the parameter or field at fault (``field="max_length"``). Library messages
name arguments; the message may hold ``{field}`` where that name goes, so the CLI can show its
flag instead (``--max-length``) with :meth:`KformerError.message_for`.
"""

from __future__ import annotations


class KformerError(Exception):
    """A problem the user can fix. Plain ``KformerError`` is treated as bad input.

    Args:
        message: one line; ``{field}`` in it is replaced by the field's name (or the CLI flag).
        field: the argument, setting or request field at fault, e.g. ``"max_length"``,
            ``"training.epochs"`` or ``"instances[3]"``; None when no single one is.
    """

    exit_code = 2
    http_status = 422

    def __init__(self, message: str, *, field: str | None = None):
        self.template = str(message)
        self.field = field
        super().__init__(self.message_for())

    def message_for(self, name: str | None = None) -> str:
        """The message with ``{field}`` filled in by ``name`` (default: the field itself)."""
        shown = name if name is not None else (self.field or "")
        return self.template.replace("{field}", shown)

    def __str__(self) -> str:
        return self.message_for()


class BadInput(KformerError):
    """A wrong argument, setting, file, or text (exit 2, HTTP 422)."""


class ModelNotFound(KformerError):
    """The model folder (or served model) does not exist (exit 3, HTTP 404)."""

    exit_code = 3
    http_status = 404


class CorruptModel(KformerError):
    """A model folder that exists but cannot be read back (exit 4, HTTP 500)."""

    exit_code = 4
    http_status = 500


class Unsupported(KformerError):
    """Valid input that this model, task or format version does not support (exit 5, HTTP 400)."""

    exit_code = 5
    http_status = 400


class Overloaded(KformerError):
    """Too much work queued; try again later (exit 75 = EX_TEMPFAIL, HTTP 503)."""

    exit_code = 75
    http_status = 503


ERROR_TABLE: dict[type[KformerError], tuple[int, int, str]] = {
    BadInput: (BadInput.exit_code, BadInput.http_status, "a wrong argument, setting, file or text"),
    ModelNotFound: (ModelNotFound.exit_code, ModelNotFound.http_status, "no such model folder or served model"),
    CorruptModel: (CorruptModel.exit_code, CorruptModel.http_status, "a model folder that cannot be read back"),
    Unsupported: (Unsupported.exit_code, Unsupported.http_status, "valid, but not something this model or task does"),
    Overloaded: (Overloaded.exit_code, Overloaded.http_status, "the service is too busy; retry later"),
}
