"""Conversion's first stage: a user's PyTorch program captured into a Graph of registry operators and kept ATen
calls (export.py, with the ATen mapping in aten.py), and the Graph run back in PyTorch (replay.py)."""

from drtriton_ray.capture.export import capture_source
from drtriton_ray.capture.graph import TORCH_OP, CaptureError, Graph
from drtriton_ray.capture.replay import graph_source, model_state, run_graph

__all__ = ["capture_source", "TORCH_OP", "CaptureError", "Graph", "graph_source", "model_state", "run_graph"]
