"""The launch side of distributed training, without TensorFlow: TF_CONFIG roles, `train.distribute` in the
spec and `specgen train --emit tfjob`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specgen import text
from specgen.cli import main
from specgen.diagnostics import SpecError
from specgen.runtime.placement.cluster import Role, read_role

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "examples" / "specs" / "digits_mlp.yaml"


def tf_config(cluster: dict[str, list[str]], task_type: str, index: int) -> dict[str, str]:
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})}


def test_worker_0_is_the_chief_unless_a_chief_task_is_named() -> None:
    workers = {"worker": ["a:1", "b:2", "c:3"]}
    assert read_role({}) == Role()
    assert read_role(tf_config(workers, "worker", 0)) == Role("worker", 0, 3, True)
    assert read_role(tf_config(workers, "worker", 2)) == Role("worker", 2, 3, False)
    with_chief = {"chief": ["z:4"], **workers}
    assert read_role(tf_config(with_chief, "chief", 0)) == Role("chief", 0, 4, True)
    assert read_role(tf_config(with_chief, "worker", 0)) == Role("worker", 0, 4, False)


WORKERS = '"cluster": {"worker": ["a:1", "b:2"]}'
EXAMPLE = '{"cluster": {"worker": ["host0:12345", "host1:12345"]}, "task": {"type": "worker", "index": 0}}'
ADDRESS = 'cluster.worker.0: received {!r} (str); expected '
# Every kind of garbage TF_CONFIG the red team sent (issue 17), and the one line each must give.
GARBAGE = [
    ("[]", f"the whole value: received [] (list); expected a JSON object such as {EXAMPLE}"),
    ('{"cluster": [], "task": {"type": "worker", "index": 0}}',
     'cluster: received [] (list); expected an object of job name to a list of "host:port" addresses, such as '
     '{"worker": ["host0:12345"]}'),
    ('{"cluster": {"worker": "abc"}, "task": {"type": "worker", "index": 0}}',
     "cluster.worker: received 'abc' (str); expected a list of \"host:port\" addresses"),
    ('{"cluster": {"worker": [5]}, "task": {"type": "worker", "index": 0}}',
     'cluster.worker.0: received 5 (int); expected a "host:port" address (a string)'),
    ("{" + WORKERS + ', "task": {"type": "worker", "index": 2}}',
     "task.index: received 2; expected an index from 0 to 1 (the 'worker' job lists 2 address(es))"),
    ("{" + WORKERS + ', "task": {"type": "worker", "index": -1}}',
     "task.index: received -1; expected an index from 0 to 1 (the 'worker' job lists 2 address(es))"),
    ("{" + WORKERS + ', "task": {"type": "worker", "index": true}}',
     "task.index: received True (bool); expected an integer, the task's position in its job's list (from 0)"),
    ("{" + WORKERS + ', "task": {"type": "worker", "index": 1.5}}',
     "task.index: received 1.5 (float); expected an integer, the task's position in its job's list (from 0)"),
    ("{" + WORKERS + ', "task": {"type": "worker", "index": "1"}}',
     "task.index: received '1' (str); expected an integer, the task's position in its job's list (from 0)"),
    ('{"cluster": {"worker": ["host"]}, "task": {"type": "worker", "index": 0}}', ADDRESS.format("host") + "host:port"),
    ('{"cluster": {"worker": ["host:99999"]}, "task": {"type": "worker", "index": 0}}',
     ADDRESS.format("host:99999") + "a port from 1 to 65535 after the last ':'"),
    ('{"cluster": {"worker": ["host:abc"]}, "task": {"type": "worker", "index": 0}}',
     ADDRESS.format("host:abc") + "a port from 1 to 65535 after the last ':'"),
    ('{"cluster": {"worker": ["host:0"]}, "task": {"type": "worker", "index": 0}}',
     ADDRESS.format("host:0") + "a port from 1 to 65535 after the last ':'"),
    ('{"cluster": {"worker": [":80"]}, "task": {"type": "worker", "index": 0}}', ADDRESS.format(":80") + "host:port"),
    ('{"cluster": {"worker": ["::1:80"]}, "task": {"type": "worker", "index": 0}}',
     ADDRESS.format("::1:80") + "a host name, an IPv4 address or [an IPv6 address] before the port"),
    ('{"cluster": {"worker": ["[::g]:80"]}, "task": {"type": "worker", "index": 0}}',
     ADDRESS.format("[::g]:80") + "an IPv6 address between [ and ]"),
    ('{"cluster": {"worker": ["a b:80"]}, "task": {"type": "worker", "index": 0}}',
     ADDRESS.format("a b:80") + "a host name, an IPv4 address or [an IPv6 address] before the port"),
    ('{"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}}',
     "cluster.worker.1: received 'a:1'; expected an address no other task has (two tasks cannot listen on one port)"),
    ('{"cluster": {"chief": ["a:1", "b:2"]}, "task": {"type": "chief", "index": 0}}',
     "cluster.chief: received 2 addresses; expected at most one (TensorFlow's rule)"),
    ('{"cluster": {"ps": ["a:1"], "worker": ["b:2"]}, "task": {"type": "worker", "index": 0}}',
     "cluster: received the job 'ps'; expected the jobs of MultiWorkerMirroredStrategy, 'chief', 'evaluator' or "
     "'worker' (specgen trains no parameter servers)"),
    ('{"cluster": {"worker": ["a:1"], "evaluator": ["b:2"]}, "task": {"type": "evaluator", "index": 0}}',
     "task.type: received 'evaluator'; expected 'worker' or 'chief': specgen trains with MultiWorkerMirroredStrategy, "
     "whose tasks are workers and an optional chief (no parameter servers or evaluators)"),
    ("{" + WORKERS + ', "task": {"type": "chief", "index": 0}}',
     "task.type: received 'chief'; expected a job the cluster lists ('worker' there)"),
    ("{" + WORKERS + "}", "task: received nothing (the key is missing); expected an object such as "
     '{"type": "worker", "index": 0}'),
    ("{" + WORKERS + ', "task": "worker"}',
     "task: received 'worker' (str); expected an object such as {\"type\": \"worker\", \"index\": 0}"),
    ("null", f"the whole value: received None (NoneType); expected a JSON object such as {EXAMPLE}"),
    ("{not json", "the whole value: received text that is not JSON (key must be a string at line 1 column 2); "
     f"expected a JSON object such as {EXAMPLE}"),
    ("[" * 20_000, "the whole value: received text that is not JSON (recursion limit exceeded at line 1 column 202); "
     f"expected a JSON object such as {EXAMPLE}"),
    ("", "the whole value: received '' (set, but empty); expected no TF_CONFIG at all for one worker, or a JSON object "
     f"such as {EXAMPLE}"),
    ("{}", 'cluster: received nothing (the key is missing); expected an object of job name to a list of "host:port" '
     'addresses, such as {"worker": ["host0:12345"]} (1 more problem(s) after this one)'),
]


@pytest.mark.parametrize(("text", "message"), GARBAGE, ids=[f"garbage{n}" for n in range(len(GARBAGE))])
def test_garbage_tf_config_is_one_line_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str], text: str,
                                                          message: str) -> None:
    """`specgen train` (the CLI's main, in this process: TF_CONFIG is refused before TensorFlow is imported)
    with TF_CONFIG set: exit 1, one line, nothing on disk. The subprocess test below runs two of them for real."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(MLP.read_text().replace("../data/digits.npz", str(ROOT / "examples" / "data" / "digits.npz")))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TF_CONFIG", text)
    assert main(["train", str(spec), "--strategy", "multi_worker"]) == 1
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"TF_CONFIG: error: {message}\n1 error found\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]  # no run folder, no code, nothing


@pytest.mark.parametrize(("text", "message"), [GARBAGE[0], GARBAGE[-3]], ids=["a list", "20,000 brackets"])
def test_garbage_tf_config_through_the_real_cli(tmp_path: Path, text: str, message: str) -> None:
    """The real `specgen train` in a subprocess with TF_CONFIG set: exit 1, one line, nothing on disk."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(MLP.read_text().replace("../data/digits.npz", str(ROOT / "examples" / "data" / "digits.npz")))
    result = subprocess.run([sys.executable, "-m", "specgen", "train", str(spec), "--strategy", "multi_worker"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={"PYTHONPATH": str(ROOT), "TF_CONFIG": text})
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"TF_CONFIG: error: {message}\n1 error found\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]  # no run folder, no code, nothing


def test_a_tf_config_longer_than_linux_passes_to_a_program_is_refused_before_parsing() -> None:
    """No exec carries a 128 KiB + 1 environment string (E2BIG), so this one comes through os.environ itself."""
    text = "[" * (128 * 1024 + 1)
    with pytest.raises(SpecError) as caught:
        read_role({"TF_CONFIG": text})
    assert str(caught.value) == ("TF_CONFIG: error: the whole value: received 131073 characters; expected at most "
                                 "131072 (Linux passes no longer environment string to a program), shaped like "
                                 f"{EXAMPLE}")
    assert read_role({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0},
                                               "environment": " " * (128 * 1024 - 100)})}) == Role("worker", 0, 1, True)


def test_launchers_keys_and_ipv6_addresses_are_accepted() -> None:
    """Kubeflow adds `environment`, Vertex AI `job` and `task.trial`; an evaluator job trains nothing."""
    config = {"cluster": {"chief": ["[::1]:2222"], "worker": ["10.0.0.2:2222", "w-1.ns.svc:2222"],
                          "evaluator": ["my_eval:2222"]},
              "task": {"type": "worker", "index": 1, "trial": ""}, "environment": "cloud", "job": {"x": 1}}
    assert read_role({"TF_CONFIG": json.dumps(config)}) == Role("worker", 1, 3, False)


def test_an_unknown_strategy_is_refused_at_its_position(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(MLP.read_text().replace("  seed: 1\n", "  seed: 1\n  distribute: {strategy: horovod}\n")
                    .replace("../data/digits.npz", str(ROOT / "examples" / "data" / "digits.npz")))
    assert main(["validate", str(spec)]) == 1
    err = capsys.readouterr().err
    assert err == (f"{spec}:30:26: error: strategy: received 'horovod', expected 'default', 'mirrored' or "
                   "'multi_worker'\n1 error found\n")


def emit(tmp_path: Path, *flags: str, spec: Path = MLP, command: str = "train") -> subprocess.CompletedProcess[str]:
    """`specgen train --emit tfjob` in a fresh interpreter that must not import TensorFlow."""
    code = ("import sys; from specgen.cli import main; status = main(sys.argv[1:]); "
            "assert 'tensorflow' not in sys.modules, 'imported TensorFlow'; sys.exit(status)")
    extra = ["--emit", "tfjob", *flags] if command == "train" else list(flags)
    return subprocess.run([sys.executable, "-c", code, command, str(spec), *extra],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})


def test_emit_tfjob_writes_a_kubeflow_manifest_for_every_worker(tmp_path: Path) -> None:
    flags = ["--image", "registry.example/train:1.0", "--workers", "4", "--cpu", "4", "--memory", "16Gi", "--gpus", "1",
             "--volume", "runs:/runs", "--set", "checkpoint.dir=/runs/digits_mlp", "-o", "job.yaml"]
    result = emit(tmp_path, *flags)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "wrote job.yaml: a TFJob of 4 worker(s) for digits_mlp\n"
    text = (tmp_path / "job.yaml").read_text()
    job = yaml.safe_load(text)
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == ("kubeflow.org/v1", "TFJob", "digits-mlp")
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    assert (worker["replicas"], worker["restartPolicy"]) == (4, "OnFailure")
    [container] = worker["template"]["spec"]["containers"]
    assert container["name"] == "tensorflow" and container["image"] == "registry.example/train:1.0"
    assert container["command"] == ["specgen", "train", str(MLP), "--strategy", "multi_worker", "--resume-or-start",
                                    "--quiet", "--set", "checkpoint.dir=/runs/digits_mlp"]
    assert container["resources"]["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1}
    assert container["volumeMounts"] == [{"name": "runs", "mountPath": "/runs"}]
    assert worker["template"]["spec"]["volumes"] == [{"name": "runs", "persistentVolumeClaim": {"claimName": "runs"}}]
    assert emit(tmp_path, *flags[:-2]).stdout == text  # deterministic; stdout without -o


def test_emit_tfjob_refuses_bad_flags_in_one_line_each(tmp_path: Path) -> None:
    """Command-line mistakes, found before the spec is read: exit 2 and one `specgen train: error:` line naming
    every wrong flag, as argparse reports its own (docs/cli.md's exit statuses)."""
    result = emit(tmp_path)
    assert (result.returncode, result.stderr) == (2, "specgen train: error: --emit tfjob: --image is required: the "
                                                     "container image that holds specgen, TensorFlow and the spec "
                                                     "(e.g. --image registry/train:1.0)\n")
    result = emit(tmp_path, "--image", "img:1", "--workers", "0", "--memory", "lots", "--volume", "runs",
                  spec=tmp_path / "missing.yaml")  # not read: the flags are refused first
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("specgen train: error: --workers 0: expected 1 to 512 (every worker's address goes into "
                             "each worker's TF_CONFIG, one environment string of at most 128 KiB); --memory 'lots': "
                             "expected a Kubernetes quantity such as 4, 500m or 16Gi; --volume 'runs': expected "
                             "CLAIM:/mount/path (a PersistentVolumeClaim name and where the workers mount it)\n")
    assert list(tmp_path.iterdir()) == []


def test_emit_tfjob_refuses_a_spec_that_does_not_validate_with_validates_errors(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(MLP.read_text().replace("variables: [\"*\"]", "variables: [nothing_here]"))
    validate = emit(tmp_path, spec=spec, command="validate")
    assert validate.returncode == 1 and "error" in validate.stderr, validate.stderr
    result = emit(tmp_path, "--image", "img:1", "-o", "job.yaml", spec=spec)
    assert (result.returncode, result.stdout, result.stderr) == (1, "", validate.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


@pytest.mark.parametrize(("flags", "line"), [
    (["--workers", "100000000"], "specgen train: error: --workers 100000000: expected 1 to 512 (every "
     "worker's address goes into each worker's TF_CONFIG, one environment string of at most 128 KiB)"),
    (["--workers", "513"], "specgen train: error: --workers 513: expected 1 to 512 (every worker's "
     "address goes into each worker's TF_CONFIG, one environment string of at most 128 KiB)"),
    (["--workers", "-1"], "specgen train: error: --workers -1: expected 1 to 512 (every worker's "
     "address goes into each worker's TF_CONFIG, one environment string of at most 128 KiB)"),
    (["--gpus", "100000"], "specgen train: error: --gpus 100000: expected 0 to 16 (GPUs on one node)"),
    # 3 workers x 1 CPU replica cannot split digits_mlp's global batch of 32: every worker would fail at start.
    (["--workers", "3"], f"{MLP}:26:15: error: train.batch_size 32 is the global batch and must split evenly among "
     "the 3 replicas of the multi_worker strategy; use 30 or 33"),
    (["--workers", "2", "--gpus", "3"], f"{MLP}:26:15: error: train.batch_size 32 is the global batch and must split "
     "evenly among the 6 replicas of the multi_worker strategy; use 30 or 36"),
])
def test_emit_tfjob_refuses_a_job_that_cannot_run_and_writes_nothing(tmp_path: Path, flags: list[str],
                                                                      line: str) -> None:
    result = emit(tmp_path, "--image", "img:1", *flags, "-o", "job.yaml")
    usage = line.startswith("specgen train: error: ")  # a flag's mistake (exit 2) or the spec's error (exit 1)
    assert (result.returncode, result.stdout, result.stderr) == ((2, "", f"{line}\n") if usage
                                                                 else (1, "", f"{line}\n1 error found\n"))
    assert list(tmp_path.iterdir()) == []


def test_emit_tfjob_takes_512_workers_with_names_kubernetes_accepts(tmp_path: Path) -> None:
    """The bound itself is accepted; every worker Service name `<job>-worker-<i>` stays an RFC 1035 label."""
    spec = tmp_path / "spec.yaml"
    long_name = "a_spec_name_" + "long_" * 12 + "end"  # 75 characters
    spec.write_text(MLP.read_text().replace("name: digits_mlp", f"name: {long_name}")
                    .replace("batch_size: 32", "batch_size: 512"))
    result = emit(tmp_path, "--image", "img:1", "--workers", "512", spec=spec)
    assert result.returncode == 0, result.stderr
    job = yaml.safe_load(result.stdout)
    name = job["metadata"]["name"]
    assert name == "a-spec-name-long-long-long-long-long-long-long-long"  # cut at 52, then the trailing '-'
    assert len(f"{name}-worker-511") == 62 and job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 512


def test_emit_tfjob_escapes_a_spec_path_that_would_inject_yaml(tmp_path: Path) -> None:
    """A newline in the spec's path must not start a YAML line: the header takes the path as repr, the
    manifest itself comes from yaml.safe_dump (the command holds the path as one string)."""
    folder = tmp_path / "x\nkind: Pod\nmetadata: {name: injected}\n#"
    folder.mkdir()
    spec = folder / "spec.yaml"
    spec.write_text(MLP.read_text().replace("../data/digits.npz", str(ROOT / "examples" / "data" / "digits.npz")))
    result = emit(tmp_path, "--image", "img:1", spec=spec)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == text.header(str(spec), "specgen train --emit tfjob")
    assert lines[1].startswith("# Apply with `kubectl apply -f`. Worker 0 is the chief")
    assert lines[2] == "apiVersion: kubeflow.org/v1"
    assert not any(line.startswith("#") for line in lines[2:])
    job = yaml.safe_load(result.stdout)
    assert (job["kind"], job["metadata"]) == ("TFJob", {"name": "digits-mlp"})
    [container] = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert container["command"][:3] == ["specgen", "train", str(spec)]


def test_emit_tfjob_counts_one_cpu_replica_per_worker(tmp_path: Path) -> None:
    """TensorFlow's multi_worker strategy runs one replica per worker on a CPU, whatever cpu_devices says: a split
    is refused at its key (the batch was checked among workers x cpu_devices replicas that never run), and the batch
    splits among the workers."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(MLP.read_text().replace("batch_size: 32", "batch_size: 18"))
    assert emit(tmp_path, "--image", "img:1", "--workers", "2", "-o", "job.yaml", spec=spec).returncode == 0
    split = tmp_path / "split.yaml"
    split.write_text(spec.read_text().replace("batch_size: 18", "batch_size: 18\n  distribute: {cpu_devices: 2}"))
    result = emit(tmp_path, "--image", "img:1", "--workers", "2", spec=split)
    assert result.returncode == 1 and result.stderr.endswith(
        ": error: cpu_devices 2 splits the CPU for the mirrored strategy only: TensorFlow's multi_worker strategy runs "
        "one replica per worker on a machine without GPUs; expected 1 under multi_worker (more replicas: more "
        "workers), or --strategy mirrored\n1 error found\n"), result.stderr
    assert emit(tmp_path, "--image", "img:1", "--workers", "2", "--gpus", "1", spec=split).returncode == 0  # GPUs
