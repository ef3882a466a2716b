"""The package ships its types and its license: a wheel built from this checkout holds
`jobgate/py.typed` (PEP 561: type checkers read the SDK's annotations) and the LICENSE."""

from __future__ import annotations

import zipfile
from pathlib import Path

from hatchling.builders.wheel import WheelBuilder

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_ships_py_typed_and_the_license(tmp_path: Path) -> None:
    (wheel,) = WheelBuilder(str(ROOT)).build(directory=str(tmp_path), versions=["standard"])
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "jobgate/py.typed" in names
    assert "jobgate/client/__init__.py" in names
    licenses = {name for name in names if name.endswith(".dist-info/licenses/LICENSE")}
    assert len(licenses) == 1, sorted(n for n in names if "dist-info" in n)
    license_text = zipfile.ZipFile(wheel).read(licenses.pop()).decode()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text


def test_the_checkout_marks_the_package_typed() -> None:
    assert (ROOT / "src/jobgate/py.typed").is_file()
    assert "Apache License" in (ROOT / "LICENSE").read_text()
