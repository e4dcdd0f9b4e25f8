"""The errors of the Triton launcher (`services.triton.launcher`), shared by the modules it is
made of (installation, pid files, loading)."""

from __future__ import annotations


class TritonServerError(RuntimeError):
    """The Triton server could not be prepared, started or made ready."""


class TritonLoadError(TritonServerError):
    """Triton refused to load one model version (its reason is the message)."""
