"""CRS definitions are inputs too: refuse the ones that would make PROJ read files outside the workspace.

A CRS written by a model (``target_crs``) or declared inside a dataset (a GeoPackage's
``gpkg_spatial_ref_sys``, a shapefile's ``.prj``, GeoParquet's ``geo`` metadata, GeoTIFF keys, a
GeoJSON ``crs`` member, a FlatGeobuf header) can name files for PROJ or GDAL to open: datum grids
(``+nadgrids=``, ``+geoidgrids=``, ``+grids=``, ``+xy_grids=`` ...), other PROJ inputs (``+file=``
of tinshift, ``+model=`` of defmodel, ``+init=file:id``), WKT ``PARAMETERFILE[...]`` and GDAL's
``EXTENSION["PROJ4_GRIDS", ...]``, PROJJSON ``"parameters": [{"name": ..., "value": "file"}]``
(a string value *is* a file: every other PROJJSON parameter value is a number). Under a workspace
this module finds every such reference and refuses it (``CRS_REFERENCES_FILE``) unless it resolves
inside the workspace, and it does so before GDAL or PROJ sees the definition.

Bare grid names are allowed. ``us_noaa_conus.tif``, ``@null`` or ``@ntv2_0.gsb`` (no separator, no
``~``, no ``.``/``..``) are looked up by PROJ only in its own search path: the data directory of the
installed PROJ (``PROJ_DATA``) and the user-writable directory (``~/.local/share/proj``), never the
current directory (checked with strace against PROJ 9.5). Both are chosen by whoever started the
server, like the EPSG database itself, so a bare name reads nothing the operator did not install.
Refusing them would refuse the ordinary PROJ strings that GDAL writes (``+nadgrids=@null`` in every
Web Mercator ``.prj``). With PROJ's network off (``disable_proj_network``), a bare name that is not
installed is a missing grid, never a download. Anything with a separator, ``~``, a drive letter or a
URL is a path: it must resolve inside the workspace through ``Workspace.resolve``; relative paths are
taken against the process's current directory, because that is where PROJ opens them.

Formats whose CRS cannot be read here before GDAL opens them (netCDF, HDF4/5, JPEG 2000, ERDAS IMG,
GRIB, and anything unrecognised) are refused under a workspace (``CRS_FORMAT_UNCHECKED``), by
extension and by magic bytes, so a netCDF renamed ``.tif`` is refused too. Reading the declarations
out of files is ``crsdeclared``'s job; this module judges them. ``check_declared_crs`` also has
``gdalpolicy.check_members`` check the files GDAL opens beside the input, and
``type_modifier_crs_strings`` finds the CRS definitions a SQL statement carries in its types.

What this module must never do: import GDAL (reading the declaration with GDAL is the thing it
guards), follow a reference to check it (a path is judged by its string and ``realpath``), or let a
definition through because it could not read it: an unreadable declaration is refused
(``CRS_DECLARATION_UNREADABLE``). Without a workspace every check returns at once: the server is
unconfined by choice and PROJ may read what the operator can.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mapsmith.crsdeclared import CHECKED_FORMATS, UNCHECKED_FORMATS, DeclaredCRS, read_declared_crs
from mapsmith.errors import CRSError, PathError
from mapsmith.workspace import Workspace

__all__ = [
    "CHECKED_FORMATS",
    "UNCHECKED_FORMATS",
    "DeclaredCRS",
    "check_crs_definition",
    "check_declared_crs",
    "crs_parameters",
    "disable_proj_network",
    "read_declared_crs",
    "type_modifier_crs_strings",
]

# PROJ keys whose value names files (grid lists, init files, tinshift/defmodel JSON). Matched
# case-insensitively, which is broader than PROJ: a refusal too many is the safe side here.
_FILE_KEYS = ("nadgrids", "geoidgrids", "grids", "xy_grids", "z_grids", "file", "init", "model")
# PROJ's own tokenizer (pj_shrink) drops whitespace around '=' and ',', so "+nadgrids = a , /b" is
# "+nadgrids=a,/b": undo that before matching. A value may be double-quoted with "" as the escape.
_SHRINK = re.compile(r"\s*([=,])\s*")
_PROJ_KEY_VALUE = re.compile(
    r"(?<![A-Za-z0-9_])(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>\"(?:[^\"]|\"\")*\"|[^\s\"\]\[;]+)"
)
# Where a WKT names a file: PARAMETERFILE (WKT2) and GDAL's EXTENSION (WKT1). WKT allows () for []
# and PROJ also reads curly double quotes, so both are accepted here.
_WKT_FILE_KEYWORDS = re.compile(r"(?<![A-Za-z_])(PARAMETERFILE|EXTENSION|GRIDFILE)\s*[\[(]", re.IGNORECASE)
_WKT_QUOTED = re.compile(r"[\"\u201c\u201d](?P<text>(?:[^\"\u201c\u201d]|\"\")*)[\"\u201c\u201d]")
_OGC_CRS_URL = re.compile(r"^https?://(www\.)?opengis\.net/def/crs", re.IGNORECASE)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]+:/")

# Parameters that hold a CRS although their name does not end in "crs" (operation, parameter).
_CRS_PARAMETERS_BY_OPERATION = {("resolve_crs", "description")}


# -- process settings -------------------------------------------------------------------------


def disable_proj_network() -> None:
    """Turn PROJ's network access off for this process (grids are read from disk or are missing).

    Sets ``PROJ_NETWORK=OFF`` in ``os.environ``: PROJ contexts made from now on (pyproj's, and
    GDAL's own) read it, and it wins over a ``proj.ini`` that says ``network = on``. When pyproj is
    already imported its contexts are told as well, including a setting made in code. Cheap enough
    for start-up: it never imports pyproj itself.
    """
    import sys

    os.environ["PROJ_NETWORK"] = "OFF"
    if "pyproj" in sys.modules:
        import pyproj.network

        pyproj.network.set_network_enabled(False)


def crs_parameters(operation: str, parameter_names: list[str] | tuple[str, ...]) -> list[str]:
    """The parameters of ``operation`` that hold a CRS: ``crs``, ``*_crs``, and the known others."""
    return [
        name
        for name in parameter_names
        if name == "crs" or name.endswith("_crs") or (operation, name) in _CRS_PARAMETERS_BY_OPERATION
    ]


# -- CRS definitions --------------------------------------------------------------------------


def check_crs_definition(value: Any, *, argument: str, workspace_root: Path | str | None, source: str = "") -> None:
    """Refuse a CRS definition that would make PROJ or GDAL read a file outside the workspace.

    ``value`` is anything a CRS argument may be: an EPSG code (int or text), a PROJ string, WKT1 or
    WKT2, PROJJSON as text or dict, or an object with ``to_json_dict``/``to_wkt`` (a pyproj CRS).
    ``argument`` names the tool argument (or the input slot) for the evidence; ``source`` says where
    in a file the definition was found. Returns ``None`` when the definition is allowed, and always
    when ``workspace_root`` is ``None``. Raises ``CRSError`` with code ``CRS_REFERENCES_FILE``
    (evidence: ``argument``, ``key``, ``reference``, ``reason``), or ``CRS_INVALID`` for PROJJSON
    text that is not JSON (PROJ would not read it either).
    """
    if workspace_root is None:
        return
    guard = _Guard(Workspace(root=Path(workspace_root), allow_remote=False), argument, source)
    guard.definition(value)


class _Guard:
    def __init__(self, workspace: Workspace, argument: str, source: str) -> None:
        self.workspace = workspace
        self.argument = argument
        self.source = source

    # -- dispatch on the form of the definition ------------------------------------------------

    def definition(self, value: Any) -> None:
        if value is None or isinstance(value, (bool, int, float)):
            return  # an EPSG integer names a database entry, never a file
        if isinstance(value, Mapping) or isinstance(value, list):
            self.projjson(value)
            self.parsed(value)
            return
        if not isinstance(value, str):
            to_json = getattr(value, "to_json_dict", None)
            if callable(to_json):
                self.projjson(to_json())
                return
            to_wkt = getattr(value, "to_wkt", None)
            if callable(to_wkt):
                self.definition(to_wkt())
                return
            self.definition(str(value))
            return
        text = value.strip().lstrip("\ufeff")
        if text.startswith("{"):
            try:
                decoded = json.loads(text)
            except (ValueError, RecursionError) as exc:
                raise CRSError(
                    f"{self.argument}: the CRS looks like PROJJSON but is not valid JSON: {exc}",
                    code="CRS_INVALID",
                    evidence=self._evidence(reason="invalid_json"),
                    hint="pass PROJJSON that parses as JSON, WKT, or an authority code such as EPSG:32610",
                ) from exc
            self.text(text)  # the raw text too: a parser that disagrees with json.loads must not help
            self.projjson(decoded)
            self.parsed(decoded)
            return
        self.whole_value_as_path(text)
        self.text(text)
        if "[" in text or "(" in text:
            self.parsed(text)

    def text(self, text: str) -> None:
        """PROJ key=value pairs anywhere (PROJ strings, WKT1 EXTENSION["PROJ4"], PROJ-based method
        names, ESRI PE citations), then the WKT keywords that name files."""
        shrunk = _SHRINK.sub(r"\1", text)
        for match in _PROJ_KEY_VALUE.finditer(shrunk):
            key = match.group("key").lower()
            raw = match.group("value")
            value = raw[1:-1].replace('""', '"') if raw.startswith('"') else raw
            if key in _FILE_KEYS or key.endswith(("grids", "_grid", "file")):
                if key == "init":
                    # "+init=epsg:4326" names the "epsg" file in PROJ's data directory and a code in it.
                    name = value.rsplit(":", 1)[0] if ":" in value and not _URL.match(value) else value
                    self.reference(name, key=f"+{key}")
                else:
                    self.grid_list(value, key=f"+{key}")
            elif _URL.match(value) or value.startswith(("/", "\\", "~", "./", "../")):
                self.reference(value, key=f"+{key}")  # an unknown key with a path: judged as one
        for keyword in _WKT_FILE_KEYWORDS.finditer(text):
            strings = [m.group("text").replace('""', '"') for m in _WKT_QUOTED.finditer(_bracket(text, keyword.end()))]
            name = keyword.group(1).upper()
            if name == "EXTENSION":
                if len(strings) >= 2 and strings[0].upper() == "PROJ4_GRIDS":
                    self.grid_list(strings[1], key='EXTENSION["PROJ4_GRIDS"]')
                continue  # EXTENSION["PROJ4", "..."] was scanned as key=value above
            for string in strings[1:]:
                self.grid_list(string, key=name)

    def projjson(self, node: Any, depth: int = 0) -> None:
        """Every ``parameters[].value`` that is a string is a file; every string is also scanned."""
        if depth > 64:
            raise CRSError(
                f"{self.argument}: the PROJJSON is nested more than 64 levels deep",
                code="CRS_INVALID",
                evidence=self._evidence(reason="too_deep"),
                hint="pass an ordinary PROJJSON document, WKT, or an authority code",
            )
        if isinstance(node, Mapping):
            params = node.get("parameters")
            if isinstance(params, list):
                for param in params:
                    if isinstance(param, Mapping) and isinstance(param.get("value"), str):
                        self.grid_list(param["value"], key=f"parameters[{param.get('name', '?')}].value")
            for key, child in node.items():
                if isinstance(key, str) and "=" in key:
                    self.text(key)
                self.projjson(child, depth + 1)
        elif isinstance(node, list):
            for child in node:
                self.projjson(child, depth + 1)
        elif isinstance(node, str):
            self.text(node)

    def parsed(self, value: Any) -> None:
        """Second opinion: what PROJ itself makes of a WKT/PROJJSON that passed the text checks.

        Catches spellings the text scan did not foresee (ESRI names PROJ maps to grid files,
        quoting PROJ accepts and a regex does not). Text that PROJ cannot read passes here: it is
        no CRS, and ``parse_crs`` refuses it with its own code when it is used as one.
        """
        try:
            from pyproj.exceptions import CRSError as ProjCRSError
        except ImportError:  # pragma: no cover - pyproj is a core dependency
            return
        from mapsmith.crs import from_user_input

        try:
            crs = from_user_input(dict(value) if isinstance(value, Mapping) else value)
            document = crs.to_json_dict()
        except (ProjCRSError, TypeError, ValueError):
            return
        self.projjson(document)

    # -- references ----------------------------------------------------------------------------

    def whole_value_as_path(self, text: str) -> None:
        """GDAL's SetFromUserInput opens a definition that is a file name (and fetches URLs)."""
        if _OGC_CRS_URL.match(text) or text.lower().startswith("urn:"):
            return  # OGC CRS URLs and URNs are parsed locally by PROJ and GDAL, never fetched
        if _URL.match(text):
            self.reference(text, key="(the whole definition)")
            return
        if text.startswith(("/", "\\", "~", "./", "../", "file:")) or re.match(r"^[A-Za-z]:[\\/]", text):
            self.reference(text.removeprefix("file:"), key="(the whole definition)")

    def grid_list(self, value: str, *, key: str) -> None:
        for item in value.split(","):
            item = item.strip()
            if item.startswith("@"):  # "@" marks an optional grid; the path after it is still opened
                item = item[1:].strip()
            if item:
                self.reference(item, key=key)

    def reference(self, item: str, *, key: str) -> None:
        if _is_bare_name(item):
            return  # looked up in PROJ's own search path only (module docstring)
        if item.startswith("~"):
            self._refuse(item, key, "home_directory", "PROJ expands '~' to the home directory, outside the workspace")
        if _URL.match(item) and not re.match(r"^[A-Za-z]:[\\/]", item):
            self._refuse(item, key, "url", "a URL makes PROJ or GDAL fetch the file over the network")
        # PROJ opens a relative path against the current directory, not the workspace.
        target = item if os.path.isabs(item) else os.path.join(os.getcwd(), item)
        try:
            resolved = self.workspace.resolve(target, argument=self.argument)
        except PathError as exc:
            self._refuse(item, key, exc.code, exc.message, resolved=exc.evidence.get("resolved_path"))
            return
        if not isinstance(resolved, Path):  # pragma: no cover - resolve refuses remote forms under a workspace
            self._refuse(item, key, "remote", "remote references are never read under a workspace")

    def _refuse(self, item: str, key: str, reason: str, detail: str, resolved: str | None = None) -> None:
        evidence = self._evidence(key=key, reference=item, reason=reason)
        if resolved is not None:
            evidence["resolved_path"] = resolved
        where = f" ({self.source})" if self.source else ""
        raise CRSError(
            f"{self.argument}: the CRS definition{where} makes PROJ read {item!r} through {key}, "
            f"outside the workspace: {detail}",
            code="CRS_REFERENCES_FILE",
            evidence=evidence,
            hint="use an authority code (EPSG:32610) or a definition without file references; a datum grid "
            "must be installed in PROJ's data directory by the operator and named without a path "
            "(+nadgrids=us_noaa_conus.tif), or copied into the workspace",
        )

    def _evidence(self, **fields: Any) -> dict[str, Any]:
        evidence: dict[str, Any] = {"argument": self.argument}
        if self.source:
            evidence["source"] = self.source
        evidence.update(fields)
        return evidence


def _is_bare_name(item: str) -> bool:
    return not (
        "/" in item
        or "\\" in item
        or ":" in item
        or item.startswith("~")
        or item in (".", "..")
        or any(ord(c) < 32 for c in item)
    )


def _bracket(text: str, start: int) -> str:
    """The text from ``start`` to the bracket that closes the one just before it (quotes respected)."""
    depth, i, quote_open = 1, start, False
    while i < len(text) and depth:
        c = text[i]
        if c in '"\u201c\u201d':
            quote_open = not quote_open
        elif not quote_open and c in "[(":
            depth += 1
        elif not quote_open and c in "])":
            depth -= 1
        i += 1
    return text[start:i]


# -- CRS declared inside input files ----------------------------------------------------------


def check_declared_crs(path: Path | str, *, argument: str, workspace_root: Path | str | None) -> None:
    """Under a workspace, refuse an input whose declared CRS references files outside it, or whose
    format's CRS cannot be read here first. Call it after the path was resolved and found to exist,
    and before any GDAL call on it. Does nothing without a workspace.

    It also checks, with ``gdalpolicy.check_members``, every file GDAL may open beside ``path``
    (sidecars, shapefile members, overviews, SQLite journals) by the workspace's path policy, since
    every caller of this function is a place where GDAL is about to open an input.

    Raises ``CRSError`` (``CRS_REFERENCES_FILE``), ``InputError`` (``CRS_FORMAT_UNCHECKED``,
    ``CRS_DECLARATION_UNREADABLE``, ``SIDECAR_FORMAT_UNEXPECTED``) or ``PathError``
    (``SIDECAR_OUTSIDE_WORKSPACE``, ``PATH_HARD_LINK``).
    """
    if workspace_root is None:
        return
    from mapsmith import gdalpolicy

    workspace = Workspace(root=Path(workspace_root), allow_remote=False)
    gdalpolicy.check_members(Path(path), workspace, argument=argument)
    for declared in read_declared_crs(path, argument=argument):
        guard = _Guard(workspace, argument, declared.source)
        if declared.mode == "link":
            guard._refuse(
                str(declared.definition), declared.source, "linked_crs", "GDAL opens or downloads a linked CRS"
            )
        elif declared.mode == "text":
            guard.text(str(declared.definition))
        else:
            guard.definition(declared.definition)


# -- CRS definitions inside SQL types ---------------------------------------------------------


def type_modifier_crs_strings(tree: Any) -> list[tuple[str, str]]:
    """Every string a SQL type modifier carries in a DuckDB parse tree (``json_serialize_sql``).

    ``x::GEOMETRY('+proj=... +nadgrids=/path')`` puts a CRS definition in the cast type's
    ``user_type_modifiers``, where an expression walker that skips literal values never looks. Returns
    ``(type name, modifier text)`` for each one, at any depth (casts in subqueries, CTEs, nested
    STRUCT and LIST types), so the caller can judge each with ``check_crs_definition``. The tree is
    plain JSON data: DuckDB is never imported here. Nesting deeper than 256 levels raises
    ``CRSError`` (``CRS_INVALID``) rather than being skipped.
    """
    found: list[tuple[str, str]] = []
    stack: list[tuple[Any, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > 256:
            raise CRSError(
                "sql: the statement is nested more than 256 levels deep; its type modifiers cannot all be checked",
                code="CRS_INVALID",
                evidence={"argument": "sql", "reason": "too_deep"},
                hint="write a flatter statement",
            )
        if isinstance(node, Mapping):
            modifiers = node.get("user_type_modifiers")
            if isinstance(modifiers, list):
                name = str(node.get("name") or node.get("type") or "?")
                for modifier in modifiers:
                    value = modifier.get("value") if isinstance(modifier, Mapping) else modifier
                    if isinstance(value, str):
                        found.append((name, value))
            stack.extend((child, depth + 1) for child in node.values() if isinstance(child, (Mapping, list)))
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node if isinstance(child, (Mapping, list)))
    return found
