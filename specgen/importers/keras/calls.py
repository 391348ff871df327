"""One layer entry of a Keras model config and one call of it, read as graph.py's walk reaches them.

A call's tensors become Refs (tensor keys, resolved later by graph.py), its constants stay plain values,
the named arguments a converter reads (CALL_KWARGS) are kept, a mask_zero mask handed to it is recorded
(masks.py), and any other call argument is refused, named as the layer that makes it when it is a tensor.
"""

from __future__ import annotations

from typing import Any

from specgen.diagnostics import quoted, safe_repr, shown
from specgen.importers.keras.dag import CALL_KWARGS, STATEFUL, Ref, tensor_key
from specgen.importers.keras.entries import Keras2Node, Keras3Node, Keras3Tensor, LayerEntry, checked
from specgen.importers.keras.errors import ImportProblem, layer_problem
from specgen.importers.keras.masks import MASK_ARGUMENTS, reads_zero_mask, tensor_history, tensor_layer


def layer_entry(raw: Any, where: str, seen: set[str]) -> tuple[LayerEntry, str]:
    """A layer entry, checked, and its name, unique among `seen` (the names of its model so far)."""
    entry = checked(LayerEntry, raw, where)
    name = entry.name or entry.config.get("name")
    if not isinstance(name, str) or not name:
        raise ImportProblem(f"{where}: the layer has no name (expected a string in 'name' or 'config.name')")
    if "/" in name:  # specgen's (and the weight files') separator between a nested model and its layers
        raise ImportProblem(f"{where}: layer name {quoted(name)} holds '/', which Keras names never hold")
    if name in seen:
        raise ImportProblem(f"{where}: a second layer named {quoted(name)} (names in one Keras model are unique)")
    seen.add(name)
    return entry, name


class CallReader:
    """Reads layer calls; what it needs of the walk so far, the walk records here as it goes."""

    def __init__(self) -> None:
        # Keras' mask_zero mask layers, left to specgen (masks.py): path -> the keys of the id tensors it is made from
        self.zero_masks: dict[str, list[str]] = {}
        self.classes: dict[str, str] = {}  # path -> Keras class of each layer walked so far, for messages

    def call_args(self, name: str, cls: str, node: Any, scope: str, where: str
                  ) -> tuple[list[Any], dict[str, Any], dict[str, list[str]] | None]:
        """The call's tensors and constants, the named arguments a converter reads, and the masks Keras hands it."""
        if isinstance(node, dict):  # Keras 3
            call = checked(Keras3Node, node, where)
            kept = CALL_KWARGS.get(cls, ())
            named = {k: self._k3_kwarg(name, cls, v, scope, f"{where}.kwargs.{k}") for k, v in call.kwargs.items()
                     if k in kept and v is not None}
            # A recorded `training` gives way to the flag the model is called with (functional.py's
            # operation_fn), as specgen layers follow the step's flag: nothing to refuse.
            self._check_kwargs(name, cls, {k: v for k, v in call.kwargs.items() if k != "training" and k not in kept
                                           and not reads_zero_mask(k, v, scope, self.zero_masks)}, scope)
            masks = {k: self.zero_masks[scope + str(tensor_layer(v))] for k, v in call.kwargs.items()
                     if reads_zero_mask(k, v, scope, self.zero_masks)}
            args = call.args
            if len(args) == 1 and isinstance(args[0], list):  # Add, Concatenate, ...: one list of tensors
                args = args[0]
            return [self._k3_arg(name, cls, a, scope, f"{where}.args[{i}]") for i, a in enumerate(args)], named, masks
        out: list[Any] = []  # Keras 2: [[layer, node, tensor, kwargs], ...]
        for entry in checked(Keras2Node, node, where):
            if len(entry) > 3:
                self._check_kwargs(name, cls, entry[3], scope)
            out.append(Ref(tensor_key(scope, entry)))
        return out, {}, None

    def _k3_kwarg(self, name: str, cls: str, arg: Any, scope: str, where: str) -> Any:
        if cls in STATEFUL and isinstance(arg, list) and 0 < len(arg) <= 2:  # initial_state: one or two tensors
            return [self._k3_arg(name, cls, a, scope, f"{where}[{i}]") for i, a in enumerate(arg)]
        if isinstance(arg, dict) and arg.get("class_name") == "__keras_tensor__":
            return Ref(tensor_key(scope, checked(Keras3Tensor, arg, where).config.keras_history))
        if not isinstance(arg, bool):
            key = where.rsplit(".", 1)[-1]
            if cls in STATEFUL and isinstance(arg, list):
                raise layer_problem(name, cls, f"call argument '{key}' is {self._said(arg, scope)}: a recurrent "
                                    "layer starts from one or two states (LSTM's state_h and state_c)")
            raise layer_problem(name, cls, f"call argument '{key}' is {self._said(arg, scope)}, neither a tensor "
                                "nor true/false")
        return arg

    def _k3_arg(self, name: str, cls: str, arg: Any, scope: str, where: str) -> Any:
        if isinstance(arg, dict) and arg.get("class_name") == "__keras_tensor__":
            return Ref(tensor_key(scope, checked(Keras3Tensor, arg, where).config.keras_history))
        if cls == "GetItem" and isinstance(arg, list | dict):  # `x[:, 0]`'s key: take.py reads it
            return arg
        if isinstance(arg, bool) or not isinstance(arg, int | float):
            raise layer_problem(name, cls, f"a call argument, {self._said(arg, scope)}, is neither a tensor nor a "
                                "number")
        return arg

    def _check_kwargs(self, name: str, cls: str, kwargs: dict[str, Any], scope: str) -> None:
        for key, value in kwargs.items():
            if value is None:
                continue
            said = self._said(value, scope)
            if key == "training":  # Keras 2 honours it over the model's flag (frozen-BN fine-tuning)
                raise layer_problem(name, cls, f"called with training={said}: specgen layers follow the "
                                    "step's training flag (a fixed training mode cannot be expressed)")
            if key in MASK_ARGUMENTS:  # not a mask_zero one (those are left out before this check)
                raise layer_problem(name, cls, f"call argument '{key}' is {said}, a mask other than an "
                                    "Embedding(mask_zero=True)'s: specgen imports only those padding masks and their "
                                    "merges, which it derives itself (docs/import.md, Masks)")
            raise layer_problem(name, cls, f"call argument '{key}' ({said}) cannot be expressed")

    def _said(self, value: Any, scope: str, depth: int = 0) -> str:
        """A call argument as a message shows it: a tensor as the layer that makes it (`the output of 'dense'
        (Dense)`), a list item by item, anything else as a bounded repr; never a tensor reference's raw config."""
        history = tensor_history(value)
        if history is not None:
            cls = self.classes.get(scope + history[0])
            return f"the output of {quoted(history[0])}" + (f" ({cls})" if cls else "")
        if isinstance(value, list | tuple) and depth < 2:
            items = [self._said(v, scope, depth + 1) for v in value[:3]]
            more = f", ... ({len(value)} items)" if len(value) > 3 else ""
            return "[" + ", ".join(items) + more + "]"
        return shown(safe_repr(value), 80)
