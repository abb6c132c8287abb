"""This checkout imported as `raypex`: a script beside a clone of the repository (a folder named
raypex/ by `git clone`) finds the clone's root before the installed package, Python importing the
nearest folder of the name. The root then stands in for what it holds: the package in raypex/,
loaded in this module's place, so `import raypex` beside a clone gets the clone's raypex (the one
`pip install -e` installs) instead of an empty namespace."""

import importlib.util
import sys
from pathlib import Path

_package = Path(__file__).resolve().parent / "raypex"
_spec = importlib.util.spec_from_file_location(__name__, _package / "__init__.py",
                                               submodule_search_locations=[str(_package)])
_module = importlib.util.module_from_spec(_spec)
sys.modules[__name__] = _module  # the import statement returns what sys.modules holds once this runs
_spec.loader.exec_module(_module)
