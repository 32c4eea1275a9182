"""Smaller weights for the browser: float16 storage with float32 arithmetic.

The blocks' weights are graph inputs (graph.py): the large ones travel as float16 and the
block graph casts them to float32 (bundle.model_weights). `halve_weights` does the same for
the weights inside a graph (the embedding's): it stores every large float32 initializer as
float16 and puts a Cast back to float32 in front of its first use. Either way onnxruntime
computes in float32 as the torch model does (onnxruntime-web's WebAssembly kernels are
float32) and only the weights' rounding (relative 2^-11) changes the numbers. Half the
bytes to download and keep.
The error it brings is measured against the torch forward (tests/test_browser_model.py,
bench/bench_browser_model.py) and stated in docs/lesson-export.md.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

MIN_HALVED = 1024  # smaller tensors (norm scales, biases of small layers) stay float32


def halve_weights(graph_model: onnx.ModelProto, min_size: int = MIN_HALVED) -> onnx.ModelProto:
    """A copy of `graph_model` with float32 initializers of `min_size` or more values
    stored as float16, each cast back to float32 under its own name."""
    model = onnx.ModelProto()
    model.CopyFrom(graph_model)
    graph = model.graph
    casts, kept = [], []
    for init in graph.initializer:
        array = numpy_helper.to_array(init)
        if init.data_type != onnx.TensorProto.FLOAT or array.size < min_size:
            kept.append(init)
            continue
        half_name = f"{init.name}__f16"
        kept.append(numpy_helper.from_array(array.astype(np.float16), half_name))
        casts.append(helper.make_node("Cast", [half_name], [init.name], to=onnx.TensorProto.FLOAT,
                                      name=f"{init.name}__to_f32"))
    del graph.initializer[:]
    graph.initializer.extend(kept)
    nodes = casts + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return model
