"""pyproject.toml is the one source of versions; environment.yml must be its generated copy."""
import importlib.metadata
import re

import pytest
import yaml

from specdec import envspec


def test_environment_yml_is_generated_from_pyproject():
    assert envspec.ENVIRONMENT_YML.read_text() == envspec.environment_yml(), (
        "environment.yml drifted from pyproject.toml: run `specdec env environment-yml`")


def test_environment_yml_pins_match_pyproject_extras():
    env = yaml.safe_load(envspec.ENVIRONMENT_YML.read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    expected = envspec.pins() + [p for e in envspec.CONDA_EXTRAS for p in envspec.pins(e)]
    assert [p for p in pip_section if p != "-e ."] == expected
    assert "vllm==0.26.0" in pip_section


def test_every_dependency_is_pinned_exactly():
    for extra in [None, "book", "cpu", "data", "gpu", "test"]:
        for pin in envspec.pins(extra):
            assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.+\-]+", pin), pin


@pytest.mark.parametrize("extra", [None, "book"])
def test_installed_versions_match_pins(extra):
    for pin in envspec.pins(extra):
        name, version = pin.split("==")
        assert importlib.metadata.version(name) == version, pin


def test_docs_state_the_python_that_pyproject_requires():
    minimum = envspec.pyproject()["project"]["requires-python"].removeprefix(">=")
    where = {"Makefile": r"python3 \((3\.\d+)\+\)", "README.md": r"`python3` \((3\.\d+)\+\)",
             "book/reproduce.md": r"Python (3\.\d+) or newer"}
    stated = {f: re.findall(pattern, (envspec.paths.ROOT / f).read_text())
              for f, pattern in where.items()}
    assert stated == {f: [minimum] for f in where}
