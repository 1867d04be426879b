"""Regenerate the Python protobuf/gRPC modules from proto/ into libs/common/danube_common/pb.

    python scripts/gen_protos.py            # write the generated modules
    python scripts/gen_protos.py --check    # exit 1 if the committed modules are stale

The generated *_pb2_grpc.py files import their siblings with bare imports; they are rewritten
to package-relative imports so the modules live inside danube_common.pb.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "libs" / "common" / "danube_common" / "pb"
_BARE_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)


def generate(out: Path) -> list[str]:
    protos = sorted(p.name for p in PROTO_DIR.glob("*.proto"))
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed; see the messages above")
    names = []
    for f in sorted(out.iterdir()):
        if f.suffix in (".py", ".pyi"):
            text = _BARE_IMPORT.sub(r"from . import \1 as \2", f.read_text())
            f.write_text(text)
            names.append(f.name)
    (out / "__init__.py").write_text('"""Generated protobuf and gRPC modules (scripts/gen_protos.py)."""\n')
    names.append("__init__.py")
    return names


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--check", action="store_true", help="fail if regeneration differs from the committed code"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        names = generate(Path(tmp))
        if args.check:
            stale = [
                n
                for n in names
                if not (OUT_DIR / n).exists() or not filecmp.cmp(Path(tmp) / n, OUT_DIR / n, shallow=False)
            ]
            extra = [p.name for p in OUT_DIR.glob("*_pb2*.py*") if p.name not in names]
            if stale or extra:
                print(f"generated protobuf code is stale: {stale + extra}; run `make proto`", file=sys.stderr)
                return 1
            print(f"protobuf code up to date ({len(names)} files)")
            return 0
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        for old in OUT_DIR.glob("*_pb2*.py*"):
            old.unlink()
        for n in names:
            shutil.copy(Path(tmp) / n, OUT_DIR / n)
        print(f"wrote {len(names)} files to {OUT_DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
