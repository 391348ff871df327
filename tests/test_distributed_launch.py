"""The launch side of distributed training, without TensorFlow: TF_CONFIG roles, `train.distribute` in the
spec and `specgen train --emit tfjob`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specgen.cli import main
from specgen.diagnostics import SpecError
from specgen.runtime.cluster import Role, read_role

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "examples" / "specs" / "digits_mlp.yaml"


def tf_config(cluster: dict[str, list[str]], task_type: str, index: int) -> dict[str, str]:
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})}


def test_worker_0_is_the_chief_unless_a_chief_task_is_named() -> None:
    workers = {"worker": ["a:1", "b:2", "c:3"]}
    assert read_role({}) == Role()
    assert read_role(tf_config(workers, "worker", 0)) == Role("worker", 0, 3, True)
    assert read_role(tf_config(workers, "worker", 2)) == Role("worker", 2, 3, False)
    with_chief = {"chief": ["z:0"], **workers}
    assert read_role(tf_config(with_chief, "chief", 0)) == Role("chief", 0, 4, True)
    assert read_role(tf_config(with_chief, "worker", 0)) == Role("worker", 0, 4, False)


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "TF_CONFIG: error: not the JSON TensorFlow expects (JSONDecodeError: Expecting property name "
                  "enclosed in double quotes: line 1 column 2 (char 1)); expected {\"cluster\""),
    ('{"cluster": {"worker": ["a:1"]}}', "TF_CONFIG: error: not the JSON TensorFlow expects (KeyError: 'task')"),
    ('{"cluster": {"ps": ["a:1"], "worker": ["b:2"]}, "task": {"type": "ps", "index": 0}}',
     "TF_CONFIG: error: task type 'ps': specgen trains with MultiWorkerMirroredStrategy, whose tasks are 'worker' and "
     "an optional 'chief' (no parameter servers or evaluators)"),
])
def test_a_malformed_tf_config_is_one_line_saying_what_is_expected(text: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        read_role({"TF_CONFIG": text})
    assert str(caught.value).startswith(message)


def test_an_unknown_strategy_is_refused_at_its_position(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(MLP.read_text().replace("  seed: 1\n", "  seed: 1\n  distribute: {strategy: horovod}\n")
                    .replace("../data/digits.npz", str(ROOT / "examples" / "data" / "digits.npz")))
    assert main(["validate", str(spec)]) == 1
    err = capsys.readouterr().err
    assert err == (f"{spec}:30:26: error: strategy: received 'horovod', expected 'default', 'mirrored' or "
                   "'multi_worker'\n1 error found\n")


def emit(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """`specgen train --emit tfjob` in a fresh interpreter that must not import TensorFlow."""
    code = ("import sys; from specgen.cli import main; status = main(sys.argv[1:]); "
            "assert 'tensorflow' not in sys.modules, 'imported TensorFlow'; sys.exit(status)")
    return subprocess.run([sys.executable, "-c", code, "train", str(MLP), "--emit", "tfjob", *flags],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})


def test_emit_tfjob_writes_a_kubeflow_manifest_for_every_worker(tmp_path: Path) -> None:
    flags = ["--image", "registry.example/train:1.0", "--workers", "3", "--cpu", "4", "--memory", "16Gi", "--gpus", "1",
             "--volume", "runs:/runs", "--set", "checkpoint.dir=/runs/digits_mlp", "-o", "job.yaml"]
    result = emit(tmp_path, *flags)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "wrote job.yaml: a TFJob of 3 worker(s) for digits_mlp\n"
    text = (tmp_path / "job.yaml").read_text()
    job = yaml.safe_load(text)
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == ("kubeflow.org/v1", "TFJob", "digits-mlp")
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    assert (worker["replicas"], worker["restartPolicy"]) == (3, "OnFailure")
    [container] = worker["template"]["spec"]["containers"]
    assert container["name"] == "tensorflow" and container["image"] == "registry.example/train:1.0"
    assert container["command"] == ["specgen", "train", str(MLP), "--strategy", "multi_worker", "--resume-or-start",
                                    "--quiet", "--set", "checkpoint.dir=/runs/digits_mlp"]
    assert container["resources"]["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1}
    assert container["volumeMounts"] == [{"name": "runs", "mountPath": "/runs"}]
    assert worker["template"]["spec"]["volumes"] == [{"name": "runs", "persistentVolumeClaim": {"claimName": "runs"}}]
    assert emit(tmp_path, *flags[:-2]).stdout == text  # deterministic; stdout without -o


def test_emit_tfjob_refuses_bad_flags_in_one_line_each(tmp_path: Path) -> None:
    result = emit(tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("specgen train --emit tfjob: error: --image is required")
    result = emit(tmp_path, "--image", "img:1", "--workers", "0", "--memory", "lots", "--volume", "runs")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert sorted(lines[:3]) == ["specgen train --emit tfjob: error: --memory 'lots': expected a Kubernetes quantity "
                                 "such as 4, 500m or 16Gi",
                                 "specgen train --emit tfjob: error: --volume 'runs': expected CLAIM:/mount/path (a "
                                 "PersistentVolumeClaim name and where the workers mount it)",
                                 "specgen train --emit tfjob: error: --workers 0: expected 1 or more"]
    assert lines[3] == "3 errors found"
    assert not (tmp_path / "job.yaml").exists()
