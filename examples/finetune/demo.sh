#!/usr/bin/env bash
# The walkthrough of docs/finetune.md, start to end: a Keras MobileNetV2 file -> a spec -> a frozen
# backbone with a new head trained on the bundled digits, read as PNG class folders -> ONNX -> onnxruntime. Needs .venv (bash .ci/setup).
set -euo pipefail
cd "$(dirname "$0")/../.."
export TF_CPP_MIN_LOG_LEVEL=3
# TensorFlow's absl start-up lines (CPU features, no CUDA) bypass TF_CPP_MIN_LOG_LEVEL; drop just those.
quiet_tf() { grep -v -E '^(WARNING: All log messages before absl|[IW]0000 |E0000 .*(cuInit|cuda))' >&2 || true; }
run() { echo "\$ $*"; "$@" 2> >(quiet_tf); echo; }
F=examples/finetune
SPEC=$F/mobilenet_v2_digits.yaml
# The publisher's side: a pretrained Keras model file (here pretrained on digits 0-4; see the script).
[ -f $F/mobilenet_v2.keras ] || run .venv/bin/python $F/make_weights.py
# The user's side: the images, one folder per class (and test.npz, the test pixels for specgen infer).
run .venv/bin/python examples/data/make_digits_folder.py
run .venv/bin/specgen import keras $F/mobilenet_v2.keras -o $F/mobilenet_v2.yaml
# The edit a user makes to the imported spec (the shipped $SPEC is the result).
echo "\$ diff -u $F/mobilenet_v2.yaml $SPEC"; diff -u $F/mobilenet_v2.yaml $SPEC || true; echo
run .venv/bin/specgen validate $SPEC
run .venv/bin/specgen restore-plan $SPEC
rm -rf runs/mobilenet_v2_digits  # the walkthrough's own run folder: start fresh each time
run .venv/bin/specgen train $SPEC
run .venv/bin/specgen export $SPEC --checkpoint runs/mobilenet_v2_digits -o runs/mobilenet_v2_digits/export
run .venv/bin/specgen infer runs/mobilenet_v2_digits/export/model.onnx --input examples/data/digits_folder/test.npz --labels label
