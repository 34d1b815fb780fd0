"""band_math: a whitelisted expression language evaluated with numpy on physical band values.

Split from ``raster_ops`` along its seams. Every band is read in physical values (stored x scale +
offset, recorded), so an NDVI of bands stored as scaled integers is the NDVI of the reflectances. This
module must never hand any part of an expression to ``eval``/``exec``/``compile``: the text is parsed
with ``ast.parse`` and only a whitelisted tree is evaluated, on arrays.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError, InputError
from mapsmith_opensource.raster_shared import BAND_MATH_NODATA, FLOAT32_MAX, _engine, _resolve_band

if TYPE_CHECKING:
    import numpy as np

    from mapsmith.runner import RunContext
    from mapsmith_opensource.raster_io import Grid


# -- band_math: a whitelisted expression language ----------------------------------------------

MAX_EXPRESSION_CHARS = 2000
MAX_DEPTH = 60
FUNCTIONS: dict[str, tuple[int, int | None]] = {  # name: (fewest, most arguments)
    "abs": (1, 1),
    "sqrt": (1, 1),
    "log": (1, 1),
    "exp": (1, 1),
    "min": (2, None),
    "max": (2, None),
    "where": (3, 3),
}
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_UNARY = {ast.USub: "-", ast.UAdd: "+"}


def _expression_error(text: str, problem: str, node: ast.AST | None = None, **evidence: Any) -> ArgumentError:
    where = {}
    if node is not None and hasattr(node, "col_offset"):
        where = {"position": node.col_offset, "token": ast.get_source_segment(text, node)}
    return ArgumentError(
        f"expression: {problem}",
        code="EXPRESSION_INVALID",
        evidence={"argument": "expression", "expression": text[:200], **where, **evidence},
        hint="use band names, numbers, + - * / **, comparisons (giving 1 or 0) and the functions "
        f"{', '.join(FUNCTIONS)}; where(condition, a, b) picks a where condition is non-zero",
    )


def parse_expression(text: str, names: Sequence[str] | None) -> tuple[ast.expr, set[str]]:
    """The checked tree of ``text`` and the band names it uses. ``names`` None accepts any name
    (checked later against the inputs' bands). Never evaluates anything."""
    if not text.strip():
        raise _expression_error(text, "the expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise _expression_error(text, f"longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise _expression_error(
            text, f"not a valid expression ({exc.msg} at column {exc.offset})", position=exc.offset
        ) from exc
    except (RecursionError, MemoryError, ValueError) as exc:
        raise _expression_error(text, "too deeply nested") from exc
    used: set[str] = set()
    source = text.strip()

    def check(node: ast.AST, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise _expression_error(source, f"nested deeper than {MAX_DEPTH} levels", node)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise _expression_error(source, f"{ast.get_source_segment(source, node)!r} is not a number", node)
        elif isinstance(node, ast.Name):
            if names is not None and node.id not in names:
                raise _expression_error(
                    source,
                    f"{node.id!r} is not a band name here; the names are {', '.join(names) or '(none)'}",
                    node,
                    names=list(names),
                )
            used.add(node.id)
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            check(node.left, depth + 1)
            check(node.right, depth + 1)
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            check(node.operand, depth + 1)
        elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            check(node.left, depth + 1)
            for comparator in node.comparators:
                check(comparator, depth + 1)
        elif isinstance(node, ast.Call):
            func = node.func
            if not isinstance(func, ast.Name) or func.id not in FUNCTIONS:
                label = func.id if isinstance(func, ast.Name) else ast.get_source_segment(source, func)
                raise _expression_error(source, f"function {label!r} is not allowed", func)
            if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
                raise _expression_error(source, f"{func.id}() takes plain positional arguments only", node)
            fewest, most = FUNCTIONS[func.id]
            if len(node.args) < fewest or (most is not None and len(node.args) > most):
                want = f"{fewest}" if fewest == most else f"at least {fewest}"
                raise _expression_error(source, f"{func.id}() takes {want} argument(s), got {len(node.args)}", node)
            for arg in node.args:
                check(arg, depth + 1)
        else:
            what = {
                ast.Attribute: "attribute access",
                ast.Subscript: "subscripting",
                ast.BoolOp: "'and'/'or' (use where(), or multiply comparisons)",
                ast.Lambda: "lambda",
                ast.IfExp: "'x if c else y' (use where(c, x, y))",
            }.get(type(node), type(node).__name__)
            if isinstance(node, ast.BinOp):
                what = f"operator {type(node.op).__name__}"
            elif isinstance(node, ast.UnaryOp):
                what = f"operator {type(node.op).__name__}"
            elif isinstance(node, ast.Compare):
                what = "comparison " + ", ".join(type(op).__name__ for op in node.ops if type(op) not in _COMPARE)
            raise _expression_error(source, f"{what} is not allowed: {ast.get_source_segment(source, node)!r}", node)

    try:
        check(tree.body, 0)
    except RecursionError as exc:
        raise _expression_error(text, "too deeply nested") from exc
    return tree.body, used


def evaluate_expression(node: ast.expr, bands: dict[str, np.ndarray]) -> Any:
    """Evaluate a tree from ``parse_expression`` on float64 arrays. Numbers become float64 first, so
    no power of constants runs as Python integer arithmetic."""
    import numpy as np

    def ev(n: ast.AST) -> Any:
        if isinstance(n, ast.Constant):
            return np.float64(n.value)
        if isinstance(n, ast.Name):
            return bands[n.id]
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            op = type(n.op)
            if op is ast.Add:
                return np.add(a, b)
            if op is ast.Sub:
                return np.subtract(a, b)
            if op is ast.Mult:
                return np.multiply(a, b)
            if op is ast.Div:
                return np.divide(a, b)
            return np.power(a, b)
        if isinstance(n, ast.UnaryOp):
            value = ev(n.operand)
            return np.negative(value) if isinstance(n.op, ast.USub) else value
        if isinstance(n, ast.Compare):
            compare: dict[type, Callable[[Any, Any], Any]] = {
                ast.Lt: np.less,
                ast.LtE: np.less_equal,
                ast.Gt: np.greater,
                ast.GtE: np.greater_equal,
                ast.Eq: np.equal,
                ast.NotEq: np.not_equal,
            }
            left, result = ev(n.left), None
            for op, right_node in zip(n.ops, n.comparators, strict=True):
                right = ev(right_node)
                part = compare[type(op)](left, right)
                result = part if result is None else np.logical_and(result, part)
                left = right
            return np.asarray(result, dtype="float64")
        if isinstance(n, ast.Call):
            name = n.func.id  # type: ignore[attr-defined]
            args = [ev(a) for a in n.args]
            if name == "abs":
                return np.abs(args[0])
            if name == "sqrt":
                return np.sqrt(args[0])
            if name == "log":
                return np.log(args[0])
            if name == "exp":
                return np.exp(args[0])
            if name == "where":
                return np.where(np.not_equal(args[0], 0), args[1], args[2])
            combine = np.minimum if name == "min" else np.maximum
            value = args[0]
            for other in args[1:]:
                value = combine(value, other)
            return value
        raise AssertionError(f"unchecked node {type(n).__name__}")  # parse_expression let it through

    with np.errstate(all="ignore"):
        return ev(node)


_BINDING = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*=\s*(?:input_paths\[(\d+)\]|(\d+))\s*:\s*(.+?)\s*$")


def parse_bindings(text: str, n_inputs: int) -> dict[str, tuple[int, str]]:
    """{"nir": (0, "4"), ...} from "nir=0:4, red=input_paths[0]:red"."""
    import keyword

    bindings: dict[str, tuple[int, str]] = {}
    for part in text.split(","):
        m = _BINDING.match(part)
        problem = None
        if not m:
            problem = f"cannot read {part.strip()!r}"
        else:
            name, index = m.group(1), int(m.group(2) or m.group(3))
            if keyword.iskeyword(name) or name in FUNCTIONS:
                problem = f"{name!r} is a reserved word or a function name"
            elif name in bindings:
                problem = f"{name!r} is bound twice"
            elif index >= n_inputs:
                problem = f"{part.strip()!r} refers to input_paths[{index}], but {n_inputs} input(s) were given"
        if problem:
            raise ArgumentError(
                f"bands: {problem}",
                code="BANDS_INVALID",
                evidence={"argument": "bands", "bands": text, "inputs": n_inputs},
                hint="write name=<input index>:<band number or band name>, comma-separated, e.g. "
                "'nir=0:4, red=0:3' (input index counts from 0 in input_paths)",
            )
        assert m is not None
        bindings[m.group(1)] = (int(m.group(2) or m.group(3)), m.group(4))
    return bindings


def validate_band_math(ctx: RunContext) -> None:
    n_inputs = len(ctx.arguments["input_paths"])
    text = ctx.arguments.get("bands")
    if text is None:
        if n_inputs > 1:
            raise ArgumentError(
                f"band_math has {n_inputs} inputs and no bands mapping; b1, b2 ... would not say whose bands",
                code="BANDS_REQUIRED",
                evidence={"inputs": n_inputs},
                hint="name each band used, e.g. bands='a=0:1, b=1:1' (input index:band), then use a and b",
            )
        _, used = parse_expression(ctx.arguments["expression"], None)
        bad = sorted(n for n in used if not re.fullmatch(r"b[1-9][0-9]*", n))
        if bad:
            raise ArgumentError(
                f"expression: {bad[0]!r} is not a band name here; without bands the names are b1, b2 ...",
                code="EXPRESSION_INVALID",
                evidence={"argument": "expression", "token": bad[0]},
                hint="use b1, b2 ... (band numbers of input_paths[0]), or name bands with the bands argument",
            )
        return
    bindings = parse_bindings(text, n_inputs)
    parse_expression(ctx.arguments["expression"], list(bindings))


def _same_grid(a: Grid, b: Grid) -> bool:
    if (a.width, a.height) != (b.width, b.height) or not a.crs.equals(b.crs, ignore_axis_order=True):
        return False
    return all(abs(x - y) <= 1e-9 * max(1.0, abs(y)) for x, y in zip(a.transform, b.transform, strict=True))


def _describe(grid: Grid, given: str) -> dict[str, Any]:
    from mapsmith.crs import crs_label

    return {
        "path": given,
        "crs": crs_label(grid.crs),
        "width": grid.width,
        "height": grid.height,
        "transform": [float(v) for v in grid.transform.to_gdal()],
    }


def band_math(ctx: RunContext) -> None:
    import numpy as np

    from mapsmith.crs import crs_label
    from mapsmith_opensource.raster_io import open_grid, write_raster

    _engine(ctx)
    n_inputs = len(ctx.arguments["input_paths"])
    grids = [open_grid(ctx, f"input_paths[{i}]") for i in range(n_inputs)]
    first = grids[0]
    for i, other in enumerate(grids[1:], start=1):
        if not _same_grid(first, other):
            a = _describe(first, ctx.given_paths["input_paths[0]"])
            b = _describe(other, ctx.given_paths[f"input_paths[{i}]"])
            raise InputError(
                f"input_paths[0] ({a['path']}: {a['crs']}, {a['width']} x {a['height']}, transform "
                f"{a['transform']}) and input_paths[{i}] ({b['path']}: {b['crs']}, {b['width']} x {b['height']}, "
                f"transform {b['transform']}) are different grids; band_math combines cells by position and "
                "never resamples silently",
                code="GRID_MISMATCH",
                evidence={"input_paths[0]": a, f"input_paths[{i}]": b},
                hint="put the inputs on one grid first: reproject_raster / resample_raster to the same CRS and "
                "cell size, then clip_raster to the same bounds, and pass those",
            )
    text = ctx.arguments.get("bands")
    if text is None:
        bindings = {f"b{k}": (0, str(k)) for k in range(1, first.count + 1)}
    else:
        bindings = parse_bindings(text, n_inputs)
    node, used = parse_expression(ctx.arguments["expression"], list(bindings))
    resolved: dict[str, dict[str, Any]] = {}
    arrays: dict[str, np.ndarray] = {}
    mask = np.zeros((first.height, first.width), dtype=bool)
    for name in sorted(used):
        index, ref = bindings[name]
        grid = grids[index]
        number = _resolve_band(grid, ref, "bands")
        data = grid.read(number)
        mask |= np.ma.getmaskarray(data)
        arrays[name] = np.ma.filled(data.astype("float64"), np.nan)
        resolved[name] = {"input": f"input_paths[{index}]", "band": number, "band_name": grid.band_names[number - 1]}
    unused = [
        f"input_paths[{i}]"
        for i in range(n_inputs)
        if all(r["input"] != f"input_paths[{i}]" for r in resolved.values())
    ]
    with np.errstate(all="ignore"):
        result = np.broadcast_to(evaluate_expression(node, arrays), mask.shape).astype("float32")
    undefined = ~mask & ~np.isfinite(result)
    n_undefined = int(undefined.sum())
    out_mask = mask | undefined
    valid_values = result[~out_mask]
    nodata = BAND_MATH_NODATA
    if bool((valid_values == nodata).any()):
        nodata = float("nan")
        ctx.notes.append(f"the result holds the value {BAND_MATH_NODATA:g} itself, so nodata is NaN in this output")
    ctx.parameters["x-mapsmith:band_bindings"] = resolved
    ctx.parameters["x-mapsmith:cells_undefined"] = n_undefined
    ctx.crs_decisions.setdefault("analysis_crs", crs_label(first.crs))
    ctx.crs_decisions.setdefault("reason", "computed cell by cell on the inputs' one shared grid")
    ctx.notes.append(
        f"{ctx.arguments['expression']!r} evaluated in float64 and written as float32; {int(mask.sum())} cells "
        f"nodata because a band used was nodata there; {n_undefined} cells had no finite value (division by zero, "
        f"log or sqrt out of domain, overflow) and were written as nodata ({nodata})"
    )
    if unused:
        ctx.notes.append(f"{', '.join(unused)} given but not used by the expression")
    if n_undefined:
        ctx.warn(
            "EXPRESSION_UNDEFINED_CELLS",
            f"{n_undefined} cells had no finite result (division by zero, log/sqrt out of domain or overflow) and "
            "were written as nodata",
            "guard the expression with where(), e.g. where(nir + red == 0, 0, (nir - red) / (nir + red)), if a value "
            "is wanted there",
        )
    write_raster(
        ctx,
        np.ma.masked_array(result, mask=out_mask),
        transform=first.transform,
        crs=first.crs,
        nodata=nodata,
        dtype="float32",
        band_names=[ctx.arguments["expression"][:200]],
        value_range=(-FLOAT32_MAX, FLOAT32_MAX),
    )
