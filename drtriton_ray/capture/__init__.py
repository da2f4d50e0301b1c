"""Conversion's first stage: a user's PyTorch program captured into an `ir.Graph` of registry operators and kept
ATen calls (export.py, with the ATen mapping in aten.py), and the Graph run back in PyTorch (replay.py)."""

from drtriton_ray.capture.errors import CaptureError
from drtriton_ray.capture.export import capture_source
from drtriton_ray.capture.replay import model_state, run_graph

__all__ = ["capture_source", "CaptureError", "model_state", "run_graph"]
