"""A corpus of first-hour mistakes, each made in a copy of the project and run through `make plan`'s entry
point (offline.plan.main): every one is answered in ONE line on stderr that names the key (or file) at fault,
with no traceback and nothing written. The mistakes are the ones a new user makes editing Pulumi.<stack>.yaml
and the serve file by hand: typos, wrong types, bad values, missing keys, wrong namespaces, YAML slips, region
and instance mistakes. Each fails before any resource is declared, so the corpus takes seconds."""

from __future__ import annotations

import json
import re
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

from offline import impact
from offline import plan as plan_cli
from ray_llm_eks.adapters.stackfile import SecretValue
from ray_llm_eks.domain.serving import serve_config
from tests.conftest import copy_project

DEV = "Pulumi.dev.yaml"
PROD = "Pulumi.prod.yaml"
BASELINE = "Pulumi.baseline.yaml"
PD = "ray_llm_eks/serve_configs/pd-disaggregated.yaml"


def append(text: str):
    return DEV, lambda doc: doc + text


def replace(old: str, new: str, file: str = DEV):
    def edit(doc: str) -> str:
        assert old in doc, f"{old!r} is not in {file}: the corpus case no longer edits anything"
        return doc.replace(old, new, 1)

    return file, edit


def edits(*changes):
    """Several edits of one file, in order."""
    files = {file for file, _ in changes}
    assert len(files) == 1, files

    def edit(doc: str) -> str:
        for _, change in changes:
            doc = change(doc)
        return doc

    return files.pop(), edit


def sub(pattern: str, new: str):
    def edit(doc: str) -> str:
        changed = re.sub(pattern, new, doc, count=1)
        assert changed != doc, f"{pattern!r} matches nothing in {DEV}: the corpus case no longer edits anything"
        return changed

    return DEV, edit


def whole(text: str):
    return DEV, lambda _doc: text


# (id, the mistake, what the one line must contain: the key or file at fault first)
CORPUS = [
    # ---- typos in keys and namespaces
    ("key-typo", append("  ray-llm-eks:modelID: Qwen/Qwen3.5-9B\n"), ["ray-llm-eks:modelID", "did you mean"]),
    ("key-without-namespace-typo", append("  natGateway: single\n"), ["ray-llm-eks:natGateway"]),
    ("namespace-typo", append("  ray-llm-ek:modelId: Qwen/Qwen3.5-9B\n"), ["ray-llm-ek:modelId", "did you mean"]),
    ("aws-key-typo", append("  aws:regoin: us-east-1\n"), ["aws:regoin"]),
    (
        "pool-field-typo",
        replace("      instanceType: g6.8xlarge\n      minSize: 1", "      instanceType: g6.8xlarge\n      minSzie: 1"),
        ["gpuPools.prefill.minSzie"],
    ),
    (
        "system-field-typo",
        replace("    instanceType: m7i.xlarge", "    instancetype: m7i.xlarge"),
        ["systemNodes.instancetype"],
    ),
    ("unknown-pool-role", replace("    decode:\n", "    decoder:\n"), ["gpuPools"]),
    # ---- wrong types
    (
        "version-as-number",
        replace('ray-llm-eks:kubernetesVersion: "1.35"', "ray-llm-eks:kubernetesVersion: 1.35"),
        ["ray-llm-eks:kubernetesVersion = 1.35", "quote it"],
    ),
    ("yes-for-a-boolean", append("  ray-llm-eks:networkPolicies: yes\n"), ["ray-llm-eks:networkPolicies = 'yes'"]),
    ("off-for-a-boolean", append("  ray-llm-eks:apiKeyCheck: off\n"), ["ray-llm-eks:apiKeyCheck = 'off'"]),
    ("number-with-a-unit", append('  ray-llm-eks:clusterLogRetentionDays: "30d"\n'), ["clusterLogRetentionDays = 30d"]),
    (
        "zones-as-a-string",
        replace(
            "  ray-llm-eks:availabilityZones:\n    - us-east-1a\n    - us-east-1b\n",
            "  ray-llm-eks:availabilityZones: us-east-1a,us-east-1b\n",
        ),
        ["ray-llm-eks:availabilityZones"],
    ),
    (
        "size-as-a-string",
        replace("      minSize: 1\n      desiredSize: 1", '      minSize: "one"\n      desiredSize: 1'),
        ["gpuPools.prefill.minSize"],
    ),
    ("max-model-len-quoted", append('  ray-llm-eks:maxModelLen: "4k"\n'), ["ray-llm-eks:maxModelLen"]),
    (
        "pools-as-a-list",
        sub(r"  ray-llm-eks:gpuPools:\n(    .*\n)+", "  ray-llm-eks:gpuPools: [g6.8xlarge, g6.8xlarge]\n"),
        ["ray-llm-eks:gpuPools"],
    ),
    ("null-value", append("  ray-llm-eks:maxModelLen:\n"), ["ray-llm-eks:maxModelLen = null", "leave the key out"]),
    ("nan-number", append("  ray-llm-eks:maxNumSeqs: .nan\n"), ["ray-llm-eks:maxNumSeqs"]),
    # ---- bad values
    (
        "nat-gateways-value",
        replace("ray-llm-eks:natGateways: single", "ray-llm-eks:natGateways: one"),
        ["ray-llm-eks:natGateways = one"],
    ),
    (
        "environment-value",
        replace("ray-llm-eks:environment: dev", "ray-llm-eks:environment: development"),
        ["ray-llm-eks:environment = development"],
    ),
    ("kubernetes-version-unknown", replace('"1.35"', '"1.25"'), ["ray-llm-eks:kubernetesVersion"]),
    ("vpc-cidr-invalid", replace("10.0.0.0/16", "10.0.0.0/33"), ["ray-llm-eks:vpcCidr"]),
    (
        "min-above-max",
        replace(
            "      minSize: 1\n      desiredSize: 1\n      maxSize: 1\n    decode",
            "      minSize: 2\n      desiredSize: 1\n      maxSize: 1\n    decode",
        ),
        ["gpuPools.prefill"],
    ),
    ("max-model-len-zero", append("  ray-llm-eks:maxModelLen: 0\n"), ["ray-llm-eks:maxModelLen = 0"]),
    (
        "model-id-case-typo",
        append("  ray-llm-eks:modelId: Qwen/Qwen3.5-9b-Instruct\n"),
        ["ray-llm-eks:modelId = Qwen/Qwen3.5-9b-Instruct", "did you mean Qwen/Qwen3.5-9B?", "make model-spec"],
    ),
    (
        "model-unknown",
        append("  ray-llm-eks:modelId: mistralai/Mistral-7B-Instruct-v0.3\n"),
        ["ray-llm-eks:modelId", "make model-spec"],
    ),
    (
        "model-spec-field-typo",
        append("  ray-llm-eks:modelId: my-org/my-model\n  ray-llm-eks:modelSpec: {params: 8.03e9}\n"),
        ["modelSpec.params", "did you mean parameters?"],
    ),
    ("serve-config-unknown", append("  ray-llm-eks:serveConfig: pd-disagregated\n"), ["ray-llm-eks:serveConfig"]),
    ("kv-buffer-device", append("  ray-llm-eks:kvBufferDevice: gpu\n"), ["ray-llm-eks:kvBufferDevice = gpu"]),
    ("cluster-name-invalid", append("  ray-llm-eks:clusterName: -my-cluster\n"), ["ray-llm-eks:clusterName"]),
    (
        "api-keys-in-plain-text",
        append("  ray-llm-eks:apiKeys: sk-0123456789abcdef\n"),
        ["ray-llm-eks:apiKeys", "pulumi config set --secret apiKeys"],
    ),
    ("hf-token-in-plain-text", append("  ray-llm-eks:hfToken: hf_abc\n"), ["ray-llm-eks:hfToken", "--secret"]),
    ("existing-cluster-keys-alone", append("  ray-llm-eks:installKubeRay: false\n"), ["ray-llm-eks:installKubeRay"]),
    # ---- region and instance mistakes
    (
        "region-typo",
        replace("aws:region: us-east-1", "aws:region: us-east1"),
        ["aws:region = us-east1", "did you mean us-east-1?"],
    ),
    (
        "zone-of-another-region",
        replace("ray-llm-eks:gpuAvailabilityZone: us-east-1a", "ray-llm-eks:gpuAvailabilityZone: us-west-2a"),
        ["ray-llm-eks:gpuAvailabilityZone = us-west-2a"],
    ),
    (
        "zones-of-another-region",
        replace("    - us-east-1a\n    - us-east-1b\n", "    - eu-west-1a\n    - eu-west-1b\n"),
        ["ray-llm-eks:availabilityZones"],
    ),
    (
        "instance-type-typo",
        replace(
            "      instanceType: g6.8xlarge\n      minSize: 1\n      desiredSize: 1\n      maxSize: 1\n    decode",
            "      instanceType: g6.8xlarg\n      minSize: 1\n      desiredSize: 1\n      maxSize: 1\n    decode",
        ),
        ["gpuPools.prefill.instanceType = g6.8xlarg", "did you mean g6.8xlarge?"],
    ),
    (
        "cpu-instance-for-gpu-pool",
        replace(
            "      instanceType: g6.8xlarge\n      minSize: 1\n      desiredSize: 1\n      maxSize: 1\n    decode",
            "      instanceType: m7i.8xlarge\n      minSize: 1\n      desiredSize: 1\n      maxSize: 1\n    decode",
        ),
        ["gpuPools.prefill.instanceType = m7i.8xlarge"],
    ),
    (
        "system-node-type-typo",
        replace("    instanceType: m7i.xlarge", "    instanceType: m7i.xlarg"),
        ["systemNodes.instanceType = m7i.xlarg"],
    ),
    (
        "ami-id-and-release",
        append("  ray-llm-eks:gpuAmiId: ami-123\n"),
        ["ray-llm-eks:gpuAmiReleaseVersion", "gpuAmiId"],
    ),
    # ---- YAML slips
    (
        "tab-indent",
        replace("  ray-llm-eks:natGateways: single", "\tray-llm-eks:natGateways: single"),
        [DEV, "invalid YAML"],
    ),
    (
        "missing-space-after-colon",
        replace("ray-llm-eks:natGateways: single", "ray-llm-eks:natGateways:single\n  ray-llm-eks:vpcCidr:10.0.0.0/16"),
        [DEV],
    ),
    (
        "unclosed-bracket",
        replace("ray-llm-eks:natGateways: single", "ray-llm-eks:natGateways: [single"),
        [DEV, "invalid YAML"],
    ),
    (
        "key-set-twice",
        append("  ray-llm-eks:natGateways: perAz\n"),
        [DEV, "mapping key 'ray-llm-eks:natGateways' already defined"],
    ),
    (
        "keys-outside-config",
        append("ray-llm-eks:modelId: Qwen/Qwen3.5-9B\n"),
        [DEV, "ray-llm-eks:modelId is not a field of a stack file", "under `config:`"],
    ),
    ("empty-stack-file", whole(""), [DEV, "is empty"]),
    ("config-key-misspelt", whole("confg:\n  aws:region: us-east-1\n"), [DEV, "confg", "did you mean config?"]),
    # ---- the serve file
    (
        "serve-engine-kwarg-value",
        replace("gpu_memory_utilization: 0.92", "gpu_memory_utilization: 92", PD),
        ["gpu_memory_utilization = 92"],
    ),
    (
        "serve-kv-role-typo",
        replace("kv_role: kv_consumer", "kv_role: kv_consumr", PD),
        ["kv_transfer_config.kv_role = kv_consumr"],
    ),
    (
        "serve-import-path",
        replace("ray.serve.llm:build_pd_openai_app", "ray.serve.llm:build_pd_app", PD),
        ["import_path"],
    ),
    (
        "serve-yaml-slip",
        replace("          num_replicas: 1\n      decode_config", "          num_replicas: 1\n     decode_config", PD),
        ["pd-disaggregated.yaml", "invalid YAML"],
    ),
    (
        "serve-model-ids-differ",
        replace(
            "decode_config:\n        model_loading_config:\n          model_id: Qwen/Qwen3.5-9B\n",
            "decode_config:\n        model_loading_config:\n          model_id: Qwen/Qwen3.5-9B-x\n",
            PD,
        ),
        ["model_id"],
    ),
]


@pytest.fixture(scope="module")
def corpus_project(tmp_path_factory):
    """One copy of the project for the whole corpus: each case edits a file and puts it back."""
    root = tmp_path_factory.mktemp("corpus") / "project"
    copy_project(plan_cli.ROOT, root)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plan_cli, "ROOT", root)
        patch.setattr(serve_config, "SERVE_CONFIG_DIR", root / "ray_llm_eks" / "serve_configs")
        yield root


def test_the_corpus_is_large_and_each_case_distinct():
    assert len(CORPUS) >= 40 and len({case[0] for case in CORPUS}) == len(CORPUS)


@contextmanager
def _edited(root: Path, edit):
    """The project copy with one case's edit, put back afterwards; yields the stack of the edited file (dev for
    a serve file)."""
    file, change = edit
    path = root / file
    original = path.read_text() if path.exists() else None  # None: the case adds the file
    try:
        path.write_text(change(original or (root / DEV).read_text()))
        yield file.removeprefix("Pulumi.").removesuffix(".yaml") if file.startswith("Pulumi.") else "dev"
    finally:
        if original is None:
            path.unlink()
        else:
            path.write_text(original)
        shutil.rmtree(root / "out", ignore_errors=True)  # a case that planned must not fail the next ones


@pytest.mark.parametrize(("mistake", "edit", "expected"), CORPUS, ids=[case[0] for case in CORPUS])
def test_a_first_hour_mistake_is_one_line(corpus_project: Path, capsys, mistake, edit, expected):
    with _edited(corpus_project, edit):
        assert plan_cli.main(["--stack", "dev", "--out", str(corpus_project / "out")]) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err + captured.out, err
    for text in expected:
        assert text in err, err


def region(name: str, file: str = DEV):
    return file, lambda doc: doc.replace("us-east-1", name)


# ---- the second hour: the user's own stacks (copies of the shipped ones, other regions, other types), each
# refusal naming the key to change and a value that plans. `up`: the program run as `pulumi up` runs it (what
# only deploying refuses), with an API key set; `plan`: `make plan` refuses it in one line; `planned`: `make
# plan` plans it and its output says what is expected.
SECOND_HOUR = [
    (
        "documentation-cidr-at-up",
        (PROD, lambda doc: doc),
        "up",
        ["ray-llm-eks:endpointPublicAccessCidrs = 203.0.113.0/24", "documentation range", "/32"],
    ),
    (
        "dev-in-us-west-2-partial-cost",
        region("us-west-2"),
        "planned",
        [
            "total: unknown; at least 4.42 $/h",
            "missing prices: internal load balancer (NLB), NLB capacity units",
            "set prices.loadBalancerPerHour, prices.loadBalancerLcuPerHour",
        ],
    ),
    (
        "gpu-type-outside-the-table",
        replace("instanceType: g6.8xlarge", "instanceType: g5.2xlarge", BASELINE),
        "plan",
        [
            "ray-llm-eks:gpuPools.collocated.instanceType = g5.2xlarge",
            "g5.xlarge, g6.12xlarge",  # the small types collocated serving takes are among the known
            "g6.xlarge",
            "describe g5.2xlarge in the stack: instanceTypes: {g5.2xlarge: {gpuModel: ...",
        ],
    ),
    (
        "gpu-type-described-in-the-stack",
        edits(
            replace("instanceType: g6.8xlarge", "instanceType: g5.2xlarge", BASELINE),
            (
                BASELINE,
                lambda doc: (
                    doc + "  ray-llm-eks:instanceTypes: {g5.2xlarge: {gpuModel: A10G, gpus: 1, "
                    "gpuMemoryMiB: 24576, vcpus: 8, memoryGiB: 32, nvmeGb: 450}}\n"
                ),
            ),
        ),
        "planned",
        ["collocated (g5.2xlarge, A10G, max_num_seqs derived)", "set prices.instances.g5.2xlarge"],
    ),
    (
        "max-num-seqs-too-large",
        append("  ray-llm-eks:maxNumSeqs: 100000\n"),
        "plan",
        ["ray-llm-eks:maxNumSeqs = 100000: at most 69 for Qwen/Qwen3.5-9B on g6.8xlarge (L4)"],
    ),
    (
        "70b-on-the-cheapest-gpu",
        edits(
            replace("instanceType: g6.8xlarge", "instanceType: g6.xlarge", BASELINE),
            (BASELINE, lambda doc: doc + "  ray-llm-eks:modelId: meta-llama/Llama-3.1-70B-Instruct\n"),
        ),
        "plan",
        [
            "ray-llm-eks:gpuPools.collocated = g6.xlarge",
            "cheapest first: g6e.12xlarge with collocated engine_kwargs.tensor_parallel_size 4 (10.49 $/h a node)",
            "serveConfig tensor-parallel sets tensor_parallel_size 4",
        ],
    ),
    (
        "ami-release-without-its-v",
        replace("gpuAmiReleaseVersion: v20260903", "gpuAmiReleaseVersion: 20260903"),
        "plan",
        ["ray-llm-eks:gpuAmiReleaseVersion = 20260903: v20260903 ("],
    ),
    (
        "ami-release-quoted-without-its-v",
        replace("gpuAmiReleaseVersion: v20260903", 'gpuAmiReleaseVersion: "20260903"'),
        "plan",
        ["ray-llm-eks:gpuAmiReleaseVersion = '20260903': v20260903 ("],
    ),
    (
        "windows-path-as-model-source",
        append("  ray-llm-eks:modelSource: C:\\models\\Qwen3.5-9B\n"),
        "plan",
        ["ray-llm-eks:modelSource = C:\\models\\Qwen3.5-9B", "a path on this machine is not on the GPU nodes"],
    ),
    (
        "a-smaller-model-outside-the-table",
        append("  ray-llm-eks:modelId: Qwen/Qwen3-4B\n"),
        "plan",
        ["ray-llm-eks:modelId = Qwen/Qwen3-4B: a model whose memory facts the fit knows; known:", "make model-spec"],
    ),
    ("stack-name-case", (DEV, lambda doc: doc), "stack=Dev", ["no stack file Pulumi.Dev.yaml", "STACK=dev"]),
    ("stack-as-a-file-name", (DEV, lambda doc: doc), "stack=Pulumi.dev.yaml", ["STACK=dev"]),
    ("stack-empty", (DEV, lambda doc: doc), "stack=", ["STACK is empty: STACK=<stack>", "dev"]),
    (
        "stack-file-as-yml",
        ("Pulumi.mine.yml", lambda doc: doc),
        "stack=mine",
        ["no stack file Pulumi.mine.yaml", "Pulumi.mine.yml is there", "rename it Pulumi.mine.yaml"],
    ),
    (
        "make-diff-across-a-region-change",
        region("us-west-2"),
        "diff",
        [
            "[replaced (region change)] the stack: aws:region us-east-1 -> us-west-2: every resource is replaced",
            "[replaced (region change)] eks: eks:index:Cluster replaced",
            "[replaced (region change)] llm-rayservice: kubernetes:ray.io/v1:RayService replaced",
        ],
    ),
    (
        "serve-config-of-ones-own-not-beside-the-stack",
        replace("serveConfig: collocated", "serveConfig: serve/mine.yaml", BASELINE),
        "plan",
        [
            "ray-llm-eks:serveConfig = serve/mine.yaml",
            "a Ray Serve config file of your own beside the stack file",
            "no such file in",
        ],
    ),
    (
        "pulumi-up-without-the-makefile",
        (DEV, lambda doc: doc),
        "up-passes",
        ['"apiKey": "[secret]"', "random:index/randomPassword:RandomPassword llm-api-key"],
    ),
    (
        "region-without-a-price-table",
        region("ap-northeast-1"),
        "planned",
        ["ap-northeast-1 on-demand (no price table for ap-northeast-1", "prices.instances.g6.8xlarge"],
    ),
]


def _one_line_at_up(root: Path, stack: str) -> str:
    """The line `pulumi up` prints for the program's refusal (__main__.py hands the CLI str(error))."""
    with pytest.raises(ValueError) as caught:
        plan_cli.run_program(stack, {"ray-llm-eks:apiKeys": SecretValue("k" * 32)}, root=root, offline_plan=False)
    return f"error: {plan_cli.root_message(caught.value)}\n"


def _plan(root: Path, stack: str, out: str = "out") -> int:
    return plan_cli.main(["--stack", stack, "--out", str(root / out)])


def _said(root: Path, capsys, stack: str, run: str) -> str:
    """What the user reads, the case's file edited: the one line refusing it (`plan`, `up`), `make plan`'s output
    (`planned`), or `make diff`'s against the stack as shipped (`diff`)."""
    if run == "up":
        return _one_line_at_up(root, stack)
    if run == "up-passes":  # `pulumi up` as the CLI runs it, no apiKeys set (no `make stack` before it)
        plan = plan_cli.run_program(stack, root=root, offline_plan=False)
        made = [f"{r.type} {r.name}" for r in plan.registrations]
        return json.dumps(plan.outputs) + "\n".join(made)
    if run == "diff":
        assert _plan(root, stack) == 0
        capsys.readouterr()
        assert impact.main([str(root / "before"), str(root / "out")]) == 0
        return capsys.readouterr().out
    planned = _plan(root, stack)
    captured = capsys.readouterr()
    assert planned == (0 if run == "planned" else 2), captured.err
    return captured.out if run == "planned" else captured.err


@pytest.mark.parametrize(("mistake", "edit", "run", "expected"), SECOND_HOUR, ids=[c[0] for c in SECOND_HOUR])
def test_a_second_hour_mistake_is_one_line_naming_the_key(corpus_project: Path, capsys, mistake, edit, run, expected):
    if run == "diff":
        assert _plan(corpus_project, edit[0].removeprefix("Pulumi.").removesuffix(".yaml"), "before") == 0
    with _edited(corpus_project, edit) as stack:
        if run.startswith("stack="):  # the case is the STACK a user passes
            stack, run = run.removeprefix("stack="), "plan"
        said = _said(corpus_project, capsys, stack, run)
    shutil.rmtree(corpus_project / "before", ignore_errors=True)
    if run in ("plan", "up"):
        assert said.count("\n") == 1 and said.startswith("error: ") and "Traceback" not in said, said
    for text in expected:
        assert text in said, said
