"""The workspace policy on a real filesystem: what is confined, what is refused, with which code.

Every refusal is checked by its exact code and by evidence that names the argument, because agents
branch on the code and the evidence is how a person finds the bad argument.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mapsmith.errors import ArgumentError, ConfigurationError, PathError
from mapsmith.workspace import Workspace

POSIX_ONLY = pytest.mark.skipif(os.name == "nt", reason="drive letters are valid on Windows")
WINDOWS_ONLY = pytest.mark.skipif(os.name != "nt", reason="drive letters only mean something there")
# Fixture names: "workspace" and "outside", both resolved.
Layout = dict[str, Path]

NEEDS_SYMLINKS = pytest.mark.skipif(
    not hasattr(os, "symlink") or os.name == "nt", reason="creating symlinks needs POSIX here"
)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    """A workspace beside an outside folder, and symlinks that lead from one to the other."""
    workspace = tmp_path / "workspace"
    outside = tmp_path / "outside"
    (workspace / "data").mkdir(parents=True)
    outside.mkdir()
    (workspace / "data" / "parcels.gpkg").write_bytes(b"inside")
    (outside / "secret.gpkg").write_bytes(b"outside")
    if os.name != "nt":
        (workspace / "link_out").symlink_to(outside, target_is_directory=True)
        (workspace / "secret_link.gpkg").symlink_to(outside / "secret.gpkg")
        # Dangling: writing through it would create a file outside.
        (workspace / "dangling.gpkg").symlink_to(outside / "new.gpkg")
        (workspace / "data_link").symlink_to(workspace / "data", target_is_directory=True)
    return {"workspace": workspace.resolve(), "outside": outside.resolve()}


@pytest.fixture
def workspace(layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Workspace:
    monkeypatch.setenv("MAPSMITH_WORKSPACE", str(layout["workspace"]))
    monkeypatch.delenv("MAPSMITH_ALLOW_REMOTE", raising=False)
    return Workspace.from_env()


@pytest.fixture
def unconfined(monkeypatch: pytest.MonkeyPatch) -> Workspace:
    monkeypatch.delenv("MAPSMITH_WORKSPACE", raising=False)
    monkeypatch.delenv("MAPSMITH_ALLOW_REMOTE", raising=False)
    return Workspace.from_env()


def refusal(ws: Workspace, path: str, argument: str = "input_path") -> PathError:
    """Resolve a path that must be refused, and check what every refusal shares."""
    with pytest.raises(PathError) as caught:
        ws.resolve(path, argument=argument)
    error = caught.value
    assert error.evidence["argument"] == argument
    assert error.evidence["path"] == path
    assert error.hint
    return error


@contextmanager
def filesystem_forbidden(*, allow_symlink_reads: bool) -> Iterator[list[str]]:
    """Make every filesystem call fail while the block runs, except lstat/readlink if allowed.

    The patch covers the block only, so pytest's own file access is unaffected.
    """
    calls: list[str] = []
    names = ["stat", "open", "mkdir", "makedirs", "listdir", "scandir", "remove", "rename"]
    if not allow_symlink_reads:
        names += ["lstat", "readlink"]

    def forbidden(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise AssertionError(f"os.{name} called during resolve")

        return call

    saved = {name: getattr(os, name) for name in names}
    saved_open = builtins.open
    try:
        for name in names:
            setattr(os, name, forbidden(name))
        builtins.open = forbidden("builtins.open")
        yield calls
    finally:
        for name, original in saved.items():
            setattr(os, name, original)
        builtins.open = saved_open


# --- paths that are fine -------------------------------------------------------------------------


def test_relative_path_resolves_against_the_workspace(workspace: Workspace, layout: Layout) -> None:
    assert workspace.resolve("data/parcels.gpkg", argument="input_path") == (
        layout["workspace"] / "data" / "parcels.gpkg"
    )


def test_absolute_path_inside_the_workspace_is_fine(workspace: Workspace, layout: Layout) -> None:
    inside = layout["workspace"] / "data" / "parcels.gpkg"
    assert workspace.resolve(str(inside), argument="input_path") == inside


def test_output_in_a_folder_that_does_not_exist_yet_is_fine(workspace: Workspace, layout: Layout) -> None:
    resolved = workspace.resolve("results/2024/buffered.gpkg", argument="output_path")
    assert resolved == layout["workspace"] / "results" / "2024" / "buffered.gpkg"
    assert not (layout["workspace"] / "results").exists(), "resolve must not create folders"


def test_dot_dot_that_stays_inside_is_fine(workspace: Workspace, layout: Layout) -> None:
    resolved = workspace.resolve("data/../data/./parcels.gpkg", argument="input_path")
    assert resolved == layout["workspace"] / "data" / "parcels.gpkg"


def test_the_workspace_root_itself_is_fine(workspace: Workspace, layout: Layout) -> None:
    assert workspace.resolve(".", argument="output_dir") == layout["workspace"]


@NEEDS_SYMLINKS
def test_symlink_that_stays_inside_resolves_to_its_target(workspace: Workspace, layout: Layout) -> None:
    resolved = workspace.resolve("data_link/parcels.gpkg", argument="input_path")
    assert resolved == layout["workspace"] / "data" / "parcels.gpkg"


@pytest.mark.parametrize(
    "path",
    [
        "console.gpkg",  # starts with CON but is not CON
        "nul_results.tif",
        "com10.tif",  # only COM0-9 are devices
        "lpt.shp",
        "data/vsi_notes.txt",  # a /vsi-like prefix followed by a dot is not a GDAL handler
        "data/parcels.gpkg",
        "..\\..\\outside.gpkg",  # on POSIX, one file name with backslashes, inside the workspace
    ],
)
def test_lookalikes_of_refused_forms_are_fine(workspace: Workspace, path: str) -> None:
    if os.name == "nt" and "\\" in path:
        pytest.skip("backslash is a separator on Windows")
    resolved = workspace.resolve(path, argument="input_path")
    assert isinstance(resolved, Path)
    assert resolved.is_relative_to(workspace.root)


# --- escapes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "through_symlink"),
    [
        ("sub/../../outside/secret.gpkg", False),
        ("../outside/secret.gpkg", False),
        ("..", False),
    ],
)
def test_dot_dot_escapes_are_refused(workspace: Workspace, layout: Layout, path: str, through_symlink: bool) -> None:
    error = refusal(workspace, path)
    assert error.code == "PATH_OUTSIDE_WORKSPACE"
    assert error.evidence["workspace_root"] == str(layout["workspace"])
    assert error.evidence["through_symlink"] is through_symlink
    assert str(layout["workspace"]) in error.hint


def test_absolute_path_outside_is_refused(workspace: Workspace, layout: Layout) -> None:
    target = str(layout["outside"] / "secret.gpkg")
    error = refusal(workspace, target)
    assert error.code == "PATH_OUTSIDE_WORKSPACE"
    assert error.evidence["resolved_path"] == target


def test_sibling_with_the_workspace_name_as_prefix_is_refused(workspace: Workspace, layout: Layout) -> None:
    # A prefix test on strings would let /tmp/x/workspace-evil through for /tmp/x/workspace.
    sibling = layout["workspace"].parent / (layout["workspace"].name + "-evil")
    sibling.mkdir()
    assert refusal(workspace, str(sibling / "a.gpkg")).code == "PATH_OUTSIDE_WORKSPACE"


@NEEDS_SYMLINKS
@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("secret_link.gpkg", "secret.gpkg"),  # file symlink pointing out
        ("link_out/new.gpkg", "new.gpkg"),  # output whose parent folder is a symlink out
        ("link_out/deeper/new.gpkg", "deeper/new.gpkg"),  # and below it, not yet existing
        ("dangling.gpkg", "new.gpkg"),  # dangling symlink: writing would create it outside
        # Lexically this is workspace/outside/secret.gpkg, which is inside. The OS follows
        # link_out first, so it really is the outside file.
        ("link_out/../outside/secret.gpkg", "secret.gpkg"),
    ],
)
def test_symlink_escapes_are_refused(workspace: Workspace, layout: Layout, path: str, target: str) -> None:
    error = refusal(workspace, path, argument="output_path")
    assert error.code == "PATH_OUTSIDE_WORKSPACE"
    assert error.evidence["through_symlink"] is True
    assert error.evidence["resolved_path"] == str(layout["outside"] / target)
    assert error.evidence["workspace_root"] == str(layout["workspace"])
    assert "symlink" in error.message


@NEEDS_SYMLINKS
def test_absolute_path_through_a_symlink_out_is_refused(workspace: Workspace, layout: Layout) -> None:
    path = str(layout["workspace"] / "link_out" / "secret.gpkg")
    assert refusal(workspace, path).code == "PATH_OUTSIDE_WORKSPACE"


# --- refused forms ------------------------------------------------------------------------------

REFUSED_EVERYWHERE = [
    ("", "PATH_EMPTY"),
    ("   ", "PATH_EMPTY"),
    ("data/a\x00.gpkg", "PATH_INVALID_CHARACTERS"),
    ("data/a\n.gpkg", "PATH_INVALID_CHARACTERS"),
    ("data/a\t.gpkg", "PATH_INVALID_CHARACTERS"),
    ("data/a\x7f.gpkg", "PATH_INVALID_CHARACTERS"),
    ("data/a\x85.gpkg", "PATH_INVALID_CHARACTERS"),  # C1 control (NEL)
    ("\\\\host\\share\\x.tif", "PATH_UNC"),
    ("//host/share/x.tif", "PATH_UNC"),
    ("\\\\?\\C:\\x.tif", "PATH_UNC"),
    ("\\\\.\\pipe\\x", "PATH_UNC"),
    ("a.tif:stream", "PATH_ALTERNATE_STREAM"),
    ("data/a.tif:Zone.Identifier:$DATA", "PATH_ALTERNATE_STREAM"),
    ("data:stream/a.tif", "PATH_ALTERNATE_STREAM"),
    ('NETCDF:"data/a.nc":temperature', "PATH_ALTERNATE_STREAM"),  # GDAL subdataset syntax
    ("CON", "PATH_DEVICE_NAME"),
    ("nul.txt", "PATH_DEVICE_NAME"),
    ("data/Com1.tif", "PATH_DEVICE_NAME"),
    ("lpt9.shp", "PATH_DEVICE_NAME"),
    ("aux.tar.gz", "PATH_DEVICE_NAME"),
    ("prn/a.tif", "PATH_DEVICE_NAME"),
    ("nul .txt", "PATH_DEVICE_NAME"),  # Windows drops the trailing space
    ("COM1:", "PATH_DEVICE_NAME"),
    ("/vsicurl/https://example.com/a.tif", "PATH_VIRTUAL_FS"),
    ("/vsizip/data/a.zip/a.shp", "PATH_VIRTUAL_FS"),
    ("/vsis3/bucket/key.tif", "PATH_VIRTUAL_FS"),
    ("/vsimem/scratch.tif", "PATH_VIRTUAL_FS"),
    ("/VSIGS/bucket/key.tif", "PATH_VIRTUAL_FS"),
    ("/vsicurl?url=https%3A%2F%2Fexample.com%2Fa.tif", "PATH_VIRTUAL_FS"),
    ("GPKG:/vsis3/bucket/a.gpkg", "PATH_VIRTUAL_FS"),  # after a driver prefix
    ("data/../vsicurl/a.tif", "PATH_VIRTUAL_FS"),  # after a local prefix
    ("/vsizip//vsicurl/https://example.com/a.zip", "PATH_VIRTUAL_FS"),
    ("http://example.com/a.tif", "PATH_URL"),
    ("https://example.com/a.tif", "PATH_URL"),
    ("HTTPS://example.com/a.tif", "PATH_URL"),
    ("s3://bucket/key.tif", "PATH_URL"),
    ("gs://bucket/key.tif", "PATH_URL"),
    ("az://container/key.tif", "PATH_URL"),
    ("file:///etc/passwd", "PATH_URL"),
    ("file:/etc/passwd", "PATH_URL"),
    ("ftp://example.com/a.tif", "PATH_URL"),
    ('NETCDF:"https://example.com/a.nc":temperature', "PATH_URL"),  # after a driver prefix
]

DRIVE_LETTERS = [
    ("C:\\data\\a.tif", "PATH_DRIVE_LETTER"),
    ("c:/data/a.tif", "PATH_DRIVE_LETTER"),
    ("D:a.tif", "PATH_DRIVE_LETTER"),
    ("C:\\data\\a.tif:stream", "PATH_DRIVE_LETTER"),
]


@pytest.mark.parametrize(("path", "code"), REFUSED_EVERYWHERE)
def test_refused_forms_under_a_workspace(workspace: Workspace, path: str, code: str) -> None:
    assert refusal(workspace, path).code == code


@pytest.mark.parametrize(("path", "code"), REFUSED_EVERYWHERE)
def test_refused_forms_without_a_workspace(unconfined: Workspace, path: str, code: str) -> None:
    assert refusal(unconfined, path, argument="raster").code == code


@POSIX_ONLY
@pytest.mark.parametrize(("path", "code"), DRIVE_LETTERS)
def test_drive_letters_are_refused_on_posix(workspace: Workspace, unconfined: Workspace, path: str, code: str) -> None:
    assert refusal(workspace, path).code == code
    assert refusal(unconfined, path).code == code


@WINDOWS_ONLY
def test_drive_letter_is_a_path_on_windows_but_a_stream_after_it_is_not(
    unconfined: Workspace,
) -> None:
    assert isinstance(unconfined.resolve("C:\\data\\a.tif", argument="raster"), Path)
    assert refusal(unconfined, "C:\\data\\a.tif:stream").code == "PATH_ALTERNATE_STREAM"


@pytest.mark.parametrize(
    "path",
    ["", "a\x00b", "//host/share/x", "a.tif:s", "CON", "/vsicurl/x", "http://x/a"],
)
def test_form_refusals_touch_no_file(workspace: Workspace, path: str) -> None:
    with filesystem_forbidden(allow_symlink_reads=False) as calls:
        with pytest.raises(PathError):
            workspace.resolve(path, argument="input_path")
    assert calls == []


@pytest.mark.parametrize("path", ["data/parcels.gpkg", "results/new.gpkg", "link_out/new.gpkg"])
def test_resolving_reads_symlinks_and_nothing_else(workspace: Workspace, path: str) -> None:
    with filesystem_forbidden(allow_symlink_reads=True) as calls:
        try:
            workspace.resolve(path, argument="input_path")
        except PathError:
            pass  # link_out escapes; what matters is that nothing was opened or created
    assert calls == []


def test_a_non_string_path_is_an_argument_error(workspace: Workspace) -> None:
    with pytest.raises(ArgumentError) as caught:
        workspace.resolve(None, argument="input_path")  # type: ignore[arg-type]
    assert caught.value.evidence["argument"] == "input_path"


# --- remote forms -------------------------------------------------------------------------------

REMOTE = [
    ("https://example.com/a.tif", "PATH_URL"),
    ("s3://bucket/key.tif", "PATH_URL"),
    ("/vsicurl/https://example.com/a.tif", "PATH_VIRTUAL_FS"),
    ("/vsizip/data/a.zip/a.shp", "PATH_VIRTUAL_FS"),
]


@pytest.mark.parametrize(("path", "code"), REMOTE)
def test_remote_forms_pass_unchanged_when_allowed_and_unconfined(
    monkeypatch: pytest.MonkeyPatch, path: str, code: str
) -> None:
    monkeypatch.delenv("MAPSMITH_WORKSPACE", raising=False)
    monkeypatch.setenv("MAPSMITH_ALLOW_REMOTE", "1")
    ws = Workspace.from_env()
    resolved = ws.resolve(path, argument="raster")
    assert resolved == path
    assert isinstance(resolved, str)


@pytest.mark.parametrize(("path", "code"), REMOTE)
def test_remote_forms_are_refused_under_a_workspace_even_if_allowed(layout: Layout, path: str, code: str) -> None:
    # from_env refuses this combination, but a hand-built Workspace must not be a way around it.
    ws = Workspace(root=layout["workspace"], allow_remote=True)
    error = refusal(ws, path)
    assert error.code == "PATH_REMOTE_UNDER_WORKSPACE"
    assert error.evidence["workspace_root"] == str(layout["workspace"])


def test_allowed_remote_still_refuses_bad_characters_and_local_forms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MAPSMITH_WORKSPACE", raising=False)
    monkeypatch.setenv("MAPSMITH_ALLOW_REMOTE", "1")
    ws = Workspace.from_env()
    assert refusal(ws, "https://example.com/a\x00.tif").code == "PATH_INVALID_CHARACTERS"
    assert refusal(ws, "//host/share/x.tif").code == "PATH_UNC"


# --- without a workspace ------------------------------------------------------------------------


def test_unconfined_allows_local_paths_anywhere(unconfined: Workspace, layout: Layout) -> None:
    target = layout["outside"] / "secret.gpkg"
    assert unconfined.resolve(str(target), argument="input_path") == target
    assert unconfined.root is None


def test_unconfined_resolves_relative_paths_against_the_current_directory(
    unconfined: Workspace, layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(layout["outside"])
    assert unconfined.resolve("secret.gpkg", argument="input_path") == (layout["outside"] / "secret.gpkg")


# --- configuration ------------------------------------------------------------------------------


def test_from_env_resolves_the_root(layout: Layout, tmp_path: Path) -> None:
    if os.name == "nt":
        pytest.skip("creating symlinks needs POSIX here")
    alias = tmp_path / "alias"
    alias.symlink_to(layout["workspace"], target_is_directory=True)
    ws = Workspace.from_env({"MAPSMITH_WORKSPACE": str(alias)})
    assert ws.root == layout["workspace"]
    assert ws.allow_remote is False


def test_from_env_with_nothing_set_is_unconfined_and_local() -> None:
    assert Workspace.from_env({}) == Workspace(root=None, allow_remote=False)


def test_from_env_allow_remote_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAPSMITH_WORKSPACE", raising=False)
    monkeypatch.setenv("MAPSMITH_ALLOW_REMOTE", "1")
    assert Workspace.from_env() == Workspace(root=None, allow_remote=True)


@pytest.mark.parametrize("kind", ["missing", "file", "empty", "nul"])
def test_from_env_refuses_an_unusable_workspace(tmp_path: Path, kind: str) -> None:
    values = {
        "missing": str(tmp_path / "nope"),
        "file": str(tmp_path / "a_file"),
        "empty": "",  # set but empty must not silently mean unconfined
        "nul": "a\x00b",
    }
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ConfigurationError) as caught:
        Workspace.from_env({"MAPSMITH_WORKSPACE": values[kind]})
    assert caught.value.code == "WORKSPACE_INVALID"
    assert caught.value.evidence["workspace"] == values[kind]
    assert caught.value.hint


def test_from_env_refuses_remote_with_a_workspace(layout: Layout) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Workspace.from_env({"MAPSMITH_WORKSPACE": str(layout["workspace"]), "MAPSMITH_ALLOW_REMOTE": "1"})
    assert caught.value.code == "REMOTE_WITH_WORKSPACE"


@pytest.mark.parametrize("value", ["0", ""])
def test_from_env_reads_zero_and_empty_as_no_remote(value: str) -> None:
    assert Workspace.from_env({"MAPSMITH_ALLOW_REMOTE": value}).allow_remote is False


@pytest.mark.parametrize("value", ["true", "yes", " 1"])
def test_from_env_refuses_an_ambiguous_remote_flag(value: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Workspace.from_env({"MAPSMITH_ALLOW_REMOTE": value})
    assert caught.value.evidence["allow_remote"] == value


# --- labels -------------------------------------------------------------------------------------


def test_label_inside_the_workspace_is_relative_with_slashes(workspace: Workspace, layout: Layout) -> None:
    path = layout["workspace"] / "data" / "parcels.gpkg"
    assert workspace.relative_label(path) == "data/parcels.gpkg"
    assert workspace.relative_label(layout["workspace"]) == "."


def test_label_outside_the_workspace_is_absolute_posix(workspace: Workspace, layout: Layout) -> None:
    path = layout["outside"] / "secret.gpkg"
    assert workspace.relative_label(path) == path.as_posix()


def test_label_without_a_workspace_is_absolute_posix(unconfined: Workspace, layout: Layout) -> None:
    path = layout["workspace"] / "data" / "parcels.gpkg"
    assert unconfined.relative_label(path) == path.as_posix()


def test_label_of_a_resolved_path_round_trips(workspace: Workspace) -> None:
    resolved = workspace.resolve("results/out.gpkg", argument="output_path")
    assert isinstance(resolved, Path)
    assert workspace.relative_label(resolved) == "results/out.gpkg"


# --- UNC paths (MAPSMITH_ALLOW_UNC) -------------------------------------------------------------
# This machine is POSIX, where "//server/share" is a local folder: these tests check the policy's
# path logic on a hand-built Workspace whose root is a share, as a Windows server would hold it.
# Untested here: from_env accepting a real share, and symlinks on a share (Windows only).

UNC_ROOT = Path("//fileserver/gis/project")


def unc_workspace(allow_unc: bool = True) -> Workspace:
    return Workspace(root=UNC_ROOT, allow_remote=False, allow_unc=allow_unc)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("\\\\fileserver\\gis\\project\\parcels.gpkg", "//fileserver/gis/project/parcels.gpkg"),
        ("//fileserver/gis/project/roads/roads.shp", "//fileserver/gis/project/roads/roads.shp"),
        ("\\\\FILESERVER\\GIS\\Project\\a.tif", "//FILESERVER/GIS/Project/a.tif"),  # SMB names are case-blind
        ("\\\\fileserver\\gis\\project\\x\\..\\a.tif", "//fileserver/gis/project/a.tif"),
        ("\\\\fileserver\\gis\\project", "//fileserver/gis/project"),
    ],
)
def test_unc_paths_inside_a_unc_workspace_are_allowed_when_opted_in(path: str, expected: str) -> None:
    assert unc_workspace().resolve(path, argument="input_path") == Path(expected)


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("\\\\fileserver\\gis\\other\\a.gpkg", "PATH_OUTSIDE_WORKSPACE"),  # another folder of the share
        ("\\\\fileserver\\gis\\project\\..\\other\\a.gpkg", "PATH_OUTSIDE_WORKSPACE"),
        ("\\\\fileserver\\gis\\projectx\\a.gpkg", "PATH_OUTSIDE_WORKSPACE"),  # a prefix is not a parent
        ("\\\\otherhost\\gis\\project\\a.gpkg", "PATH_OUTSIDE_WORKSPACE"),
        ("\\\\fileserver\\c$\\project\\a.gpkg", "PATH_OUTSIDE_WORKSPACE"),
        ("\\\\?\\UNC\\fileserver\\gis\\project\\a.gpkg", "PATH_UNC"),  # device namespace, never a share
        ("\\\\.\\pipe\\x", "PATH_UNC"),
        ("\\\\fileserver\\gis\\project\\a.gpkg:hidden", "PATH_ALTERNATE_STREAM"),
        ("\\\\fileserver\\gis\\project\\nul.tif", "PATH_DEVICE_NAME"),
    ],
)
def test_unc_paths_outside_the_share_folder_are_refused(path: str, code: str) -> None:
    error = refusal(unc_workspace(), path)
    assert error.code == code
    assert error.evidence["argument"] == "input_path"


def test_unc_paths_are_refused_without_the_opt_in_or_a_unc_workspace(layout: Layout) -> None:
    path = "\\\\fileserver\\gis\\project\\a.gpkg"
    assert refusal(unc_workspace(allow_unc=False), path).code == "PATH_UNC"
    # Opted in, but the workspace is a local folder: UNC paths stay refused as before.
    assert refusal(Workspace(root=layout["workspace"], allow_remote=False, allow_unc=True), path).code == "PATH_UNC"
    assert refusal(Workspace(root=None, allow_remote=False, allow_unc=True), path).code == "PATH_UNC"


def test_unc_relative_paths_resolve_under_the_share_root() -> None:
    assert unc_workspace().resolve("roads/roads.shp", argument="input_path") == UNC_ROOT / "roads" / "roads.shp"
    assert refusal(unc_workspace(), "../other/a.gpkg").code == "PATH_OUTSIDE_WORKSPACE"
    assert refusal(unc_workspace(), "roads/a.gpkg:stream").code == "PATH_ALTERNATE_STREAM"


def test_from_env_unc_workspace_needs_the_opt_in() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Workspace.from_env({"MAPSMITH_WORKSPACE": "\\\\fileserver\\gis\\project"})
    assert caught.value.code == "WORKSPACE_INVALID"
    assert "MAPSMITH_ALLOW_UNC=1" in caught.value.hint


@POSIX_ONLY
def test_from_env_unc_workspace_on_posix_says_to_mount_the_share() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Workspace.from_env({"MAPSMITH_WORKSPACE": "//fileserver/gis/project", "MAPSMITH_ALLOW_UNC": "1"})
    assert caught.value.code == "WORKSPACE_INVALID"
    assert "mount" in caught.value.hint


def test_from_env_opt_in_with_a_local_workspace_changes_nothing(layout: Layout) -> None:
    ws = Workspace.from_env({"MAPSMITH_WORKSPACE": str(layout["workspace"]), "MAPSMITH_ALLOW_UNC": "1"})
    assert ws.allow_unc is False
    assert refusal(ws, "\\\\fileserver\\gis\\project\\a.gpkg").code == "PATH_UNC"


@pytest.mark.parametrize("value", ["yes", "true", "2"])
def test_from_env_refuses_an_ambiguous_unc_flag(value: str) -> None:
    with pytest.raises(ConfigurationError):
        Workspace.from_env({"MAPSMITH_ALLOW_UNC": value})


def test_unc_helpers() -> None:
    from mapsmith.workspace import unc_share, unc_within

    assert unc_share("\\\\srv\\share\\a\\b") == ("srv", "share", "\\a\\b")
    assert unc_share("//srv/share") == ("srv", "share", "")
    assert unc_share("\\\\?\\C:\\x") is None
    assert unc_share("/local/path") is None
    assert unc_within("\\\\srv\\share\\p", "//SRV/Share/p/q.tif") is True
    assert unc_within("\\\\srv\\share\\p", "\\\\srv\\share\\p2\\q.tif") is False
    assert unc_within("\\\\srv\\share\\p", "\\\\srv\\share\\p\\..\\..\\x") is False


# --- sidecars: check_sidecar -------------------------------------------------------------------


@NEEDS_SYMLINKS
def test_check_sidecar_follows_symlinks_and_counts_hard_links(workspace: Workspace, layout: Layout) -> None:
    root = layout["workspace"]
    (root / "data" / "a.prj").symlink_to(layout["outside"] / "secret.gpkg")
    with pytest.raises(PathError) as caught:
        workspace.check_sidecar(root / "data" / "a.prj", argument="input_path", member_of="a.shp")
    assert caught.value.code == "SIDECAR_OUTSIDE_WORKSPACE"
    assert caught.value.evidence["member_of"] == "a.shp"
    os.link(layout["outside"] / "secret.gpkg", root / "data" / "b.prj")
    with pytest.raises(PathError) as caught:
        workspace.check_sidecar(root / "data" / "b.prj", argument="input_path")
    assert (caught.value.code, caught.value.evidence["hard_links"]) == ("PATH_HARD_LINK", 2)
    workspace.check_sidecar(root / "data" / "parcels.gpkg", argument="input_path")  # one link, inside
