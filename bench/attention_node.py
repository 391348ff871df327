"""Which ONNX attention node specgen exports: one self-attention layer, three candidates, onnxruntime CPU.

- plain: today's nodes (MatMul per projection, Reshape/Transpose to heads, MatMul, Softmax, MatMul).
- attention23: the projections as MatMul+Add, then the opset-23 `Attention` node on [batch, time, hidden]
  (q_num_heads/kv_num_heads, explicit scale), then the output projection.
- attention23_packed: the same with the three projections as one MatMul over concatenated kernels.
- contrib_mha: onnxruntime's `com.microsoft.MultiHeadAttention` (projections as MatMul, their biases packed
  into the node's bias input).

Each graph is checked against numpy (max relative difference) before it is timed; medians of interleaved
repetitions. Run: `.venv/bin/python bench/attention_node.py` (`--repeat N`, `--threads N`, `--provider cuda`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

CASES = {"bert-base b1": (1, 128, 768, 12), "bert-base b8": (8, 128, 768, 12), "small b8": (8, 32, 64, 4)}


def _weights(d: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(np.float32)
    return {"wq": mat(d, d), "wk": mat(d, d), "wv": mat(d, d), "wo": mat(d, d),
            **{b: (0.1 * rng.standard_normal(d)).astype(np.float32) for b in ("bq", "bk", "bv", "bo")}}


def _proj(x: str, part: str, bias: bool = True) -> list[onnx.NodeProto]:
    if not bias:
        return [helper.make_node("MatMul", [x, f"w{part}"], [part])]
    return [helper.make_node("MatMul", [x, f"w{part}"], [f"{part}m"]), helper.make_node("Add", [f"{part}m", f"b{part}"], [part])]


def plain(heads: int, d: int) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], int, list]:
    k = d // heads
    consts = [helper.make_tensor("split", TensorProto.INT64, [4], [0, 0, heads, k]),
              helper.make_tensor("merge", TensorProto.INT64, [3], [0, 0, d]),
              helper.make_tensor("scale", TensorProto.FLOAT, [], [1 / np.sqrt(k)])]
    nodes = _proj("x", "q") + _proj("x", "k") + _proj("x", "v")
    for part, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [helper.make_node("Reshape", [part, "split"], [f"{part}r"]),
                  helper.make_node("Transpose", [f"{part}r"], [f"{part}h"], perm=perm)]
    nodes += [helper.make_node("Mul", ["qh", "scale"], ["qs"]), helper.make_node("MatMul", ["qs", "kh"], ["s"]),
              helper.make_node("Softmax", ["s"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "vh"], ["c"]),
              helper.make_node("Transpose", ["c"], ["ct"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ct", "merge"], ["cm"])]
    return nodes + _out("cm"), consts, 21, []


def _out(x: str) -> list[onnx.NodeProto]:
    return [helper.make_node("MatMul", [x, "wo"], ["om"]), helper.make_node("Add", ["om", "bo"], ["y"])]


def attention23(heads: int, d: int) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], int, list]:
    nodes = _proj("x", "q") + _proj("x", "k") + _proj("x", "v")
    nodes.append(helper.make_node("Attention", ["q", "k", "v"], ["c"], q_num_heads=heads, kv_num_heads=heads,
                                  scale=float(1 / np.sqrt(d // heads))))
    return nodes + _out("c"), [], 23, []


def attention23_packed(heads: int, d: int) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], int, list]:
    """Self-attention only: one MatMul over the three kernels concatenated (folded at session start)."""
    nodes = [helper.make_node("Concat", ["wq", "wk", "wv"], ["wqkv"], axis=1),
             helper.make_node("Concat", ["bq", "bk", "bv"], ["bqkv"], axis=0),
             helper.make_node("MatMul", ["x", "wqkv"], ["qkvm"]), helper.make_node("Add", ["qkvm", "bqkv"], ["qkv"]),
             helper.make_node("Split", ["qkv"], ["q", "k", "v"], axis=-1, num_outputs=3)]
    nodes.append(helper.make_node("Attention", ["q", "k", "v"], ["c"], q_num_heads=heads, kv_num_heads=heads,
                                  scale=float(1 / np.sqrt(d // heads))))
    return nodes + _out("c"), [], 23, []


def contrib_mha(heads: int, d: int) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], int, list]:
    nodes = _proj("x", "q", False) + _proj("x", "k", False) + _proj("x", "v", False)
    nodes.append(helper.make_node("Concat", ["bq", "bk", "bv"], ["bqkv"], axis=0))
    nodes.append(helper.make_node("MultiHeadAttention", ["q", "k", "v", "bqkv"], ["c"], domain="com.microsoft",
                                  num_heads=heads, scale=float(1 / np.sqrt(d // heads))))
    return nodes + _out("c"), [], 21, [helper.make_opsetid("com.microsoft", 1)]


def build(maker: Callable, heads: int, d: int, w: dict[str, np.ndarray]) -> bytes:
    nodes, consts, opset, extra = maker(heads, d)
    inits = consts + [helper.make_tensor(n, TensorProto.FLOAT, v.shape, v.ravel()) for n, v in w.items()]
    graph = helper.make_graph(nodes, maker.__name__, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "t", d])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "t", d])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra],
                              ir_version=11 if opset >= 23 else 10)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def reference(x: np.ndarray, w: dict[str, np.ndarray], heads: int) -> np.ndarray:
    b, t, d = x.shape
    x = x.astype(np.float64)
    def split(m: np.ndarray) -> np.ndarray:
        return m.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)
    q, k, v = (split(x @ w[f"w{p}"] + w[f"b{p}"]) for p in "qkv")
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // heads)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ v).transpose(0, 2, 1, 3).reshape(b, t, d) @ w["wo"] + w["bo"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: onnxruntime's default)")
    parser.add_argument("--provider", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if args.provider == "cuda" else ["CPUExecutionProvider"]
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    makers = (plain, attention23, attention23_packed, contrib_mha)
    print(f"onnxruntime {ort.__version__}, {args.provider}, {args.repeat} interleaved repetitions, medians in ms")
    print(f"{'case':14} " + " ".join(f"{m.__name__:>18}" for m in makers) + "   max rel diff vs float64")
    for case, (b, t, d, heads) in CASES.items():
        rng = np.random.default_rng(0)
        w = _weights(d, rng)
        x = rng.standard_normal((b, t, d)).astype(np.float32)
        want = reference(x, w, heads)
        sessions = [ort.InferenceSession(build(m, heads, d, w), options, providers=providers)
                    for m in makers]
        diffs = [float(np.max(np.abs(s.run(None, {"x": x})[0] - want)) / np.max(np.abs(want))) for s in sessions]
        for s in sessions:  # warm-up: allocations, cuDNN/cuBLAS choices
            s.run(None, {"x": x})
        times: list[list[float]] = [[] for _ in makers]
        for _ in range(args.repeat):
            for i, s in enumerate(sessions):
                start = time.perf_counter()
                s.run(None, {"x": x})
                times[i].append(1e3 * (time.perf_counter() - start))
        print(f"{case:14} " + " ".join(f"{statistics.median(ts):18.3f}" for ts in times)
              + "   " + " ".join(f"{e:.1e}" for e in diffs))


if __name__ == "__main__":
    main()
