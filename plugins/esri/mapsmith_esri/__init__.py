"""The esri stack: ArcPy, run by ArcGIS Pro's own Python in a separate process.

It detects where Pro's Python is, Pro's version and the licence recorded in Pro's configuration,
and registers MapSmith operations that ``mapping.py`` maps to ArcPy tools; ``run.py`` runs them
through ``worker.py`` in Pro's Python, with JSON request and result files.

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
from mapsmith.registry import Availability, RegisterOperation, RegisterStack, StackSpec

STACK = "esri"
ENV_VAR = "MAPSMITH_ARCGIS_PYTHON"
REGISTRY_KEY = r"SOFTWARE\ESRI\ArcGISPro"  # under HKEY_LOCAL_MACHINE, written by Pro's installer
PRO_PYTHON = Path("bin", "Python", "envs", "arcgispro-py3", "python.exe")  # relative to InstallDir
NOT_WINDOWS_REASON = f"ArcGIS Pro not found: it runs on Windows only, and {ENV_VAR} is not set"
FIX = f"run MapSmith on a Windows machine with ArcGIS Pro 3.x, or set {ENV_VAR} to Pro's propy.bat/python.exe"
NOT_READ = "not read (unknown)"


def on_windows() -> bool:
    return sys.platform == "win32"


def read_registry_values(hive: str, subkey: str, names: tuple[str, ...]) -> tuple[dict[str, str], str | None]:
    """The named string values of ``<hive>\\<subkey>`` (hive ``HKLM`` or ``HKCU``), or ``({}, why not)``.

    The one place that touches the Windows registry; tests replace it with fake registry data.
    """
    if not on_windows():
        return {}, "not Windows"
    import winreg  # only exists on Windows

    root = {"HKLM": winreg.HKEY_LOCAL_MACHINE, "HKCU": winreg.HKEY_CURRENT_USER}[hive]
    values: dict[str, str] = {}
    try:
        with winreg.OpenKey(root, subkey) as key:
            for name in names:
                try:
                    values[name] = str(winreg.QueryValueEx(key, name)[0])
                except FileNotFoundError:
                    continue
    except FileNotFoundError:
        return {}, f"registry key {hive}\\{subkey} does not exist"
    except OSError as exc:
        return {}, f"registry key {hive}\\{subkey} could not be read: {exc}"
    return values, None


def read_pro_registry() -> tuple[dict[str, str], str | None]:
    """The values of HKLM\\SOFTWARE\\ESRI\\ArcGISPro we use, or ``({}, why not)``. Windows only."""
    return read_registry_values("HKLM", REGISTRY_KEY, ("InstallDir", "Version", "RealVersion"))


# -- the licence, read as metadata -----------------------------------------------------------------
#
# Sources, and how far they go (nothing here has been checked on a machine with ArcGIS Pro):
# - Esri's "ArcGIS Pro installation administration" page (pro.arcgis.com, get-started) lists the
#   silent-install parameters AUTHORIZATION_TYPE (NAMED_USER, SINGLE_USE, CONCURRENT_USE),
#   SOFTWARE_CLASS (Viewer, Editor, Professional: the Basic, Standard, Advanced levels),
#   LICENSE_SERVER and LOCK_AUTH_SETTINGS, whose settings the installer leaves in the registry under
#   ...\SOFTWARE\ESRI\ArcGISPro\Licensing (HKLM machine-wide, HKCU per user). This session's offline
#   documentation search found Esri pages saying licensing settings can be changed in the registry
#   (community.esri.com education blog "Installing ArcGIS Pro in a Lab Environment and Updating
#   Licensing Settings", Pro 3.3) but not the value names themselves: they are read by those
#   parameter names, and a value that is absent is reported as not recorded, never guessed.
# - Esri's "ArcGIS Pro license types": with a Named User licence the level and the extensions are
#   assigned in the ArcGIS Online / Enterprise portal and arrive at sign-in; nothing on the machine
#   records them, so the level is reported as decided by the portal.
# No documented local record lists the extensions for any licence type, so they are always reported
# as not recorded; the worker asks ArcPy (CheckExtension) when a tool needs one.
LICENSING_KEY = r"SOFTWARE\ESRI\ArcGISPro\Licensing"
LICENSING_VALUES = ("AUTHORIZATION_TYPE", "SOFTWARE_CLASS", "LICENSE_SERVER", "LOCK_AUTH_SETTINGS")
LEVEL_OF_SOFTWARE_CLASS = {"viewer": "Basic", "editor": "Standard", "professional": "Advanced"}
LEVELS = ("Basic", "Standard", "Advanced")
NAMED_USER_LEVEL = "not recorded locally (named user: decided by the portal at sign-in)"
NOT_RECORDED = "not recorded locally"
EXTENSIONS_NOT_RECORDED = "not recorded locally (ArcPy's CheckExtension is asked when a tool needs one)"


def licensing() -> dict[str, str]:
    """The licence settings Pro's configuration records, as metadata: no licence is checked out.

    Keys: authorization_type, licence_level (Basic/Standard/Advanced or why it is not known),
    extensions, licence_server (concurrent use only), licence_source (the registry key read).
    """
    found: dict[str, str] = {}
    source = None
    for hive in ("HKLM", "HKCU"):  # the machine-wide settings win (they are the locked ones)
        values, _ = read_registry_values(hive, LICENSING_KEY, LICENSING_VALUES)
        if values.get("AUTHORIZATION_TYPE"):
            found, source = values, f"registry {hive}\\{LICENSING_KEY}"
            break
    if source is None:
        return {
            "authorization_type": NOT_READ,
            "licence_level": NOT_READ,
            "extensions": EXTENSIONS_NOT_RECORDED,
            "licence_source": f"no AUTHORIZATION_TYPE under HKLM or HKCU\\{LICENSING_KEY}",
        }
    kind = found["AUTHORIZATION_TYPE"].strip().upper()
    out = {"authorization_type": kind, "extensions": EXTENSIONS_NOT_RECORDED, "licence_source": source}
    if kind == "NAMED_USER":
        out["licence_level"] = NAMED_USER_LEVEL
    else:
        software_class = found.get("SOFTWARE_CLASS", "").strip()
        out["licence_level"] = LEVEL_OF_SOFTWARE_CLASS.get(software_class.lower(), NOT_RECORDED)
        if software_class and software_class.lower() not in LEVEL_OF_SOFTWARE_CLASS:
            out["licence_level"] = f"{NOT_RECORDED} (unknown SOFTWARE_CLASS {software_class!r})"
    if kind == "CONCURRENT_USE" and found.get("LICENSE_SERVER"):
        out["licence_server"] = found["LICENSE_SERVER"]
    return out


def licence_level() -> str | None:
    """Basic, Standard or Advanced when Pro's configuration records it; None when it does not."""
    try:
        level = licensing()["licence_level"]
    except Exception:
        return None
    return level if level in LEVELS else None


def _details(python: str, source: str, registry: Mapping[str, str]) -> dict[str, str]:
    details = {"python": python, "found_by": source}
    details["pro_version"] = registry.get("Version", NOT_READ)
    if "RealVersion" in registry:
        details["pro_build"] = registry["RealVersion"]
    details.update(licensing())
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


def pro_python() -> tuple[str | None, dict[str, str], str | None]:
    """``(python, details, None)`` for the Pro Python to run the worker with, or ``(None, {}, why not)``."""
    avail = availability()
    if not avail.available:
        return None, {}, avail.reason
    return avail.details["python"], dict(avail.details), None


@hookimpl
def mapsmith_register_operations(register: RegisterOperation) -> None:
    """Register the MapSmith operations ``mapping.MAPPINGS`` maps to ArcPy tools, always.

    They add no contract. Without Pro the router answers ``stack_unavailable`` for them and
    ``missing`` for everything else; with Pro, each one's ``requirement`` answers ``licence_tier``
    or ``online_only`` from the table before any process starts.
    """
    from mapsmith_esri.mapping import ENGINE, MAPPINGS, implementation, requirement, usable_input

    for mapped in MAPPINGS:
        register(
            implementation(mapped),
            operation=mapped.operation,
            stack=STACK,
            engine=ENGINE,
            eligible=usable_input,
            requirement=requirement(mapped),
            validate=mapped.validate,
        )
