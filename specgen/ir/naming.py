"""Names for generated code: Python identifiers and ONNX tensor names from spec names.

Spec names are validated identifiers joined by '/', so mangling only replaces
'/'; two spec names that mangle to the same name are an error, never a silent
rename.
"""

from __future__ import annotations

import keyword

# Locals and imports the generated Python uses; a layer named like one gets a '_' suffix.
RESERVED_PY = {"tf", "self", "inputs", "training", "init", "layers", "seed", "annotations"}


def py_name(name: str) -> str:
    mangled = name.replace("/", "_")
    if keyword.iskeyword(mangled) or keyword.issoftkeyword(mangled) or mangled in RESERVED_PY:
        mangled += "_"
    return mangled


def onnx_name(name: str) -> str:
    return name.replace("/", "__")


def class_name(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Model"


class Namer:
    """Claims generated names and reports the spec names that would share one."""

    def __init__(self, kind: str):
        self.kind = kind
        self.owners: dict[str, str] = {}

    def claim(self, generated: str, owner: str) -> str | None:
        """The clash message if `generated` is already taken by another spec name."""
        previous = self.owners.setdefault(generated, owner)
        if previous == owner:
            return None
        return (f"'{owner}' and '{previous}' both become '{generated}' in the generated {self.kind}; "
                "rename one of them")
