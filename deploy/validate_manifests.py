"""Validate a kustomize base offline: ``python3 deploy/validate_manifests.py deploy/k8s``.

No cluster, no network, no ``kubectl``: the Kubernetes kinds are checked
with kubernetes-validate's bundled OpenAPI schemas (strict: an unknown field
is an error, which is how a typo shows), KEDA's kinds with the JSON schemas in
``deploy/schemas/`` (kubernetes-validate knows no custom resource), and the
references between resources that a schema cannot see are checked here: a
ScaledObject's target and its TriggerAuthentication exist, each Service
selects some Deployment's pods, a probe's or Service's named port exists.

The kustomization is "rendered" only as far as validation needs: its
``resources`` are read in order, and every YAML file of the directory must be
one of them (a manifest nobody applies is a mistake too). Kustomize's own
transformers (namespace, labels, images) only add or rewrite fields the
schemas accept either way.

Exit status 0 if all is well, 1 with one line per problem otherwise.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

#: The oldest and the newest Kubernetes this base is checked against.
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
SCHEMAS = Path(__file__).resolve().parent / "schemas"
#: The keys of a kustomization.yaml this base may use.
KUSTOMIZATION_KEYS = {
    "apiVersion",
    "kind",
    "namespace",
    "labels",
    "commonLabels",
    "commonAnnotations",
    "images",
    "resources",
    "patches",
    "configMapGenerator",
    "secretGenerator",
}


def _documents(path: Path) -> Iterator[dict[str, Any]]:
    for doc in yaml.safe_load_all(path.read_text()):
        if doc is not None:
            yield doc


def _custom_schema(doc: dict[str, Any]) -> Path:
    group_version = str(doc.get("apiVersion", "")).replace("/", "_")
    return SCHEMAS / f"{group_version}_{doc.get('kind')}.json"


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top)"


def validate_document(doc: dict[str, Any]) -> list[str]:
    """Problems of one manifest against its kind's schema (empty if none)."""
    if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
        return ["not a Kubernetes object (no apiVersion and kind)"]
    schema_path = _custom_schema(doc)
    if schema_path.exists():
        validator = jsonschema.Draft202012Validator(json.loads(schema_path.read_text()))
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        # dict: one line per message (a value may break two rules at one place).
        return list(dict.fromkeys(f"{_where(e)}: {e.message}" for e in errors))
    # kubernetes-validate stops at a document's first error: fix, then run again.
    found: dict[str, list[str]] = {}
    for version in KUBERNETES_VERSIONS:
        message = _kubernetes_problem(json.dumps(doc, sort_keys=True), version)
        if message is not None:
            found.setdefault(message, []).append(version)
    return [f"{message} (Kubernetes {', '.join(v)})" for message, v in found.items()]


@functools.lru_cache(maxsize=1024)
def _kubernetes_problem(doc_json: str, version: str) -> str | None:
    """The first problem of one manifest (as JSON) against one Kubernetes version.

    Remembered per manifest and version: kubernetes-validate reads and parses
    its definitions (megabytes of JSON) at every call, and a base's manifests
    are checked again and again unchanged (by the tests, once per broken copy).
    """
    doc = json.loads(doc_json)
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return f"{_where(exc)}: {exc.message}"
    except kubernetes_validate.SchemaNotFoundError:
        return (
            f"no schema for {doc['apiVersion']} {doc['kind']}, neither in Kubernetes "
            f"nor in deploy/schemas/{_custom_schema(doc).name}"
        )
    return None


def _pod_templates(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    template = doc.get("spec", {}).get("template")
    if doc.get("kind") in {"Deployment", "Job", "StatefulSet", "DaemonSet"} and template:
        yield template


def _named_ports(template: dict[str, Any]) -> set[str]:
    return {
        p["name"]
        for c in template.get("spec", {}).get("containers", [])
        for p in c.get("ports", [])
        if "name" in p
    }


def cross_check(docs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """References between the manifests that no single schema can check."""
    problems = []
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for _, doc in docs:
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc
    deployments = by_kind.get("Deployment", {})
    for where, doc in docs:
        name = f"{where}: {doc['kind']} {doc['metadata']['name']}"
        if doc["kind"] == "ScaledObject":
            spec = doc["spec"]
            target = spec["scaleTargetRef"]["name"]
            if target not in deployments:
                problems.append(f"{name}: scaleTargetRef {target!r} is no Deployment here")
            elif "replicas" in deployments[target]["spec"]:
                problems.append(
                    f"{name}: Deployment {target!r} sets replicas, which every apply would "
                    "reset under the autoscaler"
                )
            for trigger in spec["triggers"]:
                auth = trigger.get("authenticationRef", {}).get("name")
                if auth and auth not in by_kind.get("TriggerAuthentication", {}):
                    problems.append(f"{name}: authenticationRef {auth!r} is not defined here")
        if doc["kind"] == "Service":
            selector = doc["spec"].get("selector", {})
            matching = [
                d
                for d in deployments.values()
                if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
            ]
            if not matching:
                problems.append(f"{name}: its selector matches no Deployment's pods")
            for port in doc["spec"].get("ports", []):
                target_port = port.get("targetPort")
                if isinstance(target_port, str) and not any(
                    target_port in _named_ports(d["spec"]["template"]) for d in matching
                ):
                    problems.append(f"{name}: targetPort {target_port!r} is no named port")
        for template in _pod_templates(doc):
            ports = _named_ports(template)
            for container in template["spec"]["containers"]:
                for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                    check = container.get(probe, {})
                    for kind in ("httpGet", "tcpSocket"):
                        port = check.get(kind, {}).get("port")
                        if isinstance(port, str) and port not in ports:
                            problems.append(f"{name}: {probe} names port {port!r}, not defined")
    return problems


def validate_base(base: Path) -> list[str]:
    """Every problem of the kustomize base (or overlay) in directory ``base``."""
    problems, docs = _load(base)
    return problems + cross_check(docs)


def _load(base: Path) -> tuple[list[str], list[tuple[str, dict[str, Any]]]]:
    """A kustomization's problems and its valid documents, an overlay's with its
    base's (a resource that is a directory) and its patches applied."""
    kustomization = base / "kustomization.yaml"
    if not kustomization.exists():
        return [f"{base}: no kustomization.yaml"], []
    spec = yaml.safe_load(kustomization.read_text()) or {}
    problems = [
        f"kustomization.yaml: unexpected key {key!r}"
        for key in sorted(set(spec) - KUSTOMIZATION_KEYS)
    ]
    resources = spec.get("resources") or []
    if not resources:
        problems.append("kustomization.yaml: no resources")
    patches = [p["path"] for p in spec.get("patches") or [] if "path" in p]
    listed = {(base / r).resolve() for r in [*resources, *patches]}
    for path in sorted(base.glob("*.yaml")):
        if path.name != "kustomization.yaml" and path.resolve() not in listed:
            problems.append(f"{path.name}: not listed in kustomization.yaml's resources")
    docs: list[tuple[str, dict[str, Any]]] = []
    for resource in resources:
        path = base / resource
        if path.is_dir():
            inner, inner_docs = _load(path)
            problems += [f"{resource}/{p}" for p in inner]
            docs += inner_docs
            continue
        problems += _read(base, resource, docs, "resource")
    # A patch here is a whole manifest (a strategic merge whose lists replace
    # the base's), or a `$patch: delete` of one: checked, then put in its place.
    for patch in patches:
        patched: list[tuple[str, dict[str, Any]]] = []
        problems += _read(base, patch, patched, "patch")
        for where, doc in patched:
            key = (doc["kind"], doc["metadata"]["name"])
            docs = [(w, d) for w, d in docs if (d["kind"], d["metadata"]["name"]) != key]
            if doc.get("$patch") != "delete":
                docs.append((where, doc))
    return problems, docs


def _read(base: Path, name: str, docs: list[tuple[str, dict[str, Any]]], what: str) -> list[str]:
    path = base / name
    if not path.is_file():
        return [f"kustomization.yaml: {what} {name!r} does not exist"]
    try:
        found = list(_documents(path))
    except yaml.YAMLError as exc:
        return [f"{name}: not YAML: {exc}"]
    problems: list[str] = []
    for doc in found:
        if doc.get("$patch") == "delete" and "metadata" in doc:
            docs.append((name, doc))
            continue
        own = validate_document(doc)
        problems += [f"{name}: {doc.get('kind')}: {p}" for p in own]
        if not own:
            docs.append((name, doc))
    return problems


def main(argv: list[str]) -> int:
    """Validate each base named in ``argv``; print the problems."""
    if not argv:
        print("usage: validate_manifests.py KUSTOMIZE_DIR...", file=sys.stderr)
        return 2
    failed = False
    for arg in argv:
        problems = validate_base(Path(arg))
        for problem in problems:
            print(f"{arg}/{problem}", file=sys.stderr)
        failed = failed or bool(problems)
        if not problems:
            print(f"{arg}: valid (Kubernetes {', '.join(KUBERNETES_VERSIONS)}; KEDA schemas)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
