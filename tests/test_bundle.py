"""The offline bundle (parts, hashes, tamper detection, unpack); the merge of returned results
is tested in tests/test_merge.py.

Everything runs on small synthetic wheels, so it is fast; one test looks at the real vLLM
wheel only if it is already in the wheel cache.
"""
import json
import os
import zipfile
from pathlib import Path

import pytest

from specdec import bundle, paths, provenance
from specdec import wheels as shipped  # (a fixture below is named wheels)
from specdec.lockfile import canonical_name, read_lock
from specdec.bundle import BundleError

PART = 100_000


def _wheel(d: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    whl = d / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        for arc, data in files.items():
            zf.writestr(arc, data)
        zf.writestr(f"{name}-{version}.dist-info/METADATA",
                    f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return whl


@pytest.fixture
def wheels(tmp_path):
    d = tmp_path / "wheels"
    d.mkdir()
    big = os.urandom(250_000)  # incompressible: the archive must span several parts
    _wheel(d, "fakepkg", "1.0", {
        "fakepkg/__init__.py": b"VALUE = 42\n",
        "fakepkg/big.bin": big,
        "fakepkg/trim_me.so": b"x" * 1000,
        "fakepkg/third_party/junk/a.hpp": b"junk",
        "fakepkg-1.0.data/purelib/fakepkg_extra.py": b"EXTRA = 1\n",
        "fakepkg-1.0.data/scripts/fakepkg-cli": b"#!/bin/sh\n",
    })
    _wheel(d, "other_pkg", "2.0", {"other_pkg/__init__.py": b""})
    return d, big


def _pack(tmp_path, wheels_dir, **kw):
    kw.setdefault("requirements", ["fakepkg==1.0", "other-pkg==2.0"])
    return bundle.pack(tmp_path / "out", profiles=("h200-mechanics",), part_size=PART,
                       wheel_dir=wheels_dir, trimmed=("fakepkg/trim_me.so", "fakepkg/third_party/"),
                       download=False, preset=0, **kw)


def test_pack_writes_hashed_parts_of_bounded_size(tmp_path, wheels):
    man = _pack(tmp_path, wheels[0])
    out = tmp_path / "out"
    assert len(man["parts"]) >= 3
    whole = b""
    for p in man["parts"]:
        data = (out / p["name"]).read_bytes()
        assert len(data) == p["size"] <= PART
        assert bundle.hashlib.sha256(data).hexdigest() == p["sha256"]
        whole += data
    assert bundle.hashlib.sha256(whole).hexdigest() == man["archive"]["sha256"]
    assert json.loads((out / bundle.MANIFEST).read_text()) == man
    assert man["trimmed"]["files"] == 2 and man["trimmed"]["rules_matching_nothing"] == []
    assert [p["requirement"] for p in man["packages"]] == ["fakepkg==1.0", "other-pkg==2.0"]
    assert man["host"]["env"] == {"VLLM_USE_FLASHINFER_SAMPLER": "0"}


def test_unpack_round_trip(tmp_path, wheels):
    wdir, big = wheels
    _pack(tmp_path, wdir)
    site, repo = tmp_path / "site", tmp_path / "repo"
    man = bundle.unpack(tmp_path / "out", site, repo_dir=repo, host_check=False)
    assert (site / "fakepkg" / "big.bin").read_bytes() == big
    assert (site / "fakepkg" / "__init__.py").read_text() == "VALUE = 42\n"
    assert (site / "fakepkg_extra.py").is_file(), "purelib files land in site-packages"
    assert (site / "fakepkg-1.0.dist-info" / "METADATA").is_file()
    assert not (site / "fakepkg" / "trim_me.so").exists()
    assert not (site / "fakepkg" / "third_party").exists()
    assert not list(site.rglob("fakepkg-cli")), "scripts are not installed"
    # The study travels too: code, the profile and exactly the model configs it uses.
    assert (repo / "lib/specdec/bundle.py").read_bytes() == (paths.ROOT / "lib/specdec/bundle.py").read_bytes()
    assert (repo / "profiles/h200-mechanics.yaml").is_file()
    shipped = sorted(p.name for p in (repo / "data/model_configs").iterdir())
    assert shipped == bundle.profile_model_configs(["h200-mechanics"])
    assert "llama-3-8b" in shipped and "phi-2" not in shipped
    env = bundle.shell_env(man, site, repo / "lib")
    assert f"PYTHONPATH={site.resolve()}:{(repo / 'lib').resolve()}" in env
    assert "export VLLM_USE_FLASHINFER_SAMPLER=0" in env and "SPECDEC_COMMIT=" in env
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".specdec-unpack-")]


def test_resplit_recuts_the_same_archive_into_smaller_parts(tmp_path, wheels):
    """When the tree beside every part grows, the bundle is cut again, not rebuilt: the same
    archive (hash checked), more parts, each within the new size; it still unpacks."""
    wdir, big = wheels
    before = _pack(tmp_path, wdir)
    out = tmp_path / "out"
    man = bundle.resplit(out, PART // 2)
    assert man["archive"] == before["archive"] and len(man["parts"]) > len(before["parts"])
    assert all(p["size"] <= PART // 2 for p in man["parts"])
    assert sorted(f.name for f in out.iterdir()) == sorted([bundle.MANIFEST] + [p["name"] for p in man["parts"]])
    assert bundle.verify(out) == man == json.loads((out / bundle.MANIFEST).read_text())
    bundle.unpack(out, tmp_path / "site", host_check=False)
    assert (tmp_path / "site" / "fakepkg" / "big.bin").read_bytes() == big
    # back to larger parts: fewer files, none left over
    assert len(bundle.resplit(out, PART * 3)["parts"]) < len(man["parts"])
    assert len(list(out.glob(f"{bundle.ARCHIVE}.*"))) == len(bundle.read_manifest(out)["parts"])
    # an altered part is refused before anything is re-cut
    first = out / bundle.read_manifest(out)["parts"][0]["name"]
    first.write_bytes(b"x" + first.read_bytes()[1:])
    with pytest.raises(bundle.BundleError, match="altered"):
        bundle.resplit(out, PART)


def test_unpack_refuses_a_non_empty_site_unless_replace(tmp_path, wheels):
    _pack(tmp_path, wheels[0])
    site = tmp_path / "site"
    site.mkdir()
    (site / "keep.txt").write_text("mine")
    with pytest.raises(BundleError, match="not empty"):
        bundle.unpack(tmp_path / "out", site, host_check=False)
    assert (site / "keep.txt").read_text() == "mine"
    bundle.unpack(tmp_path / "out", site, host_check=False, replace=True)
    assert (site / "fakepkg" / "__init__.py").is_file() and not (site / "keep.txt").exists()


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "manifest"])
def test_tampered_or_missing_parts_are_refused_before_extracting(tmp_path, wheels, damage):
    man = _pack(tmp_path, wheels[0])
    out = tmp_path / "out"
    victim = out / man["parts"][1]["name"]
    if damage == "flip":
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
        match = f"{victim.name}: sha256 .* does not match"
    elif damage == "truncate":
        victim.write_bytes(victim.read_bytes()[:-10])
        match = f"{victim.name}: .* bytes, the manifest says"
    elif damage == "delete":
        victim.unlink()
        match = f"missing part\\(s\\) {victim.name}"
    else:
        (out / bundle.MANIFEST).unlink()
        match = "no manifest"
    with pytest.raises(BundleError, match=match):
        bundle.unpack(out, tmp_path / "site", host_check=False)
    assert not (tmp_path / "site").exists(), "nothing may be extracted from a bad bundle"


def test_parts_swapped_are_caught_by_the_whole_hash(tmp_path, wheels):
    man = _pack(tmp_path, wheels[0])
    out = tmp_path / "out"
    m = json.loads((out / bundle.MANIFEST).read_text())
    m["parts"][0], m["parts"][1] = m["parts"][1], m["parts"][0]  # each part still self-consistent
    (out / bundle.MANIFEST).write_text(json.dumps(m))
    with pytest.raises(BundleError, match="parts together hash"):
        bundle.verify(out)


def test_host_check_names_the_mismatch(tmp_path, wheels):
    man = _pack(tmp_path, wheels[0])
    with pytest.raises(BundleError, match="host.python: .*Python 2.7"):
        bundle.check_host({**man, "host": {**man["host"], "python": "2.7"}})
    with pytest.raises(BundleError, match="host.torch: .*0.0.1"):
        py = f"{bundle.sys.version_info.major}.{bundle.sys.version_info.minor}"
        bundle.check_host({**man, "host": {**man["host"], "python": py, "torch": "0.0.1"}})


def test_pack_refuses_bad_requirements(tmp_path, wheels):
    with pytest.raises(BundleError, match="more than one version of fakepkg"):
        _pack(tmp_path, wheels[0], requirements=["fakepkg==1.0", "fakepkg==1.1"])
    with pytest.raises(BundleError, match="no wheel for absent==3.0"):
        _pack(tmp_path, wheels[0], requirements=["fakepkg==1.0", "absent==3.0"])
    with pytest.raises(BundleError, match="part_size"):
        bundle.pack(tmp_path / "o2", part_size=0, wheel_dir=wheels[0],
                    requirements=["fakepkg==1.0"], download=False)


def test_bundled_requirements_are_exact_disjoint_pins():
    pins = shipped.locked_requirements()
    assert pins[0] == "vllm==0.26.0"
    names = [shipped.requirement_name(r) for r in pins[1:]]
    assert len(names) == len(set(names))
    assert all("==" in r for r in pins)
    assert not set(names) & shipped.HOST_PACKAGES, "the host's own packages must not be shadowed"
    assert not set(names) & {canonical_name(n) for n in shipped.NOT_BUNDLED}
    assert "vllm" not in names
    for must in ("pydantic", "fastapi", "openai", "msgspec", "pyzmq", "cbor2", "blake3",
                 "xgrammar", "llguidance"):
        assert must in names
    assert "flashinfer-python" in shipped.NOT_BUNDLED


#: The manifest of the bundle built on 2026-12-01 from the pins then written in bundle.py.
BUILT = Path(__file__).parent / "fixtures" / "bundle-manifest-2026-12-01.json"


def test_lock_pins_and_hashes_are_those_of_the_bundle_built_before_the_move():
    built = json.loads(BUILT.read_text())["packages"]
    lock = read_lock(shipped.LOCK_FILE)
    assert [r.requirement for r in lock] == [p["requirement"] for p in built]
    assert [r.hashes for r in lock] == [(p["sha256"],) for p in built]
    assert len(lock) == 85


def test_a_bundle_already_built_here_matches_the_lock():
    man = paths.ROOT / ".bundle" / bundle.MANIFEST
    if not man.is_file():
        pytest.skip("no bundle built in this checkout (.bundle/ is git-ignored)")
    packages = json.loads(man.read_text())["packages"]
    locked = {r.requirement: r.hashes for r in read_lock(shipped.LOCK_FILE)}
    assert [p["requirement"] for p in packages] == list(locked)
    assert all(p["sha256"] in locked[p["requirement"]] for p in packages)


HASH = "0" * 64


@pytest.mark.parametrize("text, match", [
    ("vllm>=0.26.0 \\\n    --hash=sha256:" + HASH, r"lock\.txt:1: 'vllm>=0\.26\.0' is not an exact pin"),
    ("vllm==0.26.0", r"lock\.txt:1: vllm==0\.26\.0 has no --hash=sha256:"),
    ("# c\n\nvllm==0.26.0 --hash=sha256:" + HASH[:-1], r"lock\.txt:3: '--hash=sha256:0+' is not --hash"),
    ("vllm==0.26.0 --hash=md5:" + HASH[:32], r"lock\.txt:1: '--hash=md5:"),
    ("vllm==0.26.0 --hash=sha256:" + HASH + " ; python_version<'3.13'", r"';' is not --hash"),
    ("-e .", r"lock\.txt:1: '-e' is not an exact pin"),
    ("https://x/vllm.whl --hash=sha256:" + HASH, r"'https://x/vllm\.whl' is not an exact pin"),
    ("vllm==0.26.0 --hash=sha256:" + HASH + "\nVLLM==0.26.1 --hash=sha256:" + HASH,
     r"lock\.txt:2: vllm is pinned again \(first on line 1\)"),
    ("vllm==0.26.0 \\", r"lock\.txt:1: the last requirement ends with a line continuation"),
    ("# only comments\n", r"lock\.txt: no requirements"),
    ("numpy==2.0 --hash=sha256:" + HASH, r"lock\.txt:1: the first pin must be vllm"),
])
def test_the_lock_reader_refuses_malformed_lines(tmp_path, text, match):
    f = tmp_path / "lock.txt"
    f.write_text(text + "\n")
    with pytest.raises(bundle.LockError, match=match):
        shipped.locked_requirements(f)


def test_the_lock_reader_reads_continued_lines_and_several_hashes(tmp_path):
    f = tmp_path / "lock.txt"
    f.write_text("# header\nvllm==0.26.0 \\\n    --hash=sha256:" + HASH + " \\\n"
                 "    --hash=sha256:" + "1" * 64 + "\nother_pkg==2.0 --hash=sha256:" + HASH + "\n")
    lock = read_lock(f)
    assert [(r.requirement, r.line, len(r.hashes)) for r in lock] == [
        ("vllm==0.26.0", 2, 2), ("other_pkg==2.0", 5, 1)]
    with pytest.raises(bundle.LockError, match="cannot read the lock"):
        read_lock(tmp_path / "absent.txt")


def _lock_for(tmp_path, wheels_dir, digest=None):
    """A lock pinning the fake wheels (vllm first, as pack requires) with their real hashes."""
    vllm = _wheel(wheels_dir, "vllm", "0.0.1", {"vllm/__init__.py": b""})
    lines = []
    for req, whl in (("vllm==0.0.1", vllm), ("fakepkg==1.0", wheels_dir / "fakepkg-1.0-py3-none-any.whl")):
        lines.append(f"{req} --hash=sha256:{digest or provenance.sha256_file(whl)}")
    f = tmp_path / "lock.txt"
    f.write_text("\n".join(lines) + "\n")
    return f


def test_pack_reads_the_lock_and_checks_every_wheels_hash(tmp_path, wheels):
    lock = _lock_for(tmp_path, wheels[0])
    man = _pack(tmp_path, wheels[0], requirements=None, lock=lock)
    assert [p["requirement"] for p in man["packages"]] == ["vllm==0.0.1", "fakepkg==1.0"]
    assert [p["sha256"] for p in man["packages"]] == [r.hashes[0] for r in read_lock(lock)]
    assert man["not_bundled"] == list(shipped.NOT_BUNDLED)
    bad = _lock_for(tmp_path, wheels[0], digest=HASH)
    with pytest.raises(BundleError, match=r"vllm-0\.0\.1-py3-none-any\.whl: sha256 \w+ is not the one .*lock\.txt:1 locks"):
        _pack(tmp_path, wheels[0], requirements=None, lock=bad)


def test_trim_rules_match_the_real_vllm_wheel():
    whl = shipped.find_wheel(paths.CACHE_DIR / "wheels", shipped.locked_requirements()[0])
    if whl is None:
        pytest.skip("vllm 0.26.0 wheel not in the cache (specdec bundle downloads it)")
    assert "cp38-abi3-manylinux_2_28_x86_64" in whl.name  # loads on CPython 3.12, glibc >= 2.28
    trimmed = [n for n, _, trim in shipped.wheel_entries(whl, shipped.TRIMMED) if trim]
    for rule in shipped.TRIMMED:
        assert any(shipped.is_trimmed(n, [rule]) for n in trimmed), rule
    kept = {n for n, _, trim in shipped.wheel_entries(whl, shipped.TRIMMED) if not trim}
    assert "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so" in kept  # Hopper's attention stays


def test_cli_reports_unpack_errors_plainly(tmp_path, capsys):
    from specdec import cli

    assert cli.main(["unpack", str(tmp_path / "nothing"), "--site", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specdec unpack: error: ") and "no manifest" in err
    assert "Traceback" not in err


def test_unpack_needs_only_the_standard_library():
    """scripts/lease.sh unpacks with the GPU host's own python, which has no pydantic or
    yaml (the first try of lease 2 failed on that): specdec.bundle must import without them."""
    import subprocess
    import sys

    code = ("import sys; sys.path.insert(0, 'lib'); from specdec import bundle; "
            "third = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'pydantic', 'yaml', 'pandas', 'numpy', 'pyarrow', 'vllm', 'torch'}); print(third)")
    out = subprocess.run([sys.executable, "-c", code], cwd=paths.ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_pack_names_a_malformed_lock_plainly(tmp_path, wheels, capsys):
    bad = tmp_path / "lock.txt"
    bad.write_text("vllm>=0.26\n")
    with pytest.raises(BundleError, match=r"lock\.txt:1: 'vllm>=0\.26' is not an exact pin"):
        _pack(tmp_path, wheels[0], requirements=None, lock=bad)
    from specdec import cli

    assert cli.main(["bundle", "--out", str(tmp_path / "o"), "--wheel-dir", str(wheels[0]),
                     "--no-download", "--lock", str(bad)]) == 2
    assert "is not an exact pin" in capsys.readouterr().err
