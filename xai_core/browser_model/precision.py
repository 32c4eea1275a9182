"""Smaller weights for the browser: float16 storage with float32 arithmetic.

`halve_weights` stores every large float32 weight of an ONNX graph as float16 and puts a
Cast back to float32 in front of its first use, so onnxruntime computes in float32 as the
torch model does (onnxruntime-web's WebAssembly kernels are float32) and only the weights'
rounding (relative 2^-11) changes the numbers. Half the bytes to download and keep.
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


def int8_matmul_weights(graph_model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `graph_model` whose MatMul weights (the linear layers: about 99 % of a
    ViT's bytes) are stored as int8 with one float32 scale per output column (symmetric:
    scale = the column's largest |weight| / 127), each turned back into float32 by a
    DequantizeLinear in front of its use; every other large weight stored as float16
    (`halve_weights`). Arithmetic stays float32."""
    model = onnx.ModelProto()
    model.CopyFrom(graph_model)
    graph = model.graph
    weights = {node.input[1] for node in graph.node if node.op_type == "MatMul"}
    nodes, kept = [], []
    for init in graph.initializer:
        array = numpy_helper.to_array(init)
        if init.name not in weights or array.ndim != 2 or init.data_type != onnx.TensorProto.FLOAT:
            kept.append(init)
            continue
        scale = np.abs(array).max(axis=0) / 127.0
        scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
        codes = np.clip(np.rint(array / scale), -127, 127).astype(np.int8)
        names = [f"{init.name}__i8", f"{init.name}__scale", f"{init.name}__zero"]
        kept += [numpy_helper.from_array(codes, names[0]), numpy_helper.from_array(scale, names[1]),
                 numpy_helper.from_array(np.zeros(scale.shape, np.int8), names[2])]
        nodes.append(helper.make_node("DequantizeLinear", names, [init.name], axis=1,
                                      name=f"{init.name}__dequantise"))
    del graph.initializer[:]
    graph.initializer.extend(kept)
    body = nodes + list(graph.node)
    del graph.node[:]
    graph.node.extend(body)
    return halve_weights(model)
