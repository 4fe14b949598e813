"""A NeMo Gym release's venv: its interpreter found, the venv built from the release's pinned
requirements (and this checkout's package, editable), reused while its stamp matches."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from gym_harness.paths import REPO, WORK
from gym_harness.processes import E2EFailure, log, tail
from gym_harness.releases import Release


def _version_of(python: str) -> str | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_python(version: str) -> str:
    """`$E2E_PYTHON_<major><minor>`, else pyenv's newest `version.*`, else `python<version>` on PATH."""
    variable = f"E2E_PYTHON_{version.replace('.', '')}"
    candidates: list[str] = []
    if os.environ.get(variable):
        candidates.append(os.environ[variable])
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        found = glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}"))
        # Newest patch release first.
        found.sort(key=lambda p: [int(x) if x.isdigit() else 0 for x in Path(p).parents[1].name.split(".")], reverse=True)
        candidates.extend(found)
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(on_path)
    for candidate in candidates:
        if _version_of(candidate) == version:
            return candidate
    raise E2EFailure(
        f"Python {version} is needed for a NeMo Gym venv and was not found. Looked for "
        f'"$(pyenv root)"/versions/{version}.*/bin/python{version} and a working `python{version}` on PATH '
        f"(tried: {candidates or 'nothing found'}). Install it (e.g. `pyenv install {version}`) "
        f"or point {variable} at a Python {version} interpreter."
    )


def _stamp(release: Release, python: str, with_package: bool) -> str:
    digest = hashlib.sha256()
    digest.update(release.requirements.read_bytes())
    digest.update(" ".join(release.pip_options).encode())
    digest.update(subprocess.run([python, "-VV"], capture_output=True, text=True).stdout.encode())
    digest.update(str(REPO).encode())
    if with_package:
        digest.update((REPO / "pyproject.toml").read_bytes())
        digest.update(release.package_extras.encode())
    digest.update(b"with-package" if with_package else b"without-package")
    return digest.hexdigest()


def stamped_venv(venv: Path, python: str, stamp: str, pip_arguments: list[str], install_log: Path, what: str) -> Path:
    """``venv``'s interpreter: reused while its ``.e2e-stamp`` holds ``stamp``, else built afresh with
    ``python`` and ``pip install pip_arguments`` then ``pip check`` (pip's output in ``install_log``)."""
    stamp_file, venv_python = venv / ".e2e-stamp", venv / "bin" / "python"
    if venv_python.exists() and stamp_file.exists() and stamp_file.read_text().strip() == stamp:
        log(f"reusing {venv.name} (stamp matches)")
        return venv_python
    log(f"building {venv.name} for {what} with {python}")
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    install_log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with install_log.open("w") as out:
        command = [str(venv_python), "-m", "pip", "install", "--disable-pip-version-check", *pip_arguments]
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=1200)
        if result.returncode == 0:
            # A conflict pip let through would break the run in a less readable place.
            result = subprocess.run([str(venv_python), "-m", "pip", "check"], stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise E2EFailure(f"pip install failed (exit {result.returncode}); log: {install_log}\n{tail(install_log)}")
    stamp_file.write_text(stamp + "\n")
    log(f"installed in {time.monotonic() - started:.0f}s")
    return venv_python


def ensure_venv(release: Release, with_package: bool) -> Path:
    """Build the release's venv, or reuse it when its stamp matches the requirements."""
    if with_package and not (REPO / "pyproject.toml").exists():
        raise E2EFailure(
            f"{REPO / 'pyproject.toml'} does not exist, so the package cannot be installed. "
            "Run with --without-package to exercise the pipeline with HTTP instrumentation only."
        )
    python = find_python(release.python)
    pip_arguments = [*release.pip_options, "-r", str(release.requirements)]
    if with_package:
        pip_arguments += ["-e", f"{REPO}[{release.package_extras}]" if release.package_extras else str(REPO)]
    return stamped_venv(
        release.venv,
        python,
        _stamp(release, python, with_package),
        pip_arguments,
        WORK / f"pip-install-{release.name}.log",
        f"nemo-gym {release.version}",
    )


def site_packages(venv_python: Path) -> Path:
    out = subprocess.run(
        [str(venv_python), "-c", "import nemo_gym, pathlib; print(pathlib.Path(nemo_gym.__file__).parents[1])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())
