"""ONNX Runtime's exception classes, raised by Onyx for the same faults."""

from onyx._onyx import (  # noqa: F401
    EngineError,
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoaded,
    NoModel,
    NoSuchFile,
    NotImplemented,
    RuntimeException,
)

__all__ = ["Fail", "InvalidArgument", "NoSuchFile", "NoModel", "EngineError", "RuntimeException",
           "InvalidProtobuf", "ModelLoaded", "NotImplemented", "InvalidGraph", "EPFail"]

for _cls in (Fail, InvalidArgument, NoSuchFile, NoModel, EngineError, RuntimeException, InvalidProtobuf,
             ModelLoaded, NotImplemented, InvalidGraph, EPFail):
    _cls.__module__ = __name__
del _cls
