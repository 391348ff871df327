"""Names for generated code: Python identifiers and ONNX tensor names from spec names.

Spec names are validated identifiers joined by '/', so mangling only replaces '/' (and
adds '_' to a Python local that would shadow a keyword, a builtin or a name the templates use).
Every generated name is claimed in the namespace it lives in; two spec names that would
share one, or a name that would rebind something the generated code needs, are errors at
validate time, never a silent rename and never a generated file that fails to compile.
"""

from __future__ import annotations

import keyword

from specgen.ir.training import keys
from specgen.kinds import features

# Module-level names of the generated model.py and train.py (imports and constants): the
# generated class must not rebind one of them.
MODULE_NAMES = {
    "model.py": ("annotations", "Mapping", "tf", "init", "layers", "INPUTS", "OUTPUTS"),
    "train.py": ("annotations", "Mapping", "tf", "losses", "metrics", "optimizers", "pruning", "schedules",
                 "ACCUMULATE", "BATCH_SIZE", "SEED", "EMA_EVAL", "LABEL", "OUTPUT"),
}
# Parameters of the generated __init__/__call__/layer_outputs and the module names their bodies read
# (templates/tf/model.py.j2 and ops/*.py.j2): a layer or input local named like one would shadow it,
# so it gets a '_' suffix. tests/test_names_r8.py renders every op case and checks the templates read
# no other name.
RESERVED_PY = {"tf", "self", "inputs", "training", "init", "layers", "seed", "annotations"}
# Python's builtin functions and types, written out rather than read from `dir(builtins)`: that list differs between
# Python versions and with `python -S` (no exit, quit, help...), and generated code must not. Exceptions and constants
# are left out: no template of model.py (where layer locals live) reads one, and tests/test_names_r8.py fails if a
# template starts to read a name that is not shadowed here.
BUILTINS = frozenset("""
    abs aiter all anext any ascii bin bool breakpoint bytearray bytes callable chr classmethod compile complex delattr
    dict dir divmod enumerate eval exec filter float format frozenset getattr globals hasattr hash hex id input int
    isinstance issubclass iter len list locals map max memoryview min next object oct open ord pow print property range
    repr reversed round set setattr slice sorted staticmethod str sum super tuple type vars zip
""".split())
# What a layer or input local may not be named, beyond keywords: RESERVED_PY, every module-level name of model.py,
# and every builtin function and type. Builtins are taken whole rather than the few the templates call today (zip,
# for grouped convolutions): a template that starts calling len or range must not need an edit here, and a layer
# named 'zip' once broke training that way. Builtins are '_'-free words, which no mangled variable path
# ('conv/kernel' -> 'conv_kernel') can be, so only bare locals ever change.
SHADOWED_PY = frozenset({*RESERVED_PY, *MODULE_NAMES["model.py"], *BUILTINS})
# What tf.Module defines and the generated model adds: variable attributes must not replace one.
MODULE_ATTRIBUTES = {"name", "name_scope", "variables", "trainable_variables", "non_trainable_variables",
                     "submodules", "with_name_scope", "variables_by_path", "layer_outputs", "masks"}
# First parts of the variable paths that training state uses (ir/collections.py, training_state):
# a layer under one could collide with a slot, an accumulator, the loss scale or an EMA shadow, and
# restore maps read 'ema/...' keys as shadows. The features' come from their FeatureDef.roots, so a
# new feature's state is reserved with it; the global step (one variable, no folder) comes last.
STATE_ROOTS = (*dict.fromkeys(r for f in features.PIPELINE_DEFS for r in f.roots), keys.OPTIMIZERS, keys.METRICS,
               keys.PRUNING, keys.STEP)


def py_name(name: str) -> str:
    mangled = name.replace("/", "_")
    if keyword.iskeyword(mangled) or keyword.issoftkeyword(mangled) or mangled in SHADOWED_PY:
        mangled += "_"
    return mangled


def onnx_name(name: str) -> str:
    return name.replace("/", "__")


def class_name(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Model"


def class_name_problem(name: str) -> str | None:
    """Why the classes generated for spec `name` cannot be named from it, or None."""
    cls = class_name(name)
    if keyword.iskeyword(cls):
        return f"spec name '{name}' becomes the class name '{cls}', a Python keyword; choose another name"
    for module, generated in (("model.py", cls), ("train.py", f"{cls}Training")):
        if generated in MODULE_NAMES[module]:
            return (f"spec name '{name}' becomes the class name '{generated}', which would replace the generated "
                    f"{module}'s own '{generated}'; choose another name")
    return None


def layer_name_problem(name: str) -> str | None:
    """Why a layer may not have this name, though it is a valid identifier path, or None."""
    root = name.split("/", 1)[0]
    if root in STATE_ROOTS:
        return (f"layer name '{name}' starts with '{root}', which specgen keeps for training-state variable "
                f"paths ({', '.join(r + '/...' for r in STATE_ROOTS[:-1])}, global_step); rename the layer")
    return None


class Namer:
    """Claims generated names in one namespace and reports the spec names that would share one."""

    def __init__(self, kind: str, reserved: dict[str, str] | None = None):
        self.kind = kind
        self.owners: dict[str, str] = dict(reserved or {})  # generated name -> who holds it, as shown

    def claim(self, generated: str, owner: str) -> str | None:
        """The clash message if `generated` is already held by another owner ("layer 'a/b'")."""
        previous = self.owners.setdefault(generated, owner)
        if previous == owner:
            return None
        return f"{owner} and {previous} both become '{generated}' in the {self.kind}; rename one of them"
