"""pytest plugin for runs under `qemu-x86_64 -cpu Haswell` (docs/testing.md, "The other CPU kind").

qemu-user emulates the CPU's instructions (onnxruntime's MLAS then picks its AVX2 kernels) but shows the host's
/proc/cpuinfo, which `int8.has_vnni` reads: this makes it say what the emulated CPU has, as a real AVX2-only
machine's /proc/cpuinfo would. Loaded only with `-p novnni_plugin`; never part of a normal run."""

from specgen.runtime.precision import int8

int8.has_vnni = lambda: False
