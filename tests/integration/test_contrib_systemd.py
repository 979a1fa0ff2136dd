"""``contrib/systemd/learnerd.service``: systemd accepts it together with the ``docs_dirs`` drop-in its
comments show (``systemd-analyze verify``, where systemd is installed); it lets the daemon see NVIDIA GPUs
(no ``PrivateDevices=``, whose private /dev has none); it names every token variable the daemon reads; it
leaves ``ReadWritePaths=`` at the state directory; and its ``Documentation=`` is a file the package installs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path, PurePosixPath

import pytest

from learnerd.daemon.config import STORE_URL_ENV
from learnerd.ml.settings import EmbeddingsConfig
from tests.conftest import REPO_ROOT

UNIT = REPO_ROOT / "contrib" / "systemd" / "learnerd.service"


def directives(text: str) -> dict[str, list[str]]:
    """Every ``Key=value`` line of a unit (comments and section headers skipped): key → values, in order."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def documented_drop_in(text: str) -> str:
    """The drop-in the unit's comments show: the commented lines from ``[Service]`` to the first blank one."""
    lines = [line.removeprefix("#").strip() for line in text.splitlines()]
    start = lines.index("[Service]")  # the first: the comment comes before the unit's own section
    block = lines[start : lines.index("", start)]
    return "\n".join(block) + "\n"


def test_systemd_accepts_the_unit_and_its_docs_dirs_drop_in(tmp_path: Path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    text = UNIT.read_text()
    drop_in = documented_drop_in(text)
    assert drop_in.startswith("[Service]\nReadWritePaths=/")
    # verify checks that ExecStart= is executable: point it at this interpreter instead of /opt/learnerd
    (tmp_path / "learnerd.service").write_text(text.replace("/opt/learnerd/bin/learnerd", sys.executable))
    (tmp_path / "learnerd.service.d").mkdir()
    (tmp_path / "learnerd.service.d" / "docs-dirs.conf").write_text(drop_in)
    proc = subprocess.run(
        [analyze, "verify", str(tmp_path / "learnerd.service")], capture_output=True, text=True, timeout=60
    )
    # an unknown key or a bad value is only a warning, naming the file: none may name ours
    ours = [line for line in proc.stderr.splitlines() if "learnerd.service" in line or "docs-dirs.conf" in line]
    assert proc.returncode == 0 and not ours, proc.stderr


def test_gpus_are_visible():
    keys = directives(UNIT.read_text())
    assert "PrivateDevices" not in keys, "a private /dev hides /dev/nvidia*: device = auto would train on the CPU"
    assert keys["DevicePolicy"] == ["closed"] and "char-nvidia* rw" in keys["DeviceAllow"]


def test_every_secret_the_daemon_reads_from_the_environment_is_named():
    sources = "\n".join(p.read_text() for p in (REPO_ROOT / "learnerd").rglob("*.py"))
    tokens = set(re.findall(r"\"(LEARNERD_[A-Z_]*TOKEN)\"", sources))
    assert {"LEARNERD_PROBE_TOKEN", "LEARNERD_OPENAI_TOKEN", "LEARNERD_SEARCH_TOKEN"} <= tokens
    text = UNIT.read_text()
    for name in sorted(tokens | {STORE_URL_ENV, EmbeddingsConfig().api_key_env}):
        assert re.search(rf"^#\s+{name}\s", text, re.MULTILINE), f"{name} is not named in {UNIT.name}"
    assert directives(text)["EnvironmentFile"] == ["-/etc/learnerd/environment"]


def test_docs_dirs_come_from_a_drop_in():
    assert directives(UNIT.read_text())["ReadWritePaths"] == ["/var/lib/learnerd"]


def test_the_documentation_is_a_file_the_package_installs():
    keys = directives(UNIT.read_text())
    (documentation,) = keys["Documentation"]
    assert documentation.startswith("file:///"), documentation
    prefix = PurePosixPath(keys["ExecStart"][0].split()[0]).parent.parent  # /opt/learnerd/bin/learnerd
    installed = PurePosixPath(documentation.removeprefix("file://")).relative_to(prefix)
    data_files = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    sources = data_files[str(installed.parent)]
    assert any(Path(s).name == installed.name and (REPO_ROOT / s).is_file() for s in sources), data_files
