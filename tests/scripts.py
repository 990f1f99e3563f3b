"""Load a standalone script (examples/, bench/) as a module, without running its `main()`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def load_script(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"script_{path.parent.name}_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    path_before = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:  # a bench script puts bench/ on sys.path for its neighbours; left there, transformers'
        sys.path[:] = path_before  # probe for the `kernels` package would import bench/kernels.py
    return module
