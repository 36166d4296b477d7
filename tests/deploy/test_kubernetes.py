"""The Kubernetes example (``examples/kubernetes/``) holds together, checked
without a cluster or a network: nothing is applied.

- Every manifest validates against Kubernetes v1.31.0's JSON Schemas, strict
  (an unknown field is an error), vendored in
  ``tests/deploy/kubernetes-schemas/`` (its README says from where).
- Every environment variable and ConfigMap key is a setting of
  ``seqkeeper.settings`` (or the pod's own name or namespace), and each pod's
  environment, expanded as the kubelet does, builds valid settings that say
  what the manifests around them say: the instance id is the pod's name, the
  advertised URL its DNS name under the StatefulSet's headless Service and
  the web port, the data directory its volume.
- References hold: each StatefulSet's ``serviceName`` names a headless
  Service of the set selecting its pods, the probes name a declared port and
  the paths the worker serves, selectors match the pod labels, each PDB
  covers one StatefulSet's pods, the ConfigMap, claims and the Secret files
  named exist, every seqkeeper command line parses, and the kustomization
  lists every manifest.

Each check is a function returning what it found wrong; the tests at the end
plant a mistake in a copy of the manifests and see the check name it.
"""

from __future__ import annotations

import copy
import hashlib
import re
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource

from seqkeeper.adapter.transactions import TRANSACTION_TIMEOUT_MS
from seqkeeper.settings import VARS, Settings
from seqkeeper.settings.runtime_settings import TOPOLOGIES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kubernetes"
SCHEMAS = Path(__file__).resolve().parent / "kubernetes-schemas" / "v1.31.0-local-strict"
KUSTOMIZATION = "kustomization.yaml"

#: The schema file of each (apiVersion, kind) the example may use.
SCHEMA_FILES = {
    ("apps/v1", "StatefulSet"): "statefulset-apps-v1.json",
    ("v1", "Service"): "service-v1.json",
    ("v1", "ConfigMap"): "configmap-v1.json",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaim-v1.json",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudget-policy-v1.json",
    ("batch/v1", "CronJob"): "cronjob-batch-v1.json",
}

#: Variables that are no setting: the pod's identity, from the downward API,
#: to build settings from ($(POD_NAME) in the instance id and the URL).
POD_FIELDS = {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}

#: What the checks below pretend the pods are called and where they run.
NAMESPACE = "example"

Doc = dict[str, Any]


# -- loading ------------------------------------------------------------------


def manifest_files() -> list[Path]:
    return sorted(p for p in EXAMPLE.glob("*.yaml") if p.name != KUSTOMIZATION)


def load(files: list[Path] | None = None) -> list[Doc]:
    """Every document of the example's manifests, each with ``__file__``
    (the file's name) added, in file order."""
    docs: list[Doc] = []
    for path in files if files is not None else manifest_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                assert isinstance(doc, dict), f"{path.name}: a document is not a mapping"
                docs.append({**doc, "__file__": path.name})
    return docs


def bare(doc: Doc) -> Doc:
    return {k: v for k, v in doc.items() if k != "__file__"}


def label(doc: Doc) -> str:
    return f"{doc['__file__']}: {doc.get('kind')} {doc.get('metadata', {}).get('name')}"


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d.get("kind") == kind]


def pod_templates(docs: list[Doc]) -> Iterator[tuple[Doc, Doc]]:
    """(the StatefulSet or CronJob, its pod template) of each workload."""
    for doc in docs:
        if doc.get("kind") == "StatefulSet":
            yield doc, doc["spec"]["template"]
        elif doc.get("kind") == "CronJob":
            yield doc, doc["spec"]["jobTemplate"]["spec"]["template"]


def containers(docs: list[Doc]) -> Iterator[tuple[Doc, Doc, Doc]]:
    """(workload, pod template, container) of every container."""
    for workload, template in pod_templates(docs):
        for container in template["spec"].get("containers", []):
            yield workload, template, container


# -- the schemas --------------------------------------------------------------


def validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    """A strict validator for one kind; its references resolve in the
    vendored definitions only (a registry with no retrieval: no network)."""
    schema = json_of(SCHEMAS / SCHEMA_FILES[(api_version, kind)])
    definitions = json_of(SCHEMAS / "_definitions.json")
    registry: Registry[Any] = Registry().with_resources(
        [
            (definitions["$id"], Resource.from_contents(definitions)),
            (schema["$id"], Resource.from_contents(schema)),
        ]
    )
    cls = jsonschema.validators.validator_for(schema)
    assert cls is jsonschema.Draft202012Validator, schema.get("$schema")
    return cls(schema, registry=registry)


def json_of(path: Path) -> Any:
    import json

    return json.loads(path.read_text(encoding="utf-8"))


def schema_problems(docs: list[Doc]) -> list[str]:
    problems = []
    for doc in docs:
        key = (doc.get("apiVersion"), doc.get("kind"))
        if key not in SCHEMA_FILES:
            problems.append(f"{label(doc)}: no vendored schema for {key}")
            continue
        for error in validator(*key).iter_errors(bare(doc)):
            where = "/".join(map(str, error.absolute_path)) or "(top)"
            problems.append(f"{label(doc)}: {where}: {error.message}")
    return problems


# -- the settings -------------------------------------------------------------

SETTING_NAMES = {v.env for v in VARS.values()}


def config_maps(docs: list[Doc]) -> dict[str, dict[str, str]]:
    return {d["metadata"]["name"]: d.get("data") or {} for d in of_kind(docs, "ConfigMap")}


def setting_name_problems(docs: list[Doc], texts: Mapping[str, str]) -> list[str]:
    """Every ``SEQKEEPER_*``/``KAFKA_*`` word in the files (comments too: a
    commented example is copied), every ConfigMap key and every container
    variable is a setting; the only others are the pod's own fields."""
    problems = []
    for name, text in texts.items():
        for word in sorted(set(re.findall(r"\b(?:SEQKEEPER|KAFKA)_[A-Z0-9_]+\b", text))):
            if word not in SETTING_NAMES:
                problems.append(f"{name}: {word} is no setting")
    for cm_name, data in config_maps(docs).items():
        for key in data:
            if key not in SETTING_NAMES:
                problems.append(f"ConfigMap {cm_name}: {key} is no setting")
    for workload, _, container in containers(docs):
        for entry in container.get("env", []):
            name = entry["name"]
            if name in SETTING_NAMES:
                continue
            field = (entry.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
            if name not in POD_FIELDS or POD_FIELDS[name] != field:
                problems.append(
                    f"{label(workload)}: container {container['name']}: {name} is no setting "
                    f"(nor the pod's own field: {sorted(POD_FIELDS)})"
                )
    return problems


def expand(text: str, env: Mapping[str, str]) -> str:
    """``$(VAR)`` as the kubelet expands it: from the variables defined
    before; ``$$`` is a literal ``$``; an unknown reference stays as it is."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, text)


def pod_env(docs: list[Doc], workload: Doc, container: Doc, pod_name: str) -> dict[str, str]:
    """The container's environment in pod ``pod_name``: its ConfigMaps,
    then its variables in order (a Secret's variable is left out; none is
    expected: secrets are files)."""
    cms = config_maps(docs)
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        ref = source.get("configMapRef")
        assert ref is not None, f"{label(workload)}: envFrom {source}: only ConfigMaps expected"
        assert ref["name"] in cms, f"{label(workload)}: no ConfigMap {ref['name']} in the set"
        env.update({k: str(v) for k, v in cms[ref["name"]].items()})
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = expand(str(entry["value"]), env)
            continue
        field = (entry.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
        assert field in ("metadata.name", "metadata.namespace"), (
            f"{label(workload)}: {entry['name']}: a value from {entry.get('valueFrom')} "
            "(secrets go in as files)"
        )
        env[entry["name"]] = pod_name if field == "metadata.name" else NAMESPACE
    return env


def settings_in(env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings a process with exactly ``env`` (of our variables) builds."""
    for name in SETTING_NAMES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings()


def mounts(template: Doc, container: Doc) -> dict[PurePosixPath, Doc]:
    """Each mount path of the container, with the volume it mounts
    (``{"claimTemplate": name}`` for a StatefulSet's claim template)."""
    volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
    out = {}
    for m in container.get("volumeMounts", []):
        out[PurePosixPath(m["mountPath"])] = volumes.get(m["name"], {"claimTemplate": m["name"]})
    return out


def worker_problems(docs: list[Doc], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each StatefulSet's pod (the first one, and the last) builds settings
    that match its manifests."""
    problems: list[str] = []
    services = {s["metadata"]["name"]: s for s in of_kind(docs, "Service")}
    for sts in of_kind(docs, "StatefulSet"):
        name, spec = sts["metadata"]["name"], sts["spec"]
        template = spec["template"]
        claims = {c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])}
        for container in template["spec"]["containers"]:
            for ordinal in (0, spec.get("replicas", 1) - 1):
                pod = f"{name}-{ordinal}"
                where = f"{label(sts)}: pod {pod}"
                env = pod_env(docs, sts, container, pod)
                unexpanded = {k: v for k, v in env.items() if re.search(r"\$\(", v)}
                if unexpanded:
                    problems.append(f"{where}: references not expanded: {unexpanded}")
                try:
                    s = settings_in(env, monkeypatch)
                except Exception as e:  # SettingError, or a group's own check
                    problems.append(f"{where}: its settings do not build: {e}")
                    continue
                problems += [
                    f"{where}: {p}"
                    for p in pod_problems(s, pod, sts, services, template, container)
                ]
                # the data directory lies on the pod's own volume
                on = [
                    vol
                    for path, vol in mounts(template, container).items()
                    if path == PurePosixPath(str(s.runtime.data_dir))
                ]
                if not (on and on[0].get("claimTemplate") in claims):
                    problems.append(
                        f"{where}: SEQKEEPER_DATA_DIR {s.runtime.data_dir} is not the mount "
                        f"of a volumeClaimTemplate ({sorted(claims)})"
                    )
    return problems


def pod_problems(
    s: Settings, pod: str, sts: Doc, services: dict[str, Doc], template: Doc, container: Doc
) -> list[str]:
    problems = []
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    if s.runtime.instance_id != pod:
        problems.append(f"SEQKEEPER_INSTANCE_ID is {s.runtime.instance_id!r}, not the pod's name")
    if ports.get("web") != s.runtime.web_port:
        problems.append(
            f"SEQKEEPER_WEB_PORT {s.runtime.web_port} is not the container port `web` "
            f"({ports.get('web')})"
        )
    # loopback would hide the server from the probes and the redirects
    if s.runtime.web_host not in ("0.0.0.0", "::"):
        problems.append(f"SEQKEEPER_WEB_HOST {s.runtime.web_host!r}: not every interface")
    service = sts["spec"]["serviceName"]
    url = f"http://{pod}.{service}.{NAMESPACE}.svc:{s.runtime.web_port}"
    if s.runtime.advertised_url != url:
        problems.append(f"SEQKEEPER_ADVERTISED_URL is {s.runtime.advertised_url!r}, not {url!r}")
    if service in services:
        service_ports = [p.get("port") for p in services[service]["spec"].get("ports", [])]
        if s.runtime.web_port not in service_ports:
            problems.append(f"Service {service} has no port {s.runtime.web_port}")
    # a token file (or any *_FILE setting) lies in a mounted Secret
    for v in VARS.values():
        path = str(getattr(getattr(s, v.group), v.name))
        if v.env.endswith("_FILE") and path:
            secret = [
                vol
                for mount, vol in mounts(template, container).items()
                if mount in PurePosixPath(path).parents
            ]
            if not (secret and "secret" in secret[0]):
                problems.append(f"{v.env} {path} is in no mounted Secret")
    return problems


# -- the references -----------------------------------------------------------


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def reference_problems(docs: list[Doc]) -> list[str]:
    problems = []
    services = {s["metadata"]["name"]: s for s in of_kind(docs, "Service")}
    sets = of_kind(docs, "StatefulSet")
    pdbs = of_kind(docs, "PodDisruptionBudget")
    claims = {c["metadata"]["name"] for c in of_kind(docs, "PersistentVolumeClaim")}
    for sts in sets:
        spec, where = sts["spec"], label(sts)
        labels = spec["template"]["metadata"].get("labels", {})
        others = [o["spec"]["template"]["metadata"].get("labels", {}) for o in sets if o is not sts]
        if not selects(spec["selector"].get("matchLabels", {}), labels):
            problems.append(f"{where}: its selector does not match its pod labels")
        service = services.get(spec.get("serviceName", ""))
        if service is None:
            problems.append(f"{where}: serviceName {spec.get('serviceName')!r} is no Service")
        else:
            if service["spec"].get("clusterIP") != "None":
                problems.append(f"{where}: Service {spec['serviceName']} is not headless")
            selector = service["spec"].get("selector", {})
            if not selects(selector, labels) or any(selects(selector, o) for o in others):
                problems.append(
                    f"{where}: Service {spec['serviceName']} does not select its pods only"
                )
        covering = [
            p for p in pdbs if selects(p["spec"]["selector"].get("matchLabels", {}), labels)
        ]
        if len(covering) != 1 or any(
            selects(covering[0]["spec"]["selector"]["matchLabels"], o) for o in others
        ):
            problems.append(f"{where}: not covered by one PodDisruptionBudget of its own")
        if spec.get("podManagementPolicy") != "Parallel":
            problems.append(f"{where}: podManagementPolicy is not Parallel")
        if spec.get("updateStrategy", {}).get("type", "RollingUpdate") != "RollingUpdate":
            problems.append(f"{where}: not rolling updates")
        grace = spec["template"]["spec"].get("terminationGracePeriodSeconds", 30)
        # a clean stop may end a transaction, which may run up to its timeout
        if grace <= TRANSACTION_TIMEOUT_MS / 1000:
            problems.append(f"{where}: terminationGracePeriodSeconds {grace} is too short")
    for pdb in pdbs:
        selector = pdb["spec"]["selector"].get("matchLabels", {})
        if not any(selects(selector, s["spec"]["template"]["metadata"]["labels"]) for s in sets):
            problems.append(f"{label(pdb)}: selects no StatefulSet's pods")
    for workload, template, container in containers(docs):
        where = f"{label(workload)}: container {container['name']}"
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            get = (container.get(probe) or {}).get("httpGet")
            if get is None:
                continue
            port = get["port"]
            if port not in ports and port not in ports.values():
                problems.append(f"{where}: {probe} port {port!r} is no container port")
        for volume in template["spec"].get("volumes", []):
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim is not None and claim not in claims:
                problems.append(f"{where}: claim {claim} is not in the set")
        for m in container.get("volumeMounts", []):
            names = {v["name"] for v in template["spec"].get("volumes", [])}
            if workload["kind"] == "StatefulSet":
                names |= {
                    c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])
                }
            if m["name"] not in names:
                problems.append(f"{where}: mounts {m['name']}, which is no volume")
    return problems


def served_paths() -> set[str]:
    """The worker's health paths, as the worker's code declares them."""
    source = (ROOT / "seqkeeper" / "runtime" / "wiring.py").read_text()
    return set(re.findall(r'@app\.page\("(/[a-z]+)"\)', source))


#: Which path each probe must ask: liveness and start-up the worker's
#: liveness, readiness its readiness (docs/operations.md).
PROBE_PATHS = {"startupProbe": "/health", "livenessProbe": "/health", "readinessProbe": "/ready"}


def probe_problems(docs: list[Doc], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    problems = []
    for workload, _, container in containers(docs):
        if workload["kind"] != "StatefulSet":
            continue
        where = f"{label(workload)}: container {container['name']}"
        pod = f"{workload['metadata']['name']}-0"
        broker_wait = settings_in(
            pod_env(docs, workload, container, pod), monkeypatch
        ).broker.broker_wait
        for probe, path in PROBE_PATHS.items():
            get = (container.get(probe) or {}).get("httpGet")
            if get is None or get.get("path") != path:
                problems.append(f"{where}: {probe} does not ask {path}")
        startup = container.get("startupProbe") or {}
        # the web server starts once the broker answers: the start-up probe
        # outlasts the broker wait (the worker exits after it)
        lasts = startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3)
        if lasts <= broker_wait:
            problems.append(f"{where}: startupProbe gives up after {lasts} s < broker wait")
    return problems


def pod_security_problems(docs: list[Doc]) -> list[str]:
    problems = []
    for workload, template, container in containers(docs):
        where = f"{label(workload)}: container {container['name']}"
        pod = template["spec"].get("securityContext", {})
        own = container.get("securityContext", {})
        if own.get("runAsNonRoot", pod.get("runAsNonRoot")) is not True:
            problems.append(f"{where}: runAsNonRoot is not set")
        if own.get("runAsUser", pod.get("runAsUser")) in (None, 0):
            problems.append(f"{where}: no non-root runAsUser")
        if own.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: allowPrivilegeEscalation is not false")
        resources = container.get("resources", {})
        for kind in ("requests", "limits"):
            if not {"cpu", "memory"} <= set(resources.get(kind, {})):
                problems.append(f"{where}: no cpu and memory {kind}")
    return problems


def subcommand_problems(docs: list[Doc]) -> list[str]:
    """The CLI accepts each container's command line (``args``; the image's
    entrypoint is ``seqkeeper``)."""
    import typer

    from seqkeeper.cli import app

    problems = []
    group = typer.main.get_command(app)
    for workload, _, container in containers(docs):
        args = [str(a) for a in container.get("args", [])]
        where = f"{label(workload)}: container {container['name']}: seqkeeper {shlex.join(args)}"
        if "command" in container or not args:
            problems.append(f"{where}: expected args only (the entrypoint runs seqkeeper)")
            continue
        parent = group.make_context("seqkeeper", list(args))
        sub = group.get_command(parent, args[0])  # type: ignore[attr-defined]
        if sub is None:
            problems.append(f"{where}: no subcommand {args[0]!r}")
            continue
        try:
            sub.make_context(args[0], list(args[1:]), parent=parent)
        except Exception as e:  # click's UsageError and kin
            problems.append(f"{where}: {e.format_message() if hasattr(e, 'format_message') else e}")
    return problems


# -- the tests ----------------------------------------------------------------


def texts() -> dict[str, str]:
    return {p.name: p.read_text() for p in [*manifest_files(), EXAMPLE / KUSTOMIZATION]}


def test_the_vendored_schemas_are_the_ones_the_readme_names() -> None:
    readme = (SCHEMAS.parent / "README.md").read_text()
    assert "v1.31.0" in readme and SCHEMAS.name == "v1.31.0-local-strict"
    digests = dict(re.findall(r"\| `([^`]+\.json)` \| `([0-9a-f]{64})` \|", readme))
    files = {p.name for p in SCHEMAS.glob("*.json")}
    assert files == set(digests), (sorted(files), sorted(digests))
    assert set(SCHEMA_FILES.values()) <= files
    for name, digest in digests.items():
        assert hashlib.sha256((SCHEMAS / name).read_bytes()).hexdigest() == digest, name
    for name in files:
        schema = json_of(SCHEMAS / name)
        jsonschema.Draft202012Validator.check_schema(schema)


def test_the_example_is_a_statefulset_per_worker_kind_and_compact() -> None:
    docs = load()
    topologies = {}
    for sts in of_kind(docs, "StatefulSet"):
        (container,) = sts["spec"]["template"]["spec"]["containers"]
        env = pod_env(docs, sts, container, f"{sts['metadata']['name']}-0")
        topologies[env.get("SEQKEEPER_TOPOLOGY", "ordered")] = sts["metadata"]["name"]
        assert sts["spec"].get("volumeClaimTemplates"), label(sts)
    assert set(topologies) == set(TOPOLOGIES), topologies
    compact = [
        c["args"][0] for w, _, c in containers(docs) if w["kind"] == "CronJob" and c.get("args")
    ]
    assert compact == ["compact"], compact
    assert len(of_kind(docs, "PodDisruptionBudget")) == len(topologies)
    assert len(of_kind(docs, "ConfigMap")) == 1


def test_every_manifest_matches_the_kubernetes_schema() -> None:
    docs = load()
    assert len(docs) >= 8, [label(d) for d in docs]
    assert not (problems := schema_problems(docs)), "\n".join(problems)


def test_every_variable_is_a_setting() -> None:
    docs = load()
    assert config_maps(docs), "no ConfigMap"
    assert not (problems := setting_name_problems(docs, texts())), "\n".join(problems)


def test_each_pod_builds_the_settings_its_manifests_describe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not (problems := worker_problems(load(), monkeypatch)), "\n".join(problems)


def test_compact_builds_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = load()
    jobs = [(w, c) for w, _, c in containers(docs) if w["kind"] == "CronJob"]
    assert jobs
    for job, container in jobs:
        s = settings_in(pod_env(docs, job, container, "compact"), monkeypatch)
        assert s.broker.bootstrap, label(job)  # compact needs a broker named
        args = container["args"]
        warehouse = PurePosixPath(args[args.index("--warehouse") + 1])
        template = job["spec"]["jobTemplate"]["spec"]["template"]
        on = mounts(template, container).get(warehouse, {})
        assert "persistentVolumeClaim" in on, f"{label(job)}: --warehouse {warehouse} on {on}"


def test_the_references_hold() -> None:
    docs = load()
    assert len(of_kind(docs, "StatefulSet")) >= 2
    assert not (problems := reference_problems(docs)), "\n".join(problems)


def test_the_probes_ask_the_paths_the_worker_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(PROBE_PATHS.values()) <= served_paths(), served_paths()
    assert not (problems := probe_problems(load(), monkeypatch)), "\n".join(problems)


def test_pods_run_as_a_user_with_resources() -> None:
    assert not (problems := pod_security_problems(load())), "\n".join(problems)


def test_every_command_line_parses() -> None:
    assert not (problems := subcommand_problems(load())), "\n".join(problems)


def test_the_kustomization_lists_every_manifest_and_the_image() -> None:
    kustomization = yaml.safe_load((EXAMPLE / KUSTOMIZATION).read_text())
    assert sorted(kustomization["resources"]) == sorted(p.name for p in manifest_files())
    images = {c["image"].split(":")[0] for _, _, c in containers(load())}
    assert images == {i["name"] for i in kustomization["images"]}, images


# -- the checks can fail: a planted mistake is named ---------------------------


def planted(change: Any) -> list[Doc]:
    """A copy of the manifests with ``change`` applied to it."""
    docs = copy.deepcopy(load())
    change(docs)
    return docs


def first(docs: list[Doc], kind: str) -> Doc:
    return of_kind(docs, kind)[0]


def worker(docs: list[Doc]) -> Doc:
    container: Doc = first(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    return container


def test_a_misspelt_field_fails_the_schema() -> None:
    def misspell(docs: list[Doc]) -> None:
        c = worker(docs)
        c["readinesProbe"] = c.pop("readinessProbe")

    problems = schema_problems(planted(misspell))
    assert any("readinesProbe" in p for p in problems), problems


def test_a_wrong_type_fails_the_schema() -> None:
    def text_port(docs: list[Doc]) -> None:
        worker(docs)["ports"][0]["containerPort"] = "web"

    assert schema_problems(planted(text_port))


def test_a_probe_on_an_undeclared_port_is_named() -> None:
    def bad_port(docs: list[Doc]) -> None:
        worker(docs)["livenessProbe"]["httpGet"]["port"] = "http"

    problems = reference_problems(planted(bad_port))
    assert any("livenessProbe port 'http'" in p for p in problems), problems


def test_a_variable_that_is_no_setting_is_named() -> None:
    def typo(docs: list[Doc]) -> None:
        worker(docs)["env"].append({"name": "SEQKEEPER_STANDBYS", "value": "1"})

    problems = setting_name_problems(planted(typo), {})
    assert any("SEQKEEPER_STANDBYS" in p for p in problems), problems
    commented = {"x.yaml": "# SEQKEEPER_STANDBY_REPLICA: 1"}
    assert setting_name_problems(load(), commented)


def test_a_bad_value_or_a_wrong_url_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def bad_value(docs: list[Doc]) -> None:
        first(docs, "ConfigMap")["data"]["SEQKEEPER_SESSION_TIMEOUT"] = "a minute"

    assert any("do not build" in p for p in worker_problems(planted(bad_value), monkeypatch))

    def other_service(docs: list[Doc]) -> None:
        for entry in worker(docs)["env"]:
            if entry["name"] == "SEQKEEPER_ADVERTISED_URL":
                entry["value"] = entry["value"].replace(".svc", ".svc.cluster.local")

    problems = worker_problems(planted(other_service), monkeypatch)
    assert any("SEQKEEPER_ADVERTISED_URL" in p for p in problems), problems

    def static_name(docs: list[Doc]) -> None:
        for entry in worker(docs)["env"]:
            if entry["name"] == "SEQKEEPER_INSTANCE_ID":
                entry["value"] = "worker"

    problems = worker_problems(planted(static_name), monkeypatch)
    assert any("SEQKEEPER_INSTANCE_ID" in p for p in problems), problems


def test_a_broken_selector_or_service_is_named() -> None:
    def pdb_selects_nothing(docs: list[Doc]) -> None:
        first(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]["x"] = "y"

    assert reference_problems(planted(pdb_selects_nothing))

    def no_service(docs: list[Doc]) -> None:
        first(docs, "StatefulSet")["spec"]["serviceName"] = "seqkeeper"

    problems = reference_problems(planted(no_service))
    assert any("serviceName 'seqkeeper'" in p for p in problems), problems


def test_a_command_line_the_cli_refuses_is_named() -> None:
    def unknown_flag(docs: list[Doc]) -> None:
        worker(docs)["args"] = ["worker", "--standby", "1"]

    assert subcommand_problems(planted(unknown_flag))
