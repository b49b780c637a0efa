"""Serving a model: the continuous-batching :mod:`~builder.serve.engine` over a :mod:`~builder.serve.runner` of the
compiled functions, and the OpenAI-compatible HTTP server (:mod:`~builder.serve.protocol`,
:mod:`~builder.serve.app`) that ``build MODEL --serve`` starts."""
from .engine import Engine, QueueFullError, RequestDone, RequestFailed, RequestHandle, RequestTooLongError
from .runner import ModelRunner

__all__ = ["Engine", "ModelRunner", "QueueFullError", "RequestDone", "RequestFailed", "RequestHandle",
           "RequestTooLongError"]
