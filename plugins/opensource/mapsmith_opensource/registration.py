"""How an operation module of this stack declares what it implements (read by ``__init__``)."""

from __future__ import annotations

from typing import NamedTuple


class Registration(NamedTuple):
    operation: str  # the contract's name
    function: str  # the module-level function that implements it
    engine: str = "geopandas"  # the engine named in manifests and in the engine choice
    preference: int = 0  # higher runs first when several engines are eligible
    eligible: str | None = None  # a module-level function(ctx) -> reason it cannot take the run, or None
    validate: str | None = None  # a module-level function(ctx) raising on arguments that cannot work together
    requirement: str | None = None  # a name in mapsmith_opensource.extras: the optional extra this engine needs
    writes_parts: bool = False  # writes a folder of Parquet parts when output_path ends in ".parquet/"
