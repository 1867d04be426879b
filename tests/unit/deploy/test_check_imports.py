"""The import contract checker, on a synthetic source tree."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "check_imports.py"


@pytest.fixture(scope="module")
def ci() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_imports", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["check_imports"] = mod  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(mod)
    return mod


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_clean_tree(ci: ModuleType, tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "services/broker/danube_broker/__init__.py": "",
            "services/broker/danube_broker/app.py": (
                "import grpc\nfrom danube_common.keys import Keys\nfrom . import topic\nfrom .wal import seg\n"
            ),
            "services/lookup/danube_lookup/app.py": "import danube_common.errors\nimport danube_lookup.config\n",
            "libs/client/danube_sdk/client.py": "from danube_common.pb import DanubeApi_pb2\n",
            "libs/common/danube_common/x.py": "import json\n",
            "deploy/danube_local/demo.py": "import importlib\nimportlib.import_module('danube_sdk')\n",
            "services/broker/README.md": "import danube_lookup  (not Python)\n",
        },
    )
    violations, n = ci.check_tree(root)
    assert violations == [] and n == 6


def test_every_rule(ci: ModuleType, tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "services/broker/danube_broker/a.py": "import os\n\nfrom danube_lookup.catalog import Catalog\n",
            "services/broker/danube_broker/sub/b.py": "import danube_load_manager\n",
            "services/leader/danube_leader/c.py": "def f():\n    import danube_wal_uploader.up as u\n",
            "libs/common/danube_common/d.py": "from danube_sdk import client\n",
            "libs/client/danube_sdk/e.py": "import danube_broker\n",
            "libs/common/danube_common/f.py": "import importlib\nimportlib.import_module('danube_lookup.app')\n",
            "deploy/danube_local/g.py": "__import__('danube_broker')\n",
            "spark/danube_planner/h.py": "import danube_common\n",
        },
    )
    violations, _ = ci.check_tree(root)
    got = [(v.path, v.line) for v in violations]
    assert got == [
        ("deploy/danube_local/g.py", 1),
        ("libs/client/danube_sdk/e.py", 1),
        ("libs/common/danube_common/d.py", 1),
        ("libs/common/danube_common/f.py", 2),
        ("services/broker/danube_broker/a.py", 3),
        ("services/broker/danube_broker/sub/b.py", 1),
        ("services/leader/danube_leader/c.py", 2),
    ]
    by_path = {v.path: v.message for v in violations}
    assert "danube_broker imports service danube_lookup" in by_path["services/broker/danube_broker/a.py"]
    assert "danube_common imports danube_sdk" in by_path["libs/common/danube_common/d.py"]
    assert "libraries never depend on services" in by_path["libs/client/danube_sdk/e.py"]
    assert str(violations[0]).startswith("deploy/danube_local/g.py:1: ")


def test_unparsable_file_is_a_violation(ci: ModuleType, tmp_path: Path) -> None:
    root = tree(tmp_path, {"services/broker/danube_broker/bad.py": "def f(:\n"})
    violations, _ = ci.check_tree(root)
    assert len(violations) == 1 and "cannot parse" in violations[0].message


def test_main_exit_codes(ci: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tree(tmp_path / "good", {"services/lookup/danube_lookup/a.py": "import danube_common\n"})
    assert ci.main(["--root", str(good)]) == 0
    assert "import contract OK (1 files checked)" in capsys.readouterr().out
    bad = tree(tmp_path / "bad", {"services/lookup/danube_lookup/a.py": "import danube_broker.app\n"})
    assert ci.main(["--root", str(bad)]) == 1
    out = capsys.readouterr()
    assert (
        "services/lookup/danube_lookup/a.py:1: service danube_lookup imports service danube_broker" in out.out
    )
    assert "1 violation(s)" in out.err
