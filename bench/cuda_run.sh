#!/usr/bin/env bash
# The GPU figures of bench/RESULTS.md, run on the lent GPU machine (no TensorFlow there, no network).
#
# Before: onnxruntime-gpu's wheel, unpacked, tarred and xz-compressed, is sent in parts of under 64 MiB (the most
# one call may carry) and each part is copied to /tmp/ortparts/ there; the graphs come as skeletons
# (bench/onnx_skeleton.py) in .gpu/models with their manifest.json, and the Predictor check reads a trained digits
# export in .gpu/digits; all written here, in the repository root, by
#   .venv/bin/python bench/sequence.py --build-only --save-onnx .gpu/models     (encoder and LSTM)
#   .venv/bin/python bench/cuda_prepare_zoo.py --out .gpu/models                (ResNet50 / MobileNetV2, fp32 and fp16)
#   .venv/bin/specgen train examples/specs/digits_cnn.yaml --steps 200 --fresh
#   .venv/bin/specgen export examples/specs/digits_cnn.yaml --checkpoint runs/digits_cnn -o .gpu/digits
# .gpu/ is git-ignored: name it among the paths carried to the GPU machine. (bench/int8_device.py has its own
# prepare/measure pair, for another machine's CPU.)
# Then, on the GPU machine, in the repository root:  bash bench/cuda_run.sh
set -euo pipefail
mkdir -p /tmp/ort
if [ ! -e /tmp/ort/onnxruntime ]; then
    [ "$(ls /tmp/ortparts | wc -l)" = 4 ] || { echo "expected 4 parts in /tmp/ortparts: $(ls /tmp/ortparts)"; exit 1; }
    cat /tmp/ortparts/part* | xz -d | tar -C /tmp/ort -xf -
fi
export PYTHONPATH=/tmp/ort
# onnxruntime-gpu 1.31 is built for CUDA 13 and cuDNN 9: the machine's PyTorch brings those as nvidia-* wheels.
LD_LIBRARY_PATH=$(python3 - <<'EOF'
import glob, os, nvidia
roots = list(nvidia.__path__)
print(":".join(sorted({os.path.dirname(p) for r in roots for p in glob.glob(os.path.join(r, "**", "lib*.so*"), recursive=True)})))
EOF
)
export LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
# onnxruntime-gpu lists TensorRT among its providers; it runs only where TensorRT's libnvinfer is installed.
echo "TensorRT: $( (ldconfig -p | grep -q libnvinfer) && echo libnvinfer found || echo 'libnvinfer not installed')"
out=${OUT:-/tmp/out}
mkdir -p "$out"
# MODELS: the skeleton folder; MODES: "numpy" (host copies timed) and/or "io" (device-resident, --io-binding);
# ONLY_ONNX=1 skips the attention-node and Predictor checks.
models=${MODELS:-.gpu/models}
for mode in ${MODES:-numpy}; do
    flag=""; [ "$mode" = io ] && flag="--io-binding"
    PYTHONUNBUFFERED=1 python3 bench/cuda_onnx.py "$models" $flag --repeats "${REPEATS:-7}" \
        --json "$out/cuda_onnx_$mode.json" 2>&1 | tee "$out/cuda_onnx_$mode.log"
done
[ "${ONLY_ONNX:-0}" = 1 ] && exit 0
PYTHONUNBUFFERED=1 python3 bench/attention_node.py --provider cuda --repeat 50 2>&1 | tee "$out/attention_node.log"
PYTHONUNBUFFERED=1 python3 bench/cuda_predictor.py .gpu/digits/model.onnx examples/data/digits.npz 2>&1 | tee "$out/predictor.log"
