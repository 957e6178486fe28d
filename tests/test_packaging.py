"""What the package declares and installs.

The bundled YAML (top-level experiments/ and configs/) installs as attnsim.experiments / attnsim.configs: both
folders live outside the package, and pyproject maps them with ``[tool.setuptools] package-dir``. These tests
build from a copy of the source tree (the worktree stays clean), offline (``--no-build-isolation``: the
setuptools already installed).

The metadata accepts any torch from 2.4 on, so that installing attnsim keeps an environment's torch;
constraints.txt pins the tested version, and the Makefile installs with it. Pieces only some uses need are
extras (``attnsim[server]``, ``[vision]``, ``[cjk]``, ``[gguf]``, all four as ``[all]``), which ``make install`` installs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from tests.helpers.paths import ROOT

# run in a fresh interpreter from a folder without ./experiments or ./configs
PROBE = """
import json, sys
from importlib import resources
import attnsim
from attnsim.config import list_experiments, load_config, package_dir
exp = resources.files("attnsim.experiments")
print(json.dumps({
    "attnsim": attnsim.__file__,
    "resources": str(exp),
    "configs": str(resources.files("attnsim.configs")),
    "package_dir": str(package_dir("experiments")),
    "experiments": sorted(list_experiments()),
    "vit_csm": [load_config("vit_csm").model.path, str(load_config("vit_csm").corpus.source)],
    "csm_experiment": load_config("csm").tracking.experiment,
}))
"""


def source_copy(tmp_path: Path) -> Path:
    """What a build needs of the source tree, copied to ``tmp_path/src``."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("attnsim", "experiments", "configs"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    return src


def probe(tmp_path: Path, setup: str = "", pythonpath: str = "") -> dict:
    """:data:`PROBE`'s answer in a fresh interpreter run from an empty folder.

    ``setup``: code run first; when given, the interpreter starts with ``-S`` (no site-packages).
    """
    run = tmp_path / "elsewhere"
    run.mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": pythonpath, "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-S", "-c", setup + PROBE] if setup else [sys.executable, "-c", PROBE]
    proc = subprocess.run(argv, cwd=run, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION = PYPROJECT["version"]
# each extra: the distributions it installs, each with the module attnsim imports from it (the one its message names)
EXTRAS = {
    "server": {"psycopg": "psycopg"},
    "vision": {"scikit-image": "skimage"},
    "cjk": {"noto-cjk-sans-otc": "noto_cjk_sans_otc"},
    "gguf": {"gguf": "gguf", "accelerate": "accelerate"},
}


def bundled_names() -> list:
    return sorted(p.stem for p in (ROOT / "experiments").glob("*.yaml") if not p.stem.startswith("_"))


def test_every_package_folder_is_listed_in_pyproject():
    """Packages are listed by hand (a mapped folder defeats packages.find): a new subpackage must be added."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "attnsim").rglob("__init__.py") if "__pycache__" not in p.parts}
    # folders of data files only (no __init__.py) are listed too: setuptools warns once per folder it is not told of
    data = {"attnsim.explore.static"} | {f"attnsim.configs.{d.name}" for d in (ROOT / "configs").iterdir() if d.is_dir() and d.name != "__pycache__"}
    assert set(setuptools["packages"]) == on_disk | {"attnsim.experiments", "attnsim.configs"} | data
    assert setuptools["package-dir"] == {"attnsim.experiments": "experiments", "attnsim.configs": "configs"}
    assert not (ROOT / "attnsim" / "experiments").exists() and not (ROOT / "attnsim" / "configs").exists()


def test_built_wheel_holds_and_reads_the_bundled_yaml(tmp_path):
    src = source_copy(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(tmp_path / "dist"), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("attnsim-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    metadata = zipfile.ZipFile(wheel).read(f"attnsim-{VERSION}.dist-info/METADATA").decode().splitlines()
    assert "Requires-Dist: torch>=2.4" in metadata and not [line for line in metadata if line.startswith("Requires-Dist: psycopg") and "extra ==" not in line]
    assert {line.split(": ", 1)[1] for line in metadata if line.startswith("Provides-Extra:")} == {"server", "vision", "cjk", "gguf", "all", "test", "docs"}
    assert "attnsim/experiments/_base.yaml" in names and "attnsim/experiments/csm.yaml" in names
    assert "attnsim/configs/model/vit_random.yaml" in names and "attnsim/configs/corpus/images.yaml" in names
    assert not [n for n in names if n.startswith(("experiments/", "configs/"))]  # nothing at the top level of site-packages
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    got = probe(tmp_path, pythonpath=str(site))
    assert got["attnsim"] == str(site / "attnsim" / "__init__.py")
    assert got["resources"] == got["package_dir"] == str(site / "attnsim" / "experiments")
    assert got["configs"] == str(site / "attnsim" / "configs")
    assert got["experiments"] == bundled_names() and "_base" not in got["experiments"]
    assert got["vit_csm"] == ["build", "images"] and got["csm_experiment"] == "csm"


def test_editable_install_maps_the_top_level_folders(tmp_path):
    """setuptools' editable finder (PEP 660, lenient mode) resolves attnsim.experiments to the source's experiments/."""
    src = source_copy(tmp_path)
    build = subprocess.run(
        [sys.executable, "-c", f"import setuptools.build_meta as b; print(b.build_editable({str(tmp_path / 'dist')!r}))"],
        cwd=src,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    wheel = tmp_path / "dist" / build.stdout.strip().splitlines()[-1]
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    # -S: no site-packages .pth of this venv (its own editable attnsim would come first); only the
    # new editable install's .pth is processed (first: its finder module has the same name as the
    # venv's), then the dependencies' folder goes on sys.path
    deps = [p for p in sys.path if p.endswith("site-packages")]
    got = probe(tmp_path, setup=f"import site, sys; site.addsitedir({str(site)!r}); sys.path.extend({deps!r})\n")
    assert got["attnsim"] == str(src / "attnsim" / "__init__.py")
    assert got["resources"] == got["package_dir"] == str(src / "experiments")
    assert got["configs"] == str(src / "configs")
    assert got["experiments"] == bundled_names()
    assert got["vit_csm"] == ["build", "images"] and got["csm_experiment"] == "csm"


def test_torch_is_a_range_in_the_metadata_and_pinned_by_the_constraints():
    from packaging.requirements import Requirement

    (torch,) = [Requirement(line) for line in PYPROJECT["dependencies"] if Requirement(line).name == "torch"]
    assert str(torch.specifier) == ">=2.4"
    assert [version in torch.specifier for version in ("2.3.1", "2.4.0", "2.5.1", "2.13.0")] == [False, True, True, True]
    lines = [line.split("#")[0].strip() for line in (ROOT / "constraints.txt").read_text().splitlines()]
    assert [line for line in lines if line] == ["torch==2.13.0"]


def test_extras_install_the_modules_their_messages_name():
    from importlib.metadata import packages_distributions

    from packaging.requirements import Requirement

    extras = PYPROJECT["optional-dependencies"]
    assert {extra: [Requirement(line).name for line in extras[extra]] for extra in EXTRAS} == {extra: list(dists) for extra, dists in EXTRAS.items()}
    assert extras["all"] == ["attnsim[server,vision,cjk,gguf]"]
    required = {Requirement(line).name for line in PYPROJECT["dependencies"]}
    assert not required & {dist for dists in EXTRAS.values() for dist in dists}  # not installed with attnsim itself
    modules = packages_distributions()
    assert {module: modules.get(module) for dists in EXTRAS.values() for module in dists.values()} == {
        module: [dist] for dists in EXTRAS.values() for dist, module in dists.items()
    }


def test_makefile_and_the_plain_commands_install_every_extra_with_the_constraints():
    command = 'pip install -c constraints.txt -e ".[all,test,docs]"'
    makefile = (ROOT / "Makefile").read_text()
    assert f"$(PY) -m {command}" in makefile and "$(VENV)/.installed: pyproject.toml constraints.txt Makefile" in makefile
    assert command in (ROOT / "docs" / "getting-started.md").read_text()
    assert "constraints.txt" in (ROOT / "README.md").read_text()
    assert "checkpoints/" in (ROOT / ".gitignore").read_text().splitlines()  # fine-tuned checkpoints (checkpoint.dir's default)
