"""deploy/k8s validates offline, and the validator refuses what a cluster would.

The same check .ci/run runs (``deploy/validate_manifests.py``), here so that
the README's test command covers it too; plus ``docker compose config`` when
a docker CLI is installed.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from chaz.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "k8s"


def _validator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "validate_manifests", ROOT / "deploy" / "validate_manifests.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


validator = _validator()

#: Seconds a worker needs, at least, between its hand-back and the platform's
#: SIGKILL: turns reach a safe point, write their hand-back, the worker exits.
HAND_BACK_MARGIN = 30


def test_the_kustomize_base_is_valid() -> None:
    assert validator.validate_base(BASE) == []


def test_the_base_has_what_issue_13_asks_for() -> None:
    docs = [
        doc
        for path in sorted(BASE.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in validator._documents(path)
    ]
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    worker = by_name[("Deployment", "chaz-worker")]["spec"]["template"]["spec"]
    [container] = worker["containers"]
    assert (
        container["command"][:2] == ["chaz", "worker"] and "--metrics-port" in container["command"]
    )
    assert container["livenessProbe"]["exec"]["command"] == ["chaz", "probe", "worker", "--live"]
    assert container["readinessProbe"]["exec"]["command"] == ["chaz", "probe", "worker"]
    assert worker["terminationGracePeriodSeconds"] > 0
    # The hand-back comes before the SIGKILL, with time to reach a safe point
    # and exit; so does chaz's default, for a manifest that leaves it unset.
    env = {e["name"]: e.get("value") for e in container["env"]}
    grace = float(env["CHAZ_SHUTDOWN_GRACE_SECONDS"])
    assert grace + HAND_BACK_MARGIN <= worker["terminationGracePeriodSeconds"]
    default = Settings.model_fields["shutdown_grace_seconds"].default
    assert default + HAND_BACK_MARGIN <= worker["terminationGracePeriodSeconds"]
    assert {"requests", "limits"} <= container["resources"].keys()
    beat = by_name[("Deployment", "chaz-beat")]["spec"]
    assert beat["replicas"] == 1 and beat["strategy"]["type"] == "Recreate"
    [trigger] = by_name[("ScaledObject", "chaz-worker")]["spec"]["triggers"]
    assert trigger["type"] == "redis" and trigger["metadata"]["listName"] == "chaz.turns"
    flower = by_name[("Deployment", "chaz-flower")]["spec"]["template"]["spec"]["containers"][0]
    assert [e["name"] for e in flower["env"]] == ["FLOWER_BASIC_AUTH"]
    exporter = by_name[("Service", "chaz-exporter")]
    assert exporter["metadata"]["annotations"]["prometheus.io/port"] == "9808"
    assert by_name[("Job", "chaz-migrate")]["spec"]["template"]["spec"]["containers"][0][
        "command"
    ] == ["chaz", "migrate"]


#: (file, text to replace, its replacement, a phrase of the expected problem)
BROKEN = [
    pytest.param(
        "worker-deployment.yaml",
        "terminationGracePeriodSeconds: 300",
        "terminationGracePeriod: 300",
        "'terminationGracePeriod' was unexpected",
        id="typo-in-a-kubernetes-field",
    ),
    pytest.param(
        "worker-deployment.yaml",
        "memory: 512Mi",
        "memory: [512Mi]",
        "resources.limits.memory",
        id="wrong-type",
    ),
    pytest.param(
        "worker-scaledobject.yaml",
        'listLength: "16"',
        "listLength: 16",
        "16 is not of type 'string'",
        id="keda-metadata-not-a-string",
    ),
    pytest.param(
        "worker-scaledobject.yaml",
        "listName: chaz.turns",
        "listname: chaz.turns",
        "'listName' is a required property",
        id="keda-redis-trigger-typo",
    ),
    pytest.param(
        "worker-scaledobject.yaml",
        "name: chaz-worker       #",
        "name: chaz-workers #",
        "scaleTargetRef 'chaz-workers' is no Deployment",
        id="scaler-targets-nothing",
    ),
    pytest.param(
        "worker-scaledobject.yaml",
        "name: chaz-redis    #",
        "name: chaz-redis-auth #",
        "authenticationRef 'chaz-redis-auth' is not defined",
        id="unknown-trigger-authentication",
    ),
    pytest.param(
        "flower-service.yaml",
        "targetPort: http",
        "targetPort: web",
        "targetPort 'web' is no named port",
        id="service-port-name",
    ),
    pytest.param(
        "exporter-service.yaml",
        "app.kubernetes.io/component: exporter\n  ports",
        "app.kubernetes.io/component: exported\n  ports",
        "selector matches no Deployment",
        id="service-selects-nothing",
    ),
    pytest.param(
        "kustomization.yaml",
        "  - flower-service.yaml\n",
        "",
        "flower-service.yaml: not listed",
        id="manifest-not-listed",
    ),
    pytest.param(
        "kustomization.yaml",
        "  - flower-service.yaml\n",
        "  - flower-service.yaml\n  - flower-ingress.yaml\n",
        "'flower-ingress.yaml' does not exist",
        id="listed-file-missing",
    ),
]


@pytest.mark.parametrize(("name", "old", "new", "problem"), BROKEN)
def test_a_broken_manifest_is_refused(
    tmp_path: Path, name: str, old: str, new: str, problem: str
) -> None:
    base = tmp_path / "k8s"
    shutil.copytree(BASE, base)
    path = base / name
    text = path.read_text()
    assert old in text, f"the test's anchor {old!r} is gone from {name}"
    path.write_text(text.replace(old, new, 1))
    problems = validator.validate_base(base)
    assert any(problem in p for p in problems), problems


def test_the_command_line_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert validator.main([str(BASE)]) == 0
    (tmp_path / "kustomization.yaml").write_text("resources: [gone.yaml]\n")
    assert validator.main([str(tmp_path)]) == 1
    assert "does not exist" in capsys.readouterr().err


def _compose() -> bool:
    if shutil.which("docker") is None:
        return False
    version = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=60)
    return version.returncode == 0


@pytest.mark.skipif(not _compose(), reason="no docker compose on this machine")
def test_docker_compose_config_is_valid() -> None:
    done = subprocess.run(
        ["docker", "compose", "config", "-q"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_the_rabbitmq_overlay_scales_on_the_rabbitmq_queue_and_drops_the_redis_trigger() -> None:
    overlay = BASE / "rabbitmq"
    assert validator.validate_base(overlay) == []
    problems, docs = validator._load(overlay)
    assert problems == []
    [scaled] = [d for _, d in docs if d["kind"] == "ScaledObject"]
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "rabbitmq"
    assert trigger["metadata"]["queueName"] == "chaz.turns"
    assert trigger["metadata"]["mode"] == "QueueLength"
    auths = {d["metadata"]["name"] for _, d in docs if d["kind"] == "TriggerAuthentication"}
    assert auths == {"chaz-rabbitmq"}
    # The overlay keeps the base's workers, beat, Flower and exporter.
    assert {("Deployment", "chaz-worker"), ("Deployment", "chaz-flower")} <= {
        (d["kind"], d["metadata"]["name"]) for _, d in docs
    }


def test_an_overlay_naming_a_missing_auth_is_refused(tmp_path: Path) -> None:
    overlay = tmp_path / "k8s" / "rabbitmq"
    shutil.copytree(BASE, tmp_path / "k8s")
    text = (overlay / "worker-scaledobject.yaml").read_text()
    (overlay / "worker-scaledobject.yaml").write_text(text.replace("chaz-rabbitmq ", "chaz-nope "))
    assert any("'chaz-nope' is not defined" in p for p in validator.validate_base(overlay))
