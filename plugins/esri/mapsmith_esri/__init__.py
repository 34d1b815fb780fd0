"""The esri stack: ArcPy, run by ArcGIS Pro's own Python in a separate process.

For now it only registers the stack and detects, for real, where Pro's Python is. Operations come
later, as subprocess calls with JSON request and result files.

It must never import ``arcpy`` (it exists only inside Pro's Python, and importing it checks out a
licence), and detection must not check out a licence either: it reads paths and the registry only.
Detection must never raise; whatever is missing is reported as the reason.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from mapsmith.hookspecs import hookimpl
from mapsmith.registry import Availability, RegisterStack, StackSpec

STACK = "esri"
ENV_VAR = "MAPSMITH_ARCGIS_PYTHON"
REGISTRY_KEY = r"SOFTWARE\ESRI\ArcGISPro"  # under HKEY_LOCAL_MACHINE, written by Pro's installer
PRO_PYTHON = Path("bin", "Python", "envs", "arcgispro-py3", "python.exe")  # relative to InstallDir
NOT_WINDOWS_REASON = f"ArcGIS Pro not found: it runs on Windows only, and {ENV_VAR} is not set"
FIX = f"run MapSmith on a Windows machine with ArcGIS Pro 3.x, or set {ENV_VAR} to Pro's propy.bat/python.exe"
NOT_READ = "not read (unknown)"


def on_windows() -> bool:
    return sys.platform == "win32"


def read_pro_registry() -> tuple[dict[str, str], str | None]:
    """The values of HKLM\\SOFTWARE\\ESRI\\ArcGISPro we use, or ``({}, why not)``. Windows only."""
    if not on_windows():
        return {}, "not Windows"
    import winreg  # only exists on Windows

    values: dict[str, str] = {}
    try:
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, REGISTRY_KEY) as key:
            for name in ("InstallDir", "Version", "RealVersion"):
                try:
                    values[name] = str(winreg.QueryValueEx(key, name)[0])
                except FileNotFoundError:
                    continue
    except FileNotFoundError:
        return {}, f"registry key HKLM\\{REGISTRY_KEY} does not exist"
    except OSError as exc:
        return {}, f"registry key HKLM\\{REGISTRY_KEY} could not be read: {exc}"
    return values, None


def licence_level() -> str | None:
    """The licence level (Basic/Standard/Advanced) of this machine, when it can be read without ArcPy.

    Returns None for now: Esri documents no settings file or registry value that holds it for every
    licence type (named user, single use, concurrent use), and the documented way, ArcPy's
    ``ProductInfo()``, needs ``import arcpy``, which checks out a licence. A guessed location
    would be worse than saying we do not know, so callers report "not read (unknown)".
    """
    return None


def _details(python: str, source: str, registry: Mapping[str, str]) -> dict[str, str]:
    details = {"python": python, "found_by": source}
    details["pro_version"] = registry.get("Version", NOT_READ)
    if "RealVersion" in registry:
        details["pro_build"] = registry["RealVersion"]
    details["licence_level"] = licence_level() or NOT_READ
    return details


def availability() -> Availability:
    try:
        return _availability()
    except Exception as exc:  # detection must report, never raise
        return Availability(False, reason=f"detection failed: {type(exc).__name__}: {exc}", fix=FIX)


def _availability() -> Availability:
    configured = os.environ.get(ENV_VAR, "").strip()
    registry, registry_problem = read_pro_registry()
    if configured:
        if not os.path.isfile(configured):
            what = "is not a file" if os.path.exists(configured) else "does not exist"
            return Availability(
                False,
                reason=f"{ENV_VAR}={configured} {what}",
                fix=f"set {ENV_VAR} to the full path of Pro's propy.bat or python.exe, or unset it",
            )
        return Availability(True, details=_details(os.path.abspath(configured), ENV_VAR, registry))
    if not on_windows():
        return Availability(False, reason=NOT_WINDOWS_REASON, fix=FIX)
    if registry_problem is not None or "InstallDir" not in registry:
        return Availability(
            False,
            reason=f"ArcGIS Pro not found: {registry_problem or 'its registry key has no InstallDir value'}, "
            f"and {ENV_VAR} is not set",
            fix=FIX,
        )
    python = Path(registry["InstallDir"]) / PRO_PYTHON
    if not python.is_file():
        return Availability(
            False,
            reason=f"ArcGIS Pro is registered at {registry['InstallDir']}, but {python} does not exist",
            fix=f"repair the ArcGIS Pro installation, or set {ENV_VAR} to Pro's propy.bat/python.exe",
        )
    return Availability(True, details=_details(str(python), f"registry HKLM\\{REGISTRY_KEY}", registry))


def engine_versions() -> Mapping[str, str]:
    try:
        registry, _ = read_pro_registry()
    except Exception:
        return {}
    return {"ArcGIS Pro": registry["Version"]} if "Version" in registry else {}


@hookimpl
def mapsmith_register_stacks(register: RegisterStack) -> None:
    register(
        StackSpec(
            name=STACK,
            summary="ArcPy through ArcGIS Pro's own Python, in a separate process (Windows, Pro 3.x)",
            availability=availability,
            engine_versions=engine_versions,
            licence="proprietary (Esri ArcGIS Pro licence; ArcPy runs in Pro's own Python, never imported here)",
        )
    )
