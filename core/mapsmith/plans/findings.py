"""What plan validation reports: one ``Finding`` per problem, and the table of every code it uses.

A finding is a refusal an agent can act on without re-running anything: a stable ``code`` to branch
on, the ``step`` and ``argument`` it is about, a ``message``, a ``hint`` saying what to do instead
and the ``evidence`` that shows it. Codes shared with ``run_operation`` keep the runner's name, so
an operation refused in a plan is refused with the code it would get alone. ``FINDING_CODES`` is the
one list of codes validation can produce (``docs/errors.md`` is generated from it); a code used in
``validate.py`` and missing here is a bug, and a test checks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mapsmith.errors import MapSmithError


@dataclass
class Finding:
    """One problem of a plan, tied to the step and argument it is about (None for the whole plan)."""

    code: str
    message: str
    hint: str
    step: str | None = None
    argument: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_error(cls, error: MapSmithError, step: str | None, argument: str | None = None) -> Finding:
        """The finding for an error the runner's own checks raised: same code, message and hint."""
        arg = argument if argument is not None else error.evidence.get("argument")
        return cls(
            code=error.code,
            message=error.message,
            hint=error.hint or "",
            step=step,
            argument=arg if isinstance(arg, str) else None,
            evidence=dict(error.evidence),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "step": self.step,
            "argument": self.argument,
            "message": self.message,
            "hint": self.hint,
            "evidence": self.evidence,
        }


FINDING_CODES: dict[str, str] = {
    # -- the plan as a whole
    "PLAN_INVALID": "The plan does not match contracts/schemas/plan.schema.json (missing goal, a step without id ...).",
    "EMPTY_PLAN": "The plan has no steps.",
    "DUPLICATE_STEP_ID": "Two steps share an id, so a reference to it would be ambiguous.",
    # -- operations and arguments (the codes of OperationContract.check_arguments)
    "UNKNOWN_OPERATION": "No operation of that name is in the catalog; evidence lists the closest names.",
    "OPERATION_PLANNED": "The operation is in the catalog but not yet available.",
    "OPERATION_MISSING": "The selected stack has no implementation of the operation.",
    "LICENCE_TIER": "The stack has the operation but the licence on this machine does not include it.",
    "ONLINE_ONLY": "The operation needs an online service this server does not use.",
    "STACK_UNAVAILABLE": "The selected stack is not installed here.",
    "UNKNOWN_ARGUMENT": "The operation takes no argument of that name; the accepted names are listed, closest first.",
    "MISSING_ARGUMENT": "A required argument is not given.",
    "WRONG_ARGUMENT_TYPE": "An argument has the wrong JSON type (a string where a number is expected ...).",
    "ARGUMENT_OUT_OF_RANGE": "A number is outside the bounds the contract declares.",
    "ARGUMENT_NOT_IN_CHOICES": "A value is not one of the parameter's declared choices.",
    # -- references between steps
    "FORWARD_REFERENCE": "An argument refers to a step that runs later; the message names the step to move.",
    "DANGLING_REFERENCE": "An argument refers to a step id that is not in the plan.",
    "SELF_REFERENCE": "A step refers to its own output.",
    "REFERENCE_TO_ANSWER": "An argument refers to a step that returns an answer and writes no dataset.",
    "REFERENCE_LAYER_CONFLICT": "A reference to a step that adds a layer to a GeoPackage sits in an argument that "
    "cannot name that layer, or whose <role>_layer names another one.",
    "REFERENCE_NOT_A_DATASET": 'A "$id" reference is given to an argument that is not a dataset path.',
    # -- paths (the workspace's and the runner's codes)
    "INPUT_NOT_FOUND": "An input file does not exist and no earlier step writes it.",
    "INPUT_IS_DIRECTORY": "An input path is a directory, not a dataset.",
    "INPUT_UNREADABLE": "An input file exists but its header cannot be read as a dataset.",
    "CRS_REFERENCES_FILE": "A CRS argument, or an input's declared CRS, makes PROJ read a file outside the workspace.",
    "CRS_FORMAT_UNCHECKED": "Under a workspace, an input is in a format whose CRS MapSmith cannot read before GDAL.",
    "CRS_DECLARATION_UNREADABLE": "Under a workspace, the CRS an input declares cannot be read from its bytes.",
    "LAYER_REQUIRED": "An input container holds several layers and none was named.",
    "LAYER_NOT_FOUND": "The named layer is not in the input container.",
    "REMOTE_INPUT_UNSUPPORTED": "A remote input (URL, /vsi*) is not read by operations.",
    "PATH_OUTSIDE_WORKSPACE": "A path resolves outside the workspace.",
    "PATH_REMOTE_UNDER_WORKSPACE": "A remote path is given while a workspace is set.",
    "PATH_URL": "A path is a URL, which this server does not read.",
    "PATH_VIRTUAL_FS": "A path is a GDAL /vsi* virtual file system path.",
    "PATH_UNC": "A path is a UNC or device path naming another host.",
    "PATH_DRIVE_LETTER": "A path starts with a Windows drive letter on a POSIX server.",
    "PATH_DEVICE_NAME": "A path has a reserved Windows device name as a component.",
    "PATH_ALTERNATE_STREAM": "A path contains ':' (an NTFS stream or a GDAL driver prefix).",
    "PATH_EMPTY": "A path is empty or blank.",
    "PATH_INVALID_CHARACTERS": "A path contains control characters or lone surrogates.",
    "PATH_TOO_LONG": "A path or one of its names is longer than the file system allows.",
    "PATH_SYMLINK_LOOP": "A path goes through a symlink loop.",
    "PATH_UNRESOLVABLE": "A path's symlinks cannot be read to resolve it.",
    # -- outputs
    "DUPLICATE_OUTPUT": "Two steps write the same output path.",
    "OUTPUT_OVERWRITES_INPUT": "An output path is an input of this or another step of the plan.",
    "OUTPUT_REMOTE": "An output path is not a local path.",
    "OUTPUT_FORMAT_REFUSED": "The output format is refused (shapefile).",
    "OUTPUT_FORMAT_UNSUPPORTED": "The operation does not write that output format.",
    "OUTPUT_SIDECAR_EXISTS": "A sidecar beside a raster output path would override the new raster's georeferencing.",
    "OUTPUT_FOLDER_MISSING": "The folder of an output path does not exist.",
    "OUTPUT_IS_DIRECTORY": "An output path names an existing directory.",
    "OUTPUT_EXISTS": "An output path exists and overwrite is not set.",
    "GEOJSON_REQUIRES_WGS84": "A GeoJSON output would not be in WGS 84 (RFC 7946).",
    # -- what flows between steps (headers of input files, simulation of step outputs)
    "KIND_MISMATCH": "A dataset argument would receive the wrong kind (a raster where a vector is expected ...).",
    "GEOMETRY_TYPE_REFUSED": "An argument would receive geometry types the operation refuses (lines as zones ...).",
    "RASTER_GEOGRAPHIC_CRS": "An operation that needs metres would receive a raster in a geographic CRS.",
    "GRID_MISMATCH": "Rasters the operation combines cell by cell would be on different grids.",
    "GEOREF_CONFLICT": "A raster input's tags, sidecar or world file disagree about where it lies.",
    "RASTER_NOT_GEOREFERENCED": "A raster input has no geotransform.",
    "RASTER_ROTATED": "A raster input has a rotated geotransform.",
    "CRS_REQUIRED": "An input declares no CRS.",
    "CRS_COORDINATES_IMPOSSIBLE": "An input labelled geographic has coordinates that cannot be degrees.",
    "CRS_INVALID": "A CRS argument (target_crs) cannot be parsed.",
    "CRS_AMBIGUOUS_SRID": "A CRS argument is a bare SRID without an authority.",
    # -- notes (in PlanValidation.notes; a note never makes a plan invalid)
    "GEOMETRY_CHECK_AT_RUN_TIME": "A note, not an error: a step reads the output of a run_sql step whose geometry "
    "type is known only once it runs (no geometry_type declared); the runner checks it then.",
    # -- containment
    "SQL_NOT_SANDBOXED": "A run_sql step would run with no workspace set, so its SQL may read any file of the host.",
}
